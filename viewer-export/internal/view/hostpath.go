package view

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"gpuprof/profile"
)

// Host paths are shown as the application's own frames, with each run of
// runtime or framework frames folded into one marked step ("… 38 frames in
// libxla_extension.so …"); the full path stays in the JSON document, the
// pprof profile and the HPCToolkit database. docs/reports.md states the
// rule; Internal applies it.

// HostFrames returns the host calling context of id (the frames above its
// kernel), outermost first. Every ancestor that is not GPU code counts,
// whatever its kind, so frames of kinds added later (Python frames) are
// kept.
func HostFrames(p *profile.Profile, id profile.NodeID) []profile.Frame {
	var out []profile.Frame
	n := p.Nodes[id]
	for n != nil && n.ID != profile.RootID {
		par := p.Nodes[n.Parent]
		if par == nil || par.ID == profile.RootID || n.Parent == n.ID {
			break
		}
		if hostKind(par.Frame.Kind) {
			out = append(out, par.Frame)
		}
		n = par
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// hostKind reports whether a node kind is a host frame (not the root nor
// GPU code).
func hostKind(k profile.NodeKind) bool {
	switch k {
	case profile.KindRoot, profile.KindKernel, profile.KindGPUFunction, profile.KindInlined, profile.KindLoop, profile.KindLine, profile.KindInstruction:
		return false
	}
	return true
}

// PythonFrame reports whether a host frame is a Python function: its file
// is a .py source, or one of the interpreter's frozen modules.
func PythonFrame(f profile.Frame) bool {
	return strings.HasSuffix(f.File, ".py") || strings.HasPrefix(f.File, "<frozen ")
}

// internalModules are the shared libraries (by file name, version suffixes
// included) of the C and C++ runtimes, the CUDA driver, runtime and math
// libraries, the Python interpreter and the frameworks.
var internalModules = regexp.MustCompile(`^(` +
	`ld-linux.*|libc\.so.*|libc-.*|libm\.so.*|libdl\..*|librt\..*|libpthread\..*|libstdc\+\+.*|libgcc_s.*|libgomp.*|` +
	`libcuda\.so.*|libcudart.*|libcupti.*|libnvrtc.*|libnvJitLink.*|libnvidia-.*|libnvToolsExt.*|` +
	`libcublas.*|libcudnn.*|libcufft.*|libcurand.*|libcusparse.*|libcusolver.*|libnccl.*|libnvshmem.*|` +
	`libtorch.*|libc10.*|libshm.*|libxla.*|xla_.*\.so.*|libjax.*|libtensorflow.*|libtriton.*|` +
	`python[0-9.]*|libpython.*|libgpuprof.*` +
	`)$`)

// systemDirs hold system libraries: none of them is the application's.
var systemDirs = []string{"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/cuda"}

// pyPackageDirs hold installed Python packages and their native modules.
var pyPackageDirs = []string{"/site-packages/", "/dist-packages/"}

// Internal reports whether a host frame is runtime or framework code, and
// the name its folded step shows (a library's file name, an installed
// Python package, or "Python" for the interpreter's standard library).
// Unknown modules count as the application's.
func Internal(f profile.Frame) (bool, string) {
	if PythonFrame(f) {
		for _, d := range pyPackageDirs {
			if i := strings.LastIndex(f.File, d); i >= 0 {
				pkg, _, _ := strings.Cut(f.File[i+len(d):], "/")
				return true, strings.TrimSuffix(pkg, ".py")
			}
		}
		if strings.HasPrefix(f.File, "<frozen ") || pythonStdlib.MatchString(f.File) {
			return true, "Python"
		}
		return false, ""
	}
	mod := f.Module
	if mod == "" {
		return false, ""
	}
	base := path.Base(mod)
	for _, d := range pyPackageDirs {
		if strings.Contains(mod, d) {
			return true, base
		}
	}
	if internalModules.MatchString(base) {
		return true, base
	}
	for _, d := range systemDirs {
		if strings.HasPrefix(mod, d) {
			return true, base
		}
	}
	return false, ""
}

// pythonStdlib matches the interpreter's own library directory.
var pythonStdlib = regexp.MustCompile(`/lib/python3(\.[0-9]+)?/`)

// Step is one step of a displayed host path: one frame, or a run of
// internal frames folded into one.
type Step struct {
	Frame  profile.Frame // the frame, when Folded is 0
	Folded int           // frames folded into this step
	In     []string      // what they belong to, in path order
}

// Label renders the step.
func (s Step) Label() string {
	if s.Folded == 0 {
		return FrameLabel(s.Frame)
	}
	return FoldLabel(s.Folded, s.In)
}

// FoldLabel renders a folded run of n frames in the given libraries or
// packages: "… 38 frames in libxla_extension.so …".
func FoldLabel(n int, in []string) string {
	what := "frame"
	if n != 1 {
		what = "frames"
	}
	names := in
	more := ""
	if len(names) > 3 {
		more = fmt.Sprintf(" and %d more", len(names)-3)
		names = names[:3]
	}
	return fmt.Sprintf("… %d %s in %s%s …", n, what, strings.Join(names, ", "), more)
}

// Fold folds every run of two or more internal frames of a path
// (outermost first) into one step; a lone internal frame is shown as it
// is, which is no longer than its fold.
func Fold(frames []profile.Frame) []Step {
	var out []Step
	var run []profile.Frame
	flush := func() {
		if len(run) == 1 {
			out = append(out, Step{Frame: run[0]})
		} else if len(run) > 1 {
			out = append(out, Step{Folded: len(run), In: Libraries(run)})
		}
		run = run[:0]
	}
	for _, f := range frames {
		if internal, _ := Internal(f); internal {
			run = append(run, f)
			continue
		}
		flush()
		out = append(out, Step{Frame: f})
	}
	flush()
	return out
}

// Libraries names what a run of internal frames belongs to (Internal),
// the libraries or packages holding most of its frames first (then
// outermost first): they say what the frames are doing.
func Libraries(run []profile.Frame) []string {
	var out []string
	count := map[string]int{}
	for _, f := range run {
		_, in := Internal(f)
		if count[in] == 0 {
			out = append(out, in)
		}
		count[in]++
	}
	sort.SliceStable(out, func(i, j int) bool { return count[out[i]] > count[out[j]] })
	return out
}

// FoldedCallerPath is the host calling context of id for display:
// outermost first, " > "-joined, internal runs folded.
func FoldedCallerPath(p *profile.Profile, id profile.NodeID) string {
	steps := Fold(HostFrames(p, id))
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.Label()
	}
	return strings.Join(parts, " > ")
}
