package view

import (
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

func TestInternal(t *testing.T) {
	for _, tc := range []struct {
		f        profile.Frame
		internal bool
		in       string
	}{
		{profile.Frame{Module: "/lib/x86_64-linux-gnu/libc.so.6"}, true, "libc.so.6"},
		{profile.Frame{Module: "/usr/local/cuda/lib64/libcudart.so.13"}, true, "libcudart.so.13"},
		{profile.Frame{Module: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}, true, "libcuda.so.1"},
		{profile.Frame{Module: "/opt/torch/lib/libtorch_cuda.so"}, true, "libtorch_cuda.so"},
		{profile.Frame{Module: "/opt/xla/libxla_extension.so"}, true, "libxla_extension.so"},
		{profile.Frame{Module: "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13"}, true, "libcublasLt.so.13"},
		{profile.Frame{Module: "/venv/lib/python3.12/site-packages/torch/_C.cpython-312-x86_64-linux-gnu.so"}, true, "_C.cpython-312-x86_64-linux-gnu.so"},
		{profile.Frame{Module: "/usr/bin/python3.12"}, true, "python3.12"},
		{profile.Frame{Module: "/opt/conda/lib/libpython3.11.so.1.0"}, true, "libpython3.11.so.1.0"},
		{profile.Frame{Module: "/opt/nccl/libnccl.so.2"}, true, "libnccl.so.2"},
		{profile.Frame{File: "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", Function: "Module._call_impl"}, true, "torch"},
		{profile.Frame{File: "/usr/lib/python3.12/runpy.py", Function: "_run_module_as_main"}, true, "Python"},
		{profile.Frame{File: "<frozen runpy>", Function: "_run_code"}, true, "Python"},
		// The application's own: its binary, its libraries, its Python.
		{profile.Frame{Module: "/home/u/app/bin/solver"}, false, ""},
		{profile.Frame{Module: "/home/u/app/lib/libphysics.so"}, false, ""},
		{profile.Frame{File: "/home/u/train.py", Function: "train_step"}, false, ""},
		{profile.Frame{}, false, ""},
	} {
		internal, in := Internal(tc.f)
		if internal != tc.internal || in != tc.in {
			t.Errorf("%s%s: %v %q, want %v %q", tc.f.Module, tc.f.File, internal, in, tc.internal, tc.in)
		}
	}
}

// Runs of two or more internal frames fold into one step; the
// application's frames and lone internal frames stay; the full path is
// CallerPath's.
func TestFoldedCallerPath(t *testing.T) {
	p, _ := exporttest.Framework()
	var tuned, mine profile.NodeID
	for _, id := range p.SortedNodeIDs() {
		n := p.Nodes[id]
		if n.Frame.Kind != profile.KindKernel || n.Frame.Function != exporttest.GemmKernel {
			continue
		}
		if strings.Contains(CallerPath(p, id), "matmul.py") {
			mine = id
		} else {
			tuned = id
		}
	}
	if got, want := FoldedCallerPath(p, tuned), "… 6 frames in xla_cuda_plugin.so, libc.so.6 …"; got != want {
		t.Errorf("autotuner's path: %q, want %q", got, want)
	}
	want := "… 2 frames in python3.12 … > <module> (matmul.py:18) > step (matmul.py:11) > … 4 frames in jax, python3.12, libjax_common.so and 1 more …"
	if got := FoldedCallerPath(p, mine); got != want {
		t.Errorf("program's path: %q, want %q", got, want)
	}
	// The whole path keeps every frame, the lambda's symbol in one piece.
	full := CallerPath(p, tuned)
	if strings.Count(full, " > ") != 5 || !strings.Contains(full, "std::_Function_handler<…>::_M_invoke") || !strings.Contains(full, "xla::gpu::GemmFusionAutotunerImpl::Profile") {
		t.Errorf("full path %q", full)
	}
	// A lone internal frame between application frames stays itself.
	app := profile.Frame{Kind: profile.KindHostFrame, Module: "/home/u/app", Function: "main"}
	libc := profile.Frame{Kind: profile.KindHostFrame, Module: "/lib/libc.so.6", Function: "qsort"}
	steps := Fold([]profile.Frame{app, libc, app})
	if len(steps) != 3 || steps[1].Folded != 0 || steps[1].Label() != "qsort" {
		t.Errorf("lone frame: %+v", steps)
	}
	if got := FoldLabel(1, []string{"libc.so.6"}); got != "… 1 frame in libc.so.6 …" {
		t.Errorf("one frame: %q", got)
	}
}

// Host frames of a kind this version does not know (Python frames of a
// later collector) still count and read as host frames.
func TestHostFramesOfOtherKinds(t *testing.T) {
	p := profile.New("j")
	py := profile.Frame{Kind: profile.NodeKind(40), File: "/home/u/train.py", Function: "train_step", Line: 7}
	k := p.Path(py, profile.Frame{Kind: profile.KindKernel, Module: "00", Function: "k"})
	if got := CallerPath(p, k.ID); got != "train_step (train.py:7)" {
		t.Errorf("caller %q", got)
	}
}

func TestNoLineInformation(t *testing.T) {
	for _, tc := range []struct {
		f    profile.Frame
		want string
	}{
		{profile.Frame{Kind: profile.KindLoop, Offset: 0x30}, "loop at +0x30 (no line information)"},
		{profile.Frame{Kind: profile.KindLine}, "no line information"},
		{profile.Frame{Kind: profile.KindInlined, Function: "_Z4loadPKfi"}, "[inlined] load (no line information)"},
		{profile.Frame{Kind: profile.KindLoop, File: "/src/k.cu", Line: 30}, "loop k.cu:30"},
	} {
		if got := FrameLabel(tc.f); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.f, got, tc.want)
		}
	}
}
