package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// A map as CPython 3.12 writes it (python -X perf): one trampoline of 0xb
// bytes per Python function, appended as functions first run.
const genMap = `7f9bcb867000 b py::_find_and_load:<frozen importlib._bootstrap>
7f9bcb86700b b py::<module>:/home/user/train.py
7f9bcb867016 b py::Trainer.step:/home/user/train.py
7f9bcb867021 b py::Module._call_impl:/venv/lib/python3.12/site-packages/torch/nn/modules/module.py
not a line
7f9bcb86702c zz py::bad.size:/x.py
7f9bcb867037 b py::MLP.forward:/home/user/model.py
7f9bcb900000 40 LazyCompile:*jitted
`

func writeMap(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "perf-4242.map")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPerfMapFrames(t *testing.T) {
	dir := t.TempDir()
	s := New()
	s.SetPerfMap(writeMap(t, dir, genMap))
	// The trampolines' return addresses (after their call instruction),
	// innermost first, with a module frame between two Python frames.
	lib := &rawstream.HostModule{Base: 0x7f0000000000, Path: "/nonexistent/libtorch_python.so",
		Segments: []rawstream.Segment{{Start: 0x7f0000010000, Size: 0x1000}}}
	s.AddModule(lib)
	got := s.Frames([]uint64{0x7f0000010100, 0x7f9bcb867037 + 8, 0x7f9bcb867021 + 8, 0x7f9bcb867016 + 8, 0x7f9bcb86700b + 8, 0x7f9bcb900010})
	want := []profile.Frame{
		{Kind: profile.KindHostFrame, Module: profile.JITModule, Function: "LazyCompile:*jitted"},
		{Kind: profile.KindHostFrame, Module: profile.PythonModule, Function: "<module>", File: "/home/user/train.py"},
		{Kind: profile.KindHostFrame, Module: profile.PythonModule, Function: "Trainer.step", File: "/home/user/train.py"},
		{Kind: profile.KindHostFrame, Module: profile.PythonModule, Function: "Module._call_impl", File: "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"},
		{Kind: profile.KindHostFrame, Module: profile.PythonModule, Function: "MLP.forward", File: "/home/user/model.py"},
		{Kind: profile.KindHostFrame, Module: "/nonexistent/libtorch_python.so", Offset: 0x10100},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("frames\n got %v\nwant %v", got, want)
	}
	for _, f := range got[1:5] {
		if f.HostClass() != profile.HostPython {
			t.Errorf("%v: class %v", f, f.HostClass())
		}
	}
	// A malformed line names nothing: the address stays an address.
	if fr, _ := s.Resolve(0x7f9bcb86702c + 8); len(fr) != 1 || fr[0].Module != "" || fr[0].Offset != 0x7f9bcb86702c+8 {
		t.Errorf("malformed entry resolved: %v", fr)
	}
	// Just past a trampoline's end: not its function.
	if fr, _ := s.Resolve(0x7f9bcb900041); len(fr) != 1 || fr[0].Function != "" {
		t.Errorf("address past the last entry: %v", fr)
	}
}

// The map grows as functions first run; an address not yet in it is
// looked for again in what was appended, and a line still being written
// waits for its end.
func TestPerfMapGrows(t *testing.T) {
	dir := t.TempDir()
	path := writeMap(t, dir, "7f0000a00000 b py::first:/a.py\n7f0000a0000b b py::se")
	s := New()
	s.SetPerfMap(path)
	if fr, _ := s.Resolve(0x7f0000a00008); len(fr) != 1 || fr[0].Function != "first" {
		t.Fatalf("first entry: %v", fr)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "cond:/a.py\n7f0000a00000 b py::first.again:/b.py\n")
	f.Close()
	if fr, _ := s.Resolve(0x7f0000a00013); len(fr) != 1 || fr[0].Function != "second" || fr[0].File != "/a.py" {
		t.Errorf("appended entry: %v", fr)
	}
	// The later entry at the same address wins (code made again there).
	s.SetPerfMap(path)
	if fr, _ := s.Resolve(0x7f0000a00009); len(fr) != 1 || fr[0].Function != "first.again" {
		t.Errorf("re-made entry: %v", fr)
	}
	// No map at all: addresses stay addresses, and nothing fails.
	s.SetPerfMap(filepath.Join(dir, "perf-1.map"))
	if fr, _ := s.Resolve(0x7f0000a00008); len(fr) != 1 || fr[0].Function != "" {
		t.Errorf("without a map: %v", fr)
	}
}

// The map is another program's output: any bytes parse without a panic,
// and every entry kept is a non-empty range.
func FuzzPerfMap(f *testing.F) {
	f.Add([]byte(genMap))
	f.Add([]byte("ffffffffffffffff 10 wrap\n0 1 x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m perfMap
		for _, e := range parsePerfMap(b) {
			if e.size == 0 || e.start+e.size < e.start || e.name == "" {
				t.Fatalf("bad entry %+v", e)
			}
			_ = m.perfFrame(e.name)
		}
	})
}

// CPython's perf map names functions without lines; the frame gets the
// line of the definition, found from the source the application ran.
func TestPerfFrameDefinitionLine(t *testing.T) {
	src, err := filepath.Abs("../../testdata/torch/train.py")
	if err != nil {
		t.Fatal(err)
	}
	var m perfMap
	for name, want := range map[string]uint32{
		"py::Net.forward:" + src:            25,
		"py::Net.__init__:" + src:           18,
		"py::main:" + src:                   32,
		"py::main.<locals>.step:" + src:     46,
		"py::<module>:" + src:               0,
		"py::main.<locals>.<lambda>:" + src: 0,
		"py::Net.backward:" + src:           0, // not in the file
		"py::f:/nonexistent/x.py":           0,
	} {
		f := m.perfFrame(name)
		if f.Line != want || f.Module != profile.PythonModule {
			t.Errorf("%s: line %d (module %q), want %d", name, f.Line, f.Module, want)
		}
	}
	if got := pyDefLine([]string{"class A:", "    async def run(self):", "        pass"}, "A.run"); got != 2 {
		t.Errorf("async method: line %d, want 2", got)
	}
}
