package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// A C program whose inner function is inlined: the return address taken
// inside it must resolve to the inlined function at its line, under the
// function it was inlined into at the call's line, under main.
const cProg = `#include <stdio.h>
__attribute__((noinline)) void *where(void) { return __builtin_return_address(0); }
static inline __attribute__((always_inline)) void *inl(void) {
	void *r = where(); /* INL */
	return r;
}
void *outer_ret;
__attribute__((noinline)) void *outer(void) {
	outer_ret = __builtin_return_address(0);
	void *r = inl(); /* CALL */
	__asm__ volatile("" ::: "memory");
	return r;
}
int main(void) {
	void *r = outer(); /* MAIN */
	printf("%p %p %p\n", r, outer_ret, (void *)&main);
	return 0;
}
`

func lineOf(src, marker string) uint32 {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, marker) {
			return uint32(i + 1)
		}
	}
	return 0
}

func buildC(t *testing.T, flags ...string) (exe string, out []uint64) {
	return buildCProg(t, cProg, append([]string{"-g"}, flags...)...)
}

func buildCProg(t *testing.T, prog string, flags ...string) (exe string, out []uint64) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "prog")
	args := append([]string{"-O2", "-Wl,--build-id", "-o", exe, src}, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
	b, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("output %q: %v", b, err)
		}
		out = append(out, v)
	}
	return exe, out
}

// moduleFor builds the HOST_MODULE the injection library would send for
// exe loaded with bias base.
func moduleFor(t *testing.T, exe string, base uint64) *rawstream.HostModule {
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	m := &rawstream.HostModule{Base: base, Path: exe}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			m.Segments = append(m.Segments, rawstream.Segment{Start: base + p.Vaddr, Size: p.Memsz})
		}
	}
	if f := open(exe, ""); f != nil {
		m.BuildID = f.buildID
	}
	return m
}

func symValue(t *testing.T, exe, name string) uint64 {
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s: no symbol %s", exe, name)
	return 0
}

func TestCInlined(t *testing.T) {
	for _, pie := range []string{"-pie", "-no-pie"} {
		t.Run(pie, func(t *testing.T) {
			exe, out := buildC(t, pie)
			ret, outerRet, mainAddr := out[0], out[1], out[2]
			base := mainAddr - symValue(t, exe, "main")
			s := New()
			m := moduleFor(t, exe, base)
			if m.BuildID == "" {
				t.Errorf("no build id read from %s", exe)
			}
			s.AddModule(m)
			got := s.Frames([]uint64{ret, outerRet})
			want := []profile.Frame{
				{Kind: profile.KindHostFrame, Module: exe, Function: "main", File: "prog.c", Line: lineOf(cProg, "MAIN")},
				{Kind: profile.KindHostFrame, Module: exe, Function: "outer", File: "prog.c", Line: lineOf(cProg, "CALL")},
				{Kind: profile.KindHostFrame, Module: exe, Function: "inl", File: "prog.c", Line: lineOf(cProg, "INL")},
			}
			if len(got) != len(want) {
				t.Fatalf("frames %v, want %v", got, want)
			}
			for i := range want {
				g := got[i]
				g.File = filepath.Base(g.File)
				if g != want[i] {
					t.Errorf("frame %d: %v, want %v", i, g, want[i])
				}
			}
		})
	}
}

// Two calls from main, as a program's cudaMalloc calls are: built without
// -g, both resolve to main from the symbol table alone, and must stay two
// frames (else every allocation of one size in main is one data object).
const cTwoCalls = `#include <stdio.h>
volatile int sink;
__attribute__((noinline)) void *where(int k) { sink = k; return __builtin_return_address(0); }
int main(void) {
	void *a = where(1);
	void *b = where(2);
	printf("%p %p %p\n", a, b, (void *)&main);
	return 0;
}
`

func TestNoLineInfoKeepsCallSites(t *testing.T) {
	exe, out := buildCProg(t, cTwoCalls, "-g0")
	base := out[2] - symValue(t, exe, "main")
	s := New()
	s.AddModule(moduleFor(t, exe, base))
	a, okA := s.Resolve(out[0])
	b, okB := s.Resolve(out[1])
	if !okA || !okB || len(a) != 1 || len(b) != 1 {
		t.Fatalf("frames %v and %v", a, b)
	}
	for i, fr := range []profile.Frame{a[0], b[0]} {
		if fr.Function != "main" || fr.Line != 0 || fr.Offset != out[i]-base {
			t.Errorf("call %d: %v, want main at module offset %#x", i, fr, out[i]-base)
		}
	}
	if a[0] == b[0] {
		t.Errorf("two call sites in main resolve to one frame %v", a[0])
	}
}

