package analysis

import (
	"math"
	"strings"
	"testing"

	"gpuprof/profile"
)

// delayKernel is XLA's DelayKernel as ptxas compiles it for sm_90, one
// thread that waits for the host to release a semaphore or for a timeout:
// the outer loop polls the semaphore with a system-scope strong load, the
// inner one spins on the clock.
const delayName = "_ZN15stream_executor3gpu56_GLOBAL__N__0adca48f_23_delay_kernel_cuda_cu_cc_a9426d2111DelayKernelEPVNS_17GpuSemaphoreStateES2_"

const delaySASS = `
	#line 20
	LDC.64 R2, c[0x0][0x210] {W0 S1}
	ULDC.64 UR4, c[0x0][0x208] {S1}
	CS2R R4, SR_CLOCKLO {S1}
	IADD3 R6, P0, R4, 0xbebc200, RZ {S4}
	IADD3.X R7, RZ, R5, RZ, P0, !PT {S4}
	.L_x_0:
	#line 22
	LDG.E.STRONG.SYS R0, desc[UR4][R2.64] {W1 B0 S1}
	ISETP.NE.AND P0, PT, R0, c[0x0][0x218], PT {B1 S4}
	@!P0 EXIT {S5}
	CS2R R8, SR_CLOCKLO {S1}
	ISETP.GE.U32.AND P0, PT, R8, R6, PT {S4}
	ISETP.GE.U32.AND.EX P0, PT, R9, R7, PT, P0 {S4}
	@P0 EXIT {S5}
	IADD3 R10, P1, R8, 0x400, RZ {S4}
	IADD3.X R11, RZ, R9, RZ, P1, !PT {S4}
	.L_x_1:
	#line 24
	CS2R R12, SR_CLOCKLO {S1}
	ISETP.GE.U32.AND P0, PT, R12, R10, PT {S4}
	ISETP.GE.U32.AND.EX P0, PT, R13, R11, PT, P0 {S4}
	@!P0 BRA ` + "`(.L_x_1)" + ` {S5}
	BRA ` + "`(.L_x_0)" + ` {S5}
	EXIT {S5}
`

// gemmSASS is a compute loop: loads, a multiply-add waiting on them, and
// the loop control.
const gemmSASS = `
	#line 5
	LDC.64 R2, c[0x0][0x210] {W0 S1}
	ULDC.64 UR4, c[0x0][0x208] {S1}
	MOV R9, RZ {S1}
	.L_x_2:
	#line 6
	LDG.E R4, desc[UR4][R2.64] {W1 B0 S1}
	LDG.E R5, desc[UR4][R2.64+0x4] {W2 S1}
	FFMA R9, R4, R5, R9 {B12 S4}
	IADD3 R2, P0, R2, 0x8, RZ {S4}
	ISETP.NE.AND P1, PT, R2, c[0x0][0x218], PT {S4}
	@P1 BRA ` + "`(.L_x_2)" + ` {S5}
	#line 8
	STG.E desc[UR4][R2.64], R9 {S1}
	EXIT {S5}
`

func TestPollKind(t *testing.T) {
	m := parseSASS(t, "p", `
		LDG.E.STRONG.SYS R0, desc[UR4][R2.64]
		LD.E.STRONG.GPU R0, [R2.64]
		LDG.E R0, desc[UR4][R2.64]
		LDG.E.64.SYS R0, desc[UR4][R2.64]
		REDG.E.ADD.STRONG.GPU desc[UR4][R10.64], R15
		CS2R R4, SR_CLOCKLO
		S2UR UR4, SR_GLOBALTIMERLO
		S2R R0, SR_TID.X
		NANOSLEEP 0x100
		EXIT
	`)
	want := []string{"system-visible memory", "GPU-visible memory", "", "system-visible memory", "", "the clock", "the clock", "", "the clock", ""}
	f := m.Func("p")
	for i, w := range want {
		if got := PollKind(&f.Insts[i]); got != w {
			t.Errorf("%s: %q, want %q", f.Insts[i].Text(), got, w)
		}
	}
}

