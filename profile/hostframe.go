package profile

import (
	"path"
	"regexp"
)

// Host frames of interpreted and generated code carry a bracketed module
// name in place of a file path, so they are the same node on every rank
// (their addresses differ between processes).
const (
	// PythonModule is the Module of a Python function's frame (from
	// CPython's perf map): Function is its qualified name
	// ("Linear.forward"), File its source file, Line 0 (the map has no
	// lines).
	PythonModule = "[python]"
	// JITModule is the Module of other code a perf map names (another
	// JIT's): Function is the map's name for it.
	JITModule = "[jit]"
)

// HostClass says what kind of code a host frame is, for reports that fold
// what a user did not write.
type HostClass uint8

const (
	// HostNative is compiled code: the application, its libraries and
	// frameworks (libtorch, cuBLAS, ...).
	HostNative HostClass = iota
	// HostPython is a Python function (Module PythonModule).
	HostPython
	// HostInterpreter is the Python interpreter's own native code (the
	// evaluation loop, call machinery, builtins): every frame in the
	// python executable or libpython. Between two Python frames it is
	// noise to a user, and a report folds it.
	HostInterpreter
	// HostJIT is other generated code a perf map names (Module JITModule).
	HostJIT
)

var hostClassNames = [...]string{"native", "python", "interpreter", "jit"}

func (c HostClass) String() string {
	if int(c) < len(hostClassNames) {
		return hostClassNames[c]
	}
	return "hostclass(?)"
}

// interpreterModule matches the base names of CPython's executable and
// shared library: python, python3, python3.12, python3.13t,
// libpython3.12.so.1.0.
var interpreterModule = regexp.MustCompile(`^(lib)?python[0-9.]*[dmt]*(\.so(\.[0-9.]+)?)?$`)

// HostClass classifies a host frame by its module (HostNative for frames
// of other kinds). The rule is the module's name only, so it holds for
// frames that could not be symbolised too.
func (f Frame) HostClass() HostClass {
	if f.Kind != KindHostFrame {
		return HostNative
	}
	switch f.Module {
	case PythonModule:
		return HostPython
	case JITModule:
		return HostJIT
	case "":
		return HostNative
	}
	if interpreterModule.MatchString(path.Base(f.Module)) {
		return HostInterpreter
	}
	return HostNative
}
