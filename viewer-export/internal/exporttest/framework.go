package exporttest

import (
	_ "embed"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/sass"
)

// The SASS (nvdisasm text) of the framework profile's kernels: XLA's
// DelayKernel, one thread polling a semaphore with a system-scope load and
// spinning on the clock, and a compute loop without line information, as
// XLA's generated kernels have none.
var (
	//go:embed delay.sass.txt
	delaySASS []byte
	//go:embed gemm.sass.txt
	gemmSASS []byte
)

// Names in the framework profile.
const (
	DelayKernel = "_ZN15stream_executor3gpu56_GLOBAL__N__0adca48f_23_delay_kernel_cuda_cu_cc_a9426d2111DelayKernelEPVNS_17GpuSemaphoreStateES2_"
	GemmKernel  = "gemm_fusion_dot_general_1"
	// ThreadLambda is clang's name of a lambda run by the framework's
	// thread pool: one symbol, '$' included.
	ThreadLambda = "_ZNSt17_Function_handlerIFvvEZN3tsl6thread10ThreadPoolC1EPNS1_3EnvEE3$_0E9_M_invokeERKSt9_Any_data"
	DelayModule  = profile.ModuleHash(0xde1a7000000000aa)
	GemmModule   = profile.ModuleHash(0x6e3300000000bbbb)
)

// Host frames of the framework profile: the framework's own autotuning
// thread (libc and the XLA plugin only), and the program's Python frames
// below the interpreter and above JAX.
var (
	libc   = "/lib/x86_64-linux-gnu/libc.so.6"
	plugin = "/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
	jaxlib = "/venv/lib/python3.12/site-packages/jaxlib/libjax_common.so"
	python = "/usr/bin/python3.12"

	AutotuneThread = []profile.Frame{
		{Kind: profile.KindHostFrame, Module: libc, Offset: 0x129ecc},
		{Kind: profile.KindHostFrame, Module: libc, Function: "start_thread"},
		{Kind: profile.KindHostFrame, Module: plugin, Function: ThreadLambda},
		{Kind: profile.KindHostFrame, Module: plugin, Function: "_ZN3xla3gpu23GemmFusionAutotunerImpl7ProfileEv"},
		{Kind: profile.KindHostFrame, Module: plugin, Function: "_ZN3xla3gpu20AutotunerCompileUtil17ProfileExecutableEv"},
	}
	TimerFrame   = profile.Frame{Kind: profile.KindHostFrame, Module: plugin, Function: "_ZN15stream_executor3gpu8GpuTimer6CreateEv"}
	ExecuteFrame = profile.Frame{Kind: profile.KindHostFrame, Module: plugin, Function: "_ZN3xla3gpu13GpuExecutable15ExecuteOnStreamEv"}
	ProgramPath  = []profile.Frame{
		{Kind: profile.KindHostFrame, Module: python, Offset: 0x657a05},
		{Kind: profile.KindHostFrame, Module: python, Function: "_PyEval_EvalFrameDefault"},
		{Kind: profile.KindHostFrame, File: "/home/user/matmul.py", Function: "<module>", Line: 18},
		{Kind: profile.KindHostFrame, File: "/home/user/matmul.py", Function: "step", Line: 11},
		{Kind: profile.KindHostFrame, File: "/venv/lib/python3.12/site-packages/jax/_src/pjit.py", Function: "cache_miss", Line: 331},
		{Kind: profile.KindHostFrame, Module: python, Function: "_PyObject_MakeTpCall"},
		{Kind: profile.KindHostFrame, Module: jaxlib, Function: "_ZN3xla24PjRtCApiLoadedExecutable7ExecuteEv"},
		ExecuteFrame,
	}
)