// frameworkKernels builds the JAX program's two kernels: DelayKernel (one
// thread, 1610 ns, spinning) and a compute kernel (16 blocks of 512
// threads, 500 ns), each with its PC samples.
func frameworkKernels(t *testing.T) (*profile.Profile, Modules, *sampled, *sampled) {
	t.Helper()
	delay := parseSASS(t, delayName, delaySASS)
	gemm := parseSASS(t, "gemm_fusion_dot_general_1", gemmSASS)
	const modD, modG = profile.ModuleHash(0xde1a), profile.ModuleHash(0x6e33)
	p := profile.New("jax")
	d := sampledKernelIn(t, p, delay, delayName, modD)
	g := sampledKernelIn(t, p, gemm, "gemm_fusion_dot_general_1", modG)
	p.Add(d.k.ID, profile.GPUTime, 1610)
	p.Add(g.k.ID, profile.GPUTime, 500)
	d.launches(16, 1, 1, 16)
	g.launches(10, 512, 16, 64)
	// The spin: the clock loop holds nearly every sample.
	d.stall(0x60, "long_scoreboard", 30)
	d.stall(0xe0, "selected", 300)
	d.stall(0xe0, "wait", 200)
	d.stall(0xf0, "wait", 250)
	d.stall(0x100, "wait", 250)
	d.stall(0x110, "branch_resolving", 150)
	d.stall(0x00, "selected", 2)
	// The compute loop waits on its loads.
	g.stall(0x30, "selected", 10)
	g.stall(0x40, "selected", 10)
	g.stall(0x50, "long_scoreboard", 120)
	g.stall(0x60, "selected", 10)
	g.stall(0x70, "selected", 10)
	g.stall(0x80, "selected", 10)
	return p, Modules{modD: delay, modG: gemm}, d, g
}

