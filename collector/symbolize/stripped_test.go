package symbolize

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ianlancetaylor/demangle"

	"gpuprof/collector/rawstream"
)

// A C++ library as frameworks ship it (libtorch_cuda.so from a wheel):
// stripped, so only its exported symbols (.dynsym) remain; a function of
// its own (static) has no name there.
const cxxLib = `namespace torchy {
static int __attribute__((noinline)) hidden_helper(int x) { return x * 3 + 1; }
struct Linear { int forward(int x); };
int Linear::forward(int x) {
	return hidden_helper(x) + 2; /* FORWARD */
}
}
extern "C" int entry(int x) { torchy::Linear l; return l.forward(x); }
`

const (
	forwardSym = "_ZN6torchy6Linear7forwardEi"
	hiddenSym  = "_ZN6torchyL13hidden_helperEi"
)

// buildStripped builds the library with -g into dir, keeps its debug
// information apart (objcopy --only-keep-debug) and strips it; it returns
// the stripped library, the debug file and the functions' addresses.
func buildStripped(t *testing.T, dir string) (lib, debug string, addr map[string]uint64) {
	t.Helper()
	for _, tool := range []string{"c++", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH", tool)
		}
	}
	src := filepath.Join(dir, "lib.cc")
	if err := os.WriteFile(src, []byte(cxxLib), 0o644); err != nil {
		t.Fatal(err)
	}
	lib = filepath.Join(dir, "libtorchy.so")
	debug = lib + ".debug"
	run := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
	}
	run("c++", "-g", "-O0", "-fPIC", "-shared", "-Wl,--build-id", "-o", lib, src)
	addr = map[string]uint64{forwardSym: symValue(t, lib, forwardSym), hiddenSym: symValue(t, lib, hiddenSym)}
	run("objcopy", "--only-keep-debug", lib, debug)
	run("strip", "--strip-all", lib)
	return lib, debug, addr
}

// isHidden: DWARF names a static function by its plain name (GCC gives
// it no linkage name), the symbol table by its mangled one.
func isHidden(name string) bool { return name == hiddenSym || name == "hidden_helper" }

func mapped(t *testing.T, lib string, base uint64) *rawstream.HostModule {
	t.Helper()
	ef, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	if _, err := ef.Symbols(); err == nil {
		t.Fatalf("%s still has a symbol table", lib)
	}
	return moduleFor(t, lib, base)
}

func TestStrippedSharedLibrary(t *testing.T) {
	const base = 0x7f5000000000
	dir := t.TempDir()
	lib, debug, addr := buildStripped(t, dir)
	os.Rename(debug, filepath.Join(t.TempDir(), "elsewhere.debug")) // no debug file to be found
	s := New()
	s.AddModule(mapped(t, lib, base))
	// Exported: named from .dynsym, mangled as the symbol table has it; the
	// reports demangle it.
	fr, _ := s.Resolve(base + addr[forwardSym] + 4)
	if len(fr) != 1 || fr[0].Function != forwardSym || fr[0].Module != lib {
		t.Fatalf("exported function: %v", fr)
	}
	if d := demangle.Filter(fr[0].Function, demangle.NoClones); d != "torchy::Linear::forward(int)" {
		t.Errorf("demangled %q", d)
	}
	// Not exported: the module and its offset, nothing more.
	fr, _ = s.Resolve(base + addr[hiddenSym] + 4)
	if len(fr) != 1 || fr[0].Function != "" || fr[0].Offset != addr[hiddenSym]+4 {
		t.Errorf("static function of a stripped library: %v", fr)
	}
}

// A separate debug file, found by .gnu_debuglink beside the library or by
// build id under DebugDirs, names every function, with lines.
func TestSeparateDebugFile(t *testing.T) {
	const base = 0x7f6000000000
	line := lineOf(cxxLib, "FORWARD")
	t.Run("debuglink", func(t *testing.T) {
		dir := t.TempDir()
		lib, debug, addr := buildStripped(t, dir)
		cmd := exec.Command("objcopy", "--add-gnu-debuglink="+filepath.Base(debug), lib)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("objcopy: %v\n%s", err, b)
		}
		s := New()
		s.AddModule(mapped(t, lib, base))
		fr, _ := s.Resolve(base + addr[hiddenSym] + 4)
		if len(fr) == 0 || !isHidden(fr[len(fr)-1].Function) || fr[len(fr)-1].Line == 0 {
			t.Errorf("static function with its debug file: %v", fr)
		}
		fr, _ = s.Resolve(base + addr[forwardSym] + 9)
		if len(fr) == 0 || fr[0].Function != forwardSym || fr[0].Line == 0 || fr[0].Line > line {
			t.Errorf("exported function with its debug file: %v (line %d or before)", fr, line)
		}
	})
	t.Run("build-id", func(t *testing.T) {
		dir := t.TempDir()
		lib, debug, addr := buildStripped(t, dir)
		m := mapped(t, lib, base)
		if len(m.BuildID) < 4 {
			t.Skip("no build id")
		}
		root := t.TempDir()
		p := filepath.Join(root, ".build-id", m.BuildID[:2], m.BuildID[2:]+".debug")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Rename(debug, p); err != nil {
			t.Fatal(err)
		}
		old := DebugDirs
		DebugDirs = []string{root}
		defer func() { DebugDirs = old }()
		s := New()
		s.AddModule(m)
		fr, _ := s.Resolve(base + addr[hiddenSym] + 4)
		if len(fr) == 0 || !isHidden(fr[len(fr)-1].Function) || fr[len(fr)-1].File == "" {
			t.Errorf("static function with its debug file by build id: %v", fr)
		}
	})
}
