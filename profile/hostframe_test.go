package profile

import "testing"

func TestHostClass(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want HostClass
	}{
		{Frame{Kind: KindHostFrame, Module: "/usr/bin/python3.12", Function: "_PyEval_EvalFrameDefault"}, HostInterpreter},
		{Frame{Kind: KindHostFrame, Module: "/usr/bin/python3.12", Offset: 0x58216f}, HostInterpreter},
		{Frame{Kind: KindHostFrame, Module: "/opt/conda/bin/python", Function: "PyObject_Call"}, HostInterpreter},
		{Frame{Kind: KindHostFrame, Module: "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0", Function: "_PyFunction_Vectorcall"}, HostInterpreter},
		{Frame{Kind: KindHostFrame, Module: "/usr/local/bin/python3.13t"}, HostInterpreter},
		{Frame{Kind: KindHostFrame, Module: PythonModule, Function: "MLP.forward", File: "/home/u/model.py"}, HostPython},
		{Frame{Kind: KindHostFrame, Module: JITModule, Function: "LazyCompile:f"}, HostJIT},
		{Frame{Kind: KindHostFrame, Module: "/venv/lib/python3.12/site-packages/torch/lib/libtorch_python.so", Function: "THPVariable_add"}, HostNative},
		{Frame{Kind: KindHostFrame, Module: "/venv/lib/python3.12/site-packages/torch/_C.cpython-312-x86_64-linux-gnu.so"}, HostNative},
		{Frame{Kind: KindHostFrame, Module: "/usr/bin/python-config"}, HostNative},
		{Frame{Kind: KindHostFrame, Module: "/app/python_solver"}, HostNative},
		{Frame{Kind: KindHostFrame, Offset: 0x7f0000001234}, HostNative},
		{Frame{Kind: KindKernel, Module: "python3.12", Function: "k"}, HostNative},
	} {
		if got := c.f.HostClass(); got != c.want {
			t.Errorf("%+v: %v, want %v", c.f, got, c.want)
		}
	}
}