// Framework returns a one-rank profile shaped as the JAX program's PC
// sampling capture on the H100, with the parsed SASS of its kernels:
// DelayKernel (61% of the GPU time, waiting) and a matrix-product kernel
// launched once by XLA's autotuner and ten times by the program.
func Framework() (*profile.Profile, analysis.Modules) {
	dm, err := sass.Parse(delaySASS)
	must(err)
	gm, err := sass.Parse(gemmSASS)
	must(err)
	p := profile.New("jax-matmul")
	ri := p.Rank(0)
	ri.Host, ri.GPU, ri.Mode, ri.Source = "node00", "NVIDIA H100 80GB HBM3", "pcsampling", "synthetic"
	ri.BlockP, ri.KernelK = 1, 1
	ri.Launches, ri.LaunchesTraced = 27, 27
	p.Synthetic = true
	p.AddModule(profile.Module{Hash: DelayModule, Size: 184696, Name: "xla_cuda_plugin.so", SM: 90})
	p.AddModule(profile.Module{Hash: GemmModule, Size: 31512, Name: GemmKernel, SM: 90})
	p.AddFunc(DelayModule, DelayKernel)
	p.AddFunc(GemmModule, GemmKernel)

	delay := kernelAt(p, dm, DelayModule, DelayKernel, append(append([]profile.Frame(nil), AutotuneThread...), TimerFrame))
	p.Add(delay.id, profile.GPUTime, 1_606_400_000)
	launches(p, delay.id, 16, 1, 1, 16)
	delay.sample(p, []pcSamples{{0x60, "long_scoreboard", 3000}, {0xe0, "selected", 30000}, {0xe0, "wait", 20000},
		{0xf0, "wait", 25000}, {0x100, "wait", 25000}, {0x110, "branch_resolving", 15000}, {0x00, "selected", 20}})

	tuned := kernelAt(p, gm, GemmModule, GemmKernel, append(append([]profile.Frame(nil), AutotuneThread...), ExecuteFrame))
	p.Add(tuned.id, profile.GPUTime, 1_500_000)
	launches(p, tuned.id, 1, 384, 64, 96)
	mine := kernelAt(p, gm, GemmModule, GemmKernel, ProgramPath)
	p.Add(mine.id, profile.GPUTime, 1_100_000)
	launches(p, mine.id, 10, 384, 64, 96)
	for _, k := range []placed{tuned, mine} {
		k.sample(p, []pcSamples{{0x30, "selected", 900}, {0x40, "selected", 800}, {0x50, "long_scoreboard", 6000},
			{0x50, "selected", 700}, {0x60, "selected", 600}, {0x70, "selected", 500}, {0x80, "selected", 400}})
	}
	done := profile.New(p.Job)
	done.Rank(0).Batches = 1
	must(done.AsItem(0, 1))
	must(p.AsItem(0, 0))
	must(p.Merge(done))
	must(p.Validate())
	return p, analysis.Modules{DelayModule: dm, GemmModule: gm}
}

// pcSamples are n PC samples of a stall reason at an instruction offset.
type pcSamples struct {
	off    uint64
	reason string
	n      uint64
}

// sample adds PC samples at the kernel's instructions.
func (k placed) sample(p *profile.Profile, ss []pcSamples) {
	for _, s := range ss {
		p.Add(k.inst[s.off], profile.StallMetric(s.reason), s.n)
		p.Add(k.inst[s.off], profile.InstSamples, s.n)
	}
}

// placed is a kernel context and its instruction nodes by offset.
type placed struct {
	id   profile.NodeID
	inst map[uint64]profile.NodeID
}

// kernelAt adds kernel name of module mod under the host frames, with
// instruction nodes mirroring its SASS (loops and lines from the
// listing; no line node where the code has no line information).
func kernelAt(p *profile.Profile, m *sass.Module, mod profile.ModuleHash, name string, host []profile.Frame) placed {
	k := p.Child(p.Path(host...).ID, profile.Frame{Kind: profile.KindKernel, Module: mod.String(), Function: name})
	fn := p.Child(k.ID, profile.Frame{Kind: profile.KindGPUFunction, Module: mod.String(), Function: name})
	out := placed{id: k.ID, inst: map[uint64]profile.NodeID{}}
	f := m.Func(name)
	g := f.CFG()
	for i := range f.Insts {
		parent := fn.ID
		for _, li := range g.LoopNest(g.BlockOf(i)) {
			lp := g.Loops[li]
			loc := m.Location(lp.Loc)
			file := ""
			if loc.File >= 0 {
				file = m.File(loc.File)
			}
			parent = p.Child(parent, profile.Frame{Kind: profile.KindLoop, File: file, Line: uint32(max(loc.Line, 0)), Offset: f.Insts[g.Blocks[lp.Header].Start].Offset}).ID
		}
		if loc := m.Location(f.Insts[i].Loc); loc.File >= 0 {
			parent = p.Child(parent, profile.Frame{Kind: profile.KindLine, File: m.File(loc.File), Line: uint32(loc.Line)}).ID
		}
		out.inst[f.Insts[i].Offset] = p.Child(parent, profile.Frame{Kind: profile.KindInstruction, Offset: f.Insts[i].Offset}).ID
	}
	return out
}

// launches records n launches of grid blocks of threads threads using
// regs registers per thread.
func launches(p *profile.Profile, k profile.NodeID, n, threads, grid, regs uint64) {
	p.Add(k, profile.GPULaunches, n)
	p.Add(k, profile.LaunchBlockThreads, n*threads)
	p.Add(k, profile.LaunchGridBlocks, n*grid)
	p.Add(k, profile.LaunchWithAttrs, n)
	p.Add(k, profile.LaunchRegs, n*regs)
}