func TestDropAndUnresolved(t *testing.T) {
	exe, out := buildC(t)
	base := out[2] - symValue(t, exe, "main")
	s := New()
	s.AddModule(moduleFor(t, exe, base))
	cudart := &rawstream.HostModule{Base: 0x7f0000000000, Path: "/usr/local/cuda/lib64/libcudart.so.13",
		Segments: []rawstream.Segment{{Start: 0x7f0000010000, Size: 0x1000}}}
	gone := &rawstream.HostModule{Base: 0x7f1000000000, Path: "/nonexistent/libapp.so",
		Segments: []rawstream.Segment{{Start: 0x7f1000010000, Size: 0x1000}}}
	s.AddModule(cudart)
	s.AddModule(gone)
	got := s.Frames([]uint64{0x7f0000010123, out[0], 0x7f1000010456, 0x1234})
	if len(got) != 4 {
		t.Fatalf("%d frames: %v", len(got), got)
	}
	if got[0] != (profile.Frame{Kind: profile.KindHostFrame, Offset: 0x1234}) {
		t.Errorf("address in no module: %v", got[0])
	}
	if got[1] != (profile.Frame{Kind: profile.KindHostFrame, Module: "/nonexistent/libapp.so", Offset: 0x10456}) {
		t.Errorf("unreadable module: %v", got[1])
	}
	if got[3].Function != "inl" {
		t.Errorf("innermost kept frame %v, want inl (the libcudart frame dropped)", got[4])
	}
	// A build id that does not match the file on disk: the frame is kept
	// unresolved rather than resolved against the wrong binary.
	s2 := New()
	m := moduleFor(t, exe, base)
	m.BuildID = "00112233"
	s2.AddModule(m)
	fr, _ := s2.Resolve(out[0])
	if len(fr) != 1 || fr[0].Function != "" || fr[0].Offset != out[0]-base {
		t.Errorf("mismatched build id: %v", fr)
	}
}

//go:noinline
func here() uintptr {
	var pc [1]uintptr
	runtime.Callers(2, pc[:])
	return pc[0]
}

// The Go test binary itself, symbolised through its own DWARF.
func TestGoBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ret := uint64(here()) // return address in this function
	fn := runtime.FuncForPC(uintptr(ret - 1))
	file, line := fn.FileLine(uintptr(ret - 1))
	// The load bias, from the binary's own tables (go test links without
	// a symbol table; go test -c with one and with DWARF).
	ef := open(exe, "")
	if ef == nil || ef.gosym == nil || ef.gosym.LookupFunc(fn.Name()) == nil {
		t.Fatalf("%s: no Go line table", exe)
	}
	base := uint64(fn.Entry()) - ef.gosym.LookupFunc(fn.Name()).Entry
	s := New()
	s.AddModule(moduleFor(t, exe, base))
	got, ok := s.Resolve(ret)
	if !ok || len(got) == 0 {
		t.Fatalf("not resolved: %v", got)
	}
	last := got[len(got)-1]
	if last.Function != fn.Name() || last.File != file || last.Line != uint32(line) || last.Module != exe {
		t.Errorf("resolved %v, want %s at %s:%d", last, fn.Name(), file, line)
	}
	// A second lookup comes from the cache and agrees.
	again, _ := s.Resolve(ret)
	if fmt.Sprint(again) != fmt.Sprint(got) {
		t.Errorf("cached %v != %v", again, got)
	}
}

func TestDropPatterns(t *testing.T) {
	for name, drop := range map[string]bool{
		"_start": true, "_start_timer": false, "__libc_start_main": true, "cudaLaunchKernel": true,
		"cudart::globalState::initialize": true, "_Z27__device_stub__Z6reloadPKfPfiiPKfPfii": true,
		"__device_stub__Z4fillPdi": true, "main": false, "_Z6reloadPKfPfii": false,
		"libcudart_static_5382377d5c772c9d197c0cda9fd9742ee6ad893c": true, "cudaMalloc": true, "cudaMallocManaged": true,
	} {
		if matches(name, DefaultDropFunctions) != drop {
			t.Errorf("%s: dropped %v, want %v", name, !drop, drop)
		}
	}
}
