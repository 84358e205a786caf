package analysis

import (
	"regexp"
	"strings"

	"gpuprof/profile"
	"gpuprof/symname"
)

// Framework phases whose kernels the program does not repeat: a
// framework compiles its graphs once and times candidate kernels
// (autotuning) before it runs the chosen ones. Advice on kernels launched
// there ranks after advice on the program's repeated work (SortAdvice).
// docs/advice.md ("Waiting kernels and framework phases") states the
// rules.
const (
	PhaseAutotuning = "autotuning"
	PhaseCompile    = "compile"
)

// Native functions (demangled) of autotuners: XLA's GemmFusionAutotuner,
// AutotunerUtil, AutotunerCompileUtil and GpuConvAlgorithmPicker, cuDNN's
// find calls (PyTorch's cudnn.benchmark).
var nativeAutotune = regexp.MustCompile(`(?i)autotun|AlgorithmPicker|cudnnFind|get_plans_from_find`)

// Python functions of autotuners and benchmark loops: triton.autotune's
// _bench, triton.testing.do_bench, TorchInductor's benchmarking and
// autotune_to_one_config, JAX's and Pallas' autotuning helpers.
var pythonAutotune = regexp.MustCompile(`(?i)autotun|(^|_)(do_)?bench(mark[a-z_]*)?($|_)`)

// Python files of the frameworks that only autotune or compile.
var (
	pythonAutotuneFiles = []string{"torch/_inductor/select_algorithm.py", "torch/_inductor/autotune_process.py",
		"torch/_inductor/runtime/benchmarking.py", "triton/testing.py"}
	pythonCompileFiles = []string{"jax/_src/compiler.py", "torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py"}
)

// compileComponents are the name components of compiler entry points
// (XLA's Compile, CompileAndLoad, RunBackend...); a component ending in
// "Compiler" (xla::gpu::GpuCompiler, NVPTXCompiler) counts too.
var compileComponents = map[string]bool{"Compile": true, "CompileAndLoad": true, "BuildExecutable": true,
	"RunBackend": true, "RunHloPasses": true, "CompileModuleToLlvmIr": true}

// FramePhase returns the framework phase a host frame belongs to ("" when
// none).
func FramePhase(f profile.Frame) string {
	if strings.HasSuffix(f.File, ".py") {
		for _, s := range pythonAutotuneFiles {
			if strings.HasSuffix(f.File, s) {
				return PhaseAutotuning
			}
		}
		// The method alone: triton's Autotuner.run is on every call of an
		// autotuned kernel, its _bench only where it times candidates.
		fn := f.Function
		if i := strings.LastIndexByte(fn, '.'); i >= 0 {
			fn = fn[i+1:]
		}
		if pythonAutotune.MatchString(fn) {
			return PhaseAutotuning
		}
		for _, s := range pythonCompileFiles {
			if strings.HasSuffix(f.File, s) {
				return PhaseCompile
			}
		}
		return ""
	}
	if f.Function == "" {
		return ""
	}
	name := symname.Demangle(f.Function)
	if nativeAutotune.MatchString(name) {
		return PhaseAutotuning
	}
	if strings.HasPrefix(name, "PJRT_Client_Compile") {
		return PhaseCompile
	}
	for _, c := range components(name) {
		if compileComponents[c] || strings.HasSuffix(c, "Compiler") {
			return PhaseCompile
		}
	}
	return ""
}

// components splits a demangled name's qualified name into its parts,
// without template arguments or parameters.
func components(name string) []string {
	s := symname.ElideTemplates(name, 1)
	if i := strings.IndexByte(s, '('); i >= 0 && !strings.HasPrefix(s[i:], "(anonymous") {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		s = s[i+1:]
	}
	var out []string
	for _, c := range strings.Split(s, "::") {
		c, _, _ = strings.Cut(c, "<")
		out = append(out, c)
	}
	return out
}

// PathPhase returns the framework phase of a host path: autotuning if any
// frame is in an autotuner, else compile if any is in a compiler.
func PathPhase(frames []profile.Frame) string {
	phase := ""
	for _, f := range frames {
		switch FramePhase(f) {
		case PhaseAutotuning:
			return PhaseAutotuning
		case PhaseCompile:
			phase = PhaseCompile
		}
	}
	return phase
}

// KernelPhase returns the framework phase that launched kernel context k,
// from its host frames ("" for the program's own work).
func KernelPhase(p *profile.Profile, k profile.NodeID) string {
	var frames []profile.Frame
	n := p.Nodes[k]
	for n != nil && n.Parent != profile.RootID && n.Parent != n.ID {
		n = p.Nodes[n.Parent]
		if n != nil {
			frames = append(frames, n.Frame)
		}
	}
	return PathPhase(frames)
}

// Phase is KernelPhase of kernel context k, kept.
func (x *Index) Phase(k profile.NodeID) string {
	if ph, ok := x.phase[k]; ok {
		return ph
	}
	if x.phase == nil {
		x.phase = map[profile.NodeID]string{}
	}
	ph := KernelPhase(x.P, k)
	x.phase[k] = ph
	return ph
}