// A kernel that spins on a system-scope load and the clock is waiting: it
// gets a note with its polls, and no advice at all (not the block increase
// GPA's model gave a one-thread grid: 3519x on the H100).
func TestWaitingKernel(t *testing.T) {
	p, mods, d, g := frameworkKernels(t)
	as, err := Advise(p, mods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var note *Advice
	for i, a := range as {
		k := p.KernelOf(a.Hotspots[0].Context)
		if a.Note() {
			if note != nil || k != d.k.ID {
				t.Fatalf("note %d on %s: %+v", i, p.Nodes[k].Frame.Function, a)
			}
			note = &as[i]
			continue
		}
		if k == d.k.ID {
			t.Errorf("advice on the waiting kernel: %s speedup %.2f (%s)", a.Kind, a.Speedup, a.Evidence)
		}
		if k != g.k.ID {
			t.Errorf("advice on kernel %s", p.Nodes[k].Frame.Function)
		}
	}
	if note == nil {
		t.Fatal("no waiting note on DelayKernel")
	}
	if !as[len(as)-1].Note() {
		t.Errorf("the note does not rank last: %+v", as[len(as)-1])
	}
	// 1180 of its 1182 samples are in the two polling loops.
	if !approx(note.Importance, 1180.0/1182) || note.Speedup != 0 || note.JobGain() != 0 || !approx(note.KernelShare, 1610.0/2110) {
		t.Errorf("note: importance %v speedup %v share %v", note.Importance, note.Speedup, note.KernelShare)
	}
	if !strings.Contains(note.Hint, "system-visible memory and the clock") || !strings.Contains(note.Evidence, "LDG.E.STRONG.SYS") || !strings.Contains(note.Evidence, "CS2R") {
		t.Errorf("note text: %s / %s", note.Hint, note.Evidence)
	}
	if h := note.Hotspots[0]; !strings.Contains(h.SASS, "CS2R R12, SR_CLOCKLO") || h.Kernel != "stream_executor::gpu::(anonymous namespace)::DelayKernel(stream_executor::GpuSemaphoreState volatile*, stream_executor::GpuSemaphoreState)" {
		t.Errorf("note's hotspot: %+v", h)
	}
	if w := WaitingKernels(p, as); len(w) != 1 || !w[d.k.ID] {
		t.Errorf("waiting kernels %v", w)
	}
	// Without the polls the same one-thread kernel is compute, and still
	// gets no block increase: one warp has nothing to divide.
	plain := parseSASS(t, delayName, strings.NewReplacer("LDG.E.STRONG.SYS", "LDG.E", "CS2R R4, SR_CLOCKLO", "MOV R4, RZ",
		"CS2R R8, SR_CLOCKLO", "MOV R8, R4", "CS2R R12, SR_CLOCKLO", "IADD3 R12, R12, 0x1, RZ").Replace(delaySASS))
	for h := range mods {
		if mods[h].Func(delayName) != nil {
			mods[h] = plain
		}
	}
	as, err = Advise(p, mods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Note() || a.Kind == OptBlockIncrease && p.KernelOf(a.Hotspots[0].Context) == d.k.ID {
			t.Errorf("%s on the one-thread kernel without polls: %s", a.Kind, a.Evidence)
		}
	}
}

// Block increase spreads the launch's own warps over more SMs: 16 blocks
// of 16 warps become 132 smaller blocks of 256/132 warps on average, not
// 132 SMs full of 16-warp blocks (more work than the launch has). And it
// takes away only what warps of one SM cost each other (item 53): with
// 150 not_selected samples beside the 170 others (T = 320) the bound,
// 320/170 = 1.88x, is above the scheduler model's 1.27x, which stands;
// with 30 (T = 200) the model's 1.46x is above 200/170 = 1.18x, the
// estimate. Without any, the fixture's 16-warp blocks gain nothing.
func TestBlockIncreaseBounded(t *testing.T) {
	for _, notSelected := range []uint64{150, 30, 0} {
		p, mods, _, g := frameworkKernels(t)
		if notSelected > 0 {
			g.stall(0x50, "not_selected", notSelected)
		}
		as, err := Advise(p, mods, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if notSelected == 0 {
			for _, a := range as {
				if a.Kind == OptBlockIncrease {
					t.Errorf("no warp held another up: block increase %.3f (%s)", a.Speedup, a.Evidence)
				}
			}
			continue
		}
		a := findKind(t, as, OptBlockIncrease)
		if k := p.KernelOf(a.Hotspots[0].Context); k != g.k.ID {
			t.Fatalf("block increase on %s", p.Nodes[k].Frame.Function)
		}
		x := NewIndex(p)
		kv, err := newKernelView(x, g.k.ID, mods, Options{})
		if err != nil {
			t.Fatal(err)
		}
		par := kv.parallelism()
		m := schedulerModel{g: H100, rI: par.sel / kv.T}
		bps := float64(par.occ.BlocksPerSM)
		model := m.rate(132, 256.0/132, 1) / m.rate(16, 16, bps)
		gpa := m.rate(132*bps, 16, bps) / m.rate(16, 16, bps)
		bound := kv.T / (kv.T - float64(notSelected))
		want := math.Min(model, bound)
		if !approx(a.Speedup, want) || want >= gpa || !strings.Contains(a.Hint, "256 warps into 132 smaller blocks") {
			t.Fatalf("%d not selected: block increase %.3f (%s), want %.3f (the model %.3f, the bound %.3f; GPA's unbounded model: %.3f)", notSelected, a.Speedup, a.Hint, want, model, bound, gpa)
		}
		if (notSelected == 150) != (model < bound) || (notSelected == 150) != !strings.Contains(a.Evidence, "item 53") {
			t.Errorf("%d not selected: model %.3f, bound %.3f; %s", notSelected, model, bound, a.Evidence)
		}
	}
}

// An eq. 3 estimate that removes (nearly) every sample is beyond what the
// model bounds: n/a with the reason, and the advice stays.
func TestEstimateNA(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		LDG.E R4, desc[UR4][R2.64] {W1 S1}
		FADD R5, R4, R4 {B1 S4}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x00, "no_instructions", 995)
	s.stall(0x10, "selected", 5)
	as := s.advise(t, m, Options{})
	a := findKind(t, as, OptFunctionSplit)
	if a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "eq. 3 cannot bound") {
		t.Fatalf("function split: speedup %v, n/a %q", a.Speedup, a.SpeedupNA)
	}
	// The issue bound: the instructions a fix keeps need their selected
	// samples, so removing stalls cannot go below them: 100 of 1000
	// samples bound any estimate to 10x.
	s = sampledKernel(t, m, "k", mod1)
	s.stall(0x10, "long_scoreboard", 900)
	s.stall(0x10, "selected", 100)
	x := NewIndex(s.p)
	kv, err := newKernelView(x, s.k.ID, Modules{mod1: m}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mt := match{kind: OptCodeReordering, est: estHiding, M: 900, hots: []hot{{fv: kv.fns[0], i: 0, pair: 1}}}
	if why := kv.unjustified(mt, 9.5); why != "" {
		t.Errorf("9.5x of 1000 samples with 100 selected: %q", why)
	}
	if why := kv.unjustified(mt, 12); !strings.Contains(why, "above the 10.00x the kernel's issue allows") {
		t.Errorf("12x: %q", why)
	}
}

// Kernels launched from a framework's autotuner or compiler are marked,
// and advice on them ranks after advice on the program's own work, even
// when it would save more.
func TestFrameworkPhase(t *testing.T) {
	for _, tc := range []struct {
		f    profile.Frame
		want string
	}{
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/xla_cuda_plugin.so", Function: "_ZN3xla3gpu23GemmFusionAutotunerImpl7ProfileEv"}, PhaseAutotuning},
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/xla_cuda_plugin.so", Function: "_ZN3xla3gpu22GpuConvAlgorithmPicker3RunEv"}, PhaseAutotuning},
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/xla_cuda_plugin.so", Function: "_ZN3xla3gpu11GpuCompiler10RunBackendEv"}, PhaseCompile},
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/xla_cuda_plugin.so", Function: "_ZN3xla24PjRtStreamExecutorClient7CompileEv"}, PhaseCompile},
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/xla_cuda_plugin.so", Function: "_ZN3xla3gpu14GpuExecutable15ExecuteOnStreamEv"}, ""},
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/libtorch_cuda.so", Function: "cudnnFindConvolutionForwardAlgorithmEx"}, PhaseAutotuning},
		{profile.Frame{Kind: profile.KindHostFrame, Module: "/x/xla_cuda_plugin.so", Function: "_ZNSt17_Function_handlerIFvvEZN3xla3FooEvE3$_0E9_M_invokeERKSt9_Any_data"}, ""},
		{profile.Frame{Kind: profile.KindHostFrame, File: "/env/site-packages/triton/runtime/autotuner.py", Function: "Autotuner._bench"}, PhaseAutotuning},
		{profile.Frame{Kind: profile.KindHostFrame, File: "/env/site-packages/triton/runtime/autotuner.py", Function: "Autotuner.run"}, ""},
		{profile.Frame{Kind: profile.KindHostFrame, File: "/env/site-packages/torch/_inductor/runtime/triton_heuristics.py", Function: "CachingAutotuner.benchmark_all_configs"}, PhaseAutotuning},
		{profile.Frame{Kind: profile.KindHostFrame, File: "/env/site-packages/torch/_inductor/runtime/benchmarking.py", Function: "Benchmarker.benchmark_gpu"}, PhaseAutotuning},
		{profile.Frame{Kind: profile.KindHostFrame, File: "/env/site-packages/jax/_src/compiler.py", Function: "backend_compile"}, PhaseCompile},
		{profile.Frame{Kind: profile.KindHostFrame, File: "/home/u/train.py", Function: "workbench"}, ""},
	} {
		if got := FramePhase(tc.f); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.f.File, tc.f.Function, got, tc.want)
		}
	}

	// The same two compute kernels; the larger one runs under XLA's
	// autotuner.
	m := parseSASS(t, "gemm_fusion_dot_general_1", gemmSASS)
	p := profile.New("jax")
	autotune := []profile.Frame{
		{Kind: profile.KindHostFrame, Module: "/lib/x86_64-linux-gnu/libc.so.6", Offset: 0x129ecc},
		{Kind: profile.KindHostFrame, Module: "/env/site-packages/jax_plugins/xla_cuda_plugin.so", Function: "_ZN3xla3gpu23GemmFusionAutotunerImpl7ProfileEv"},
		{Kind: profile.KindHostFrame, Module: "/env/site-packages/jax_plugins/xla_cuda_plugin.so", Function: "_ZN3xla3gpu14GpuExecutable15ExecuteOnStreamEv"},
	}
	user := []profile.Frame{
		{Kind: profile.KindHostFrame, Module: "/usr/bin/python3.12", Offset: 0x657a05},
		{Kind: profile.KindHostFrame, File: "/home/u/matmul.py", Function: "step", Line: 9},
		{Kind: profile.KindHostFrame, Module: "/env/site-packages/jax_plugins/xla_cuda_plugin.so", Function: "_ZN3xla3gpu14GpuExecutable15ExecuteOnStreamEv"},
	}
	const mod = profile.ModuleHash(0x6e33)
	tuned := sampledKernelAt(t, p, m, "gemm_fusion_dot_general_1", mod, autotune...)
	mine := sampledKernelAt(t, p, m, "gemm_fusion_dot_general_1", mod, user...)
	p.Add(tuned.k.ID, profile.GPUTime, 3000)
	p.Add(mine.k.ID, profile.GPUTime, 1000)
	for _, s := range []*sampled{tuned, mine} {
		s.stall(0x30, "selected", 10)
		s.stall(0x50, "long_scoreboard", 120)
		s.stall(0x60, "selected", 10)
		s.launches(1, 128, 1, 16)
	}
	if KernelPhase(p, tuned.k.ID) != PhaseAutotuning || KernelPhase(p, mine.k.ID) != "" {
		t.Fatalf("phases %q %q", KernelPhase(p, tuned.k.ID), KernelPhase(p, mine.k.ID))
	}
	as, err := Advise(p, Modules{mod: m}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	seenTuned := false
	for _, a := range as {
		tunedAdvice := p.KernelOf(a.Hotspots[0].Context) == tuned.k.ID
		if tunedAdvice != (a.Phase == PhaseAutotuning) {
			t.Fatalf("%s: phase %q", a.Kind, a.Phase)
		}
		if tunedAdvice {
			seenTuned = true
		} else if seenTuned {
			t.Fatalf("advice on the program's kernel (%s) ranks after advice on the autotuner's", a.Kind)
		}
	}
	if !seenTuned || as[0].Phase != "" || as[0].JobGain() >= findKindPhase(as, as[0].Kind, PhaseAutotuning).JobGain() {
		t.Fatalf("first advice %s (phase %q)", as[0].Kind, as[0].Phase)
	}
	// The verdict weighs the program's own work only.
	if best, _ := NothingBigToGain(as); best == nil || best.Phase != "" {
		t.Fatalf("best advice %+v", best)
	}
}

func findKindPhase(as []Advice, kind, phase string) Advice {
	for _, a := range as {
		if a.Kind == kind && a.Phase == phase {
			return a
		}
	}
	return Advice{}
}
