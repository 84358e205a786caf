package online

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"gpuprof/collector/online/nvdisasmtest"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
	"gpuprof/sass"
)

const (
	probeCubin   = "../../testdata/sass/probe/k.sm90.cubin"
	probeHex     = "../../testdata/sass/probe/k.hex.txt"
	probeKernel  = "_Z6reloadPKfPfii"
	probeHelper  = "$_Z6reloadPKfPfii$_Z6helperPKfi"
	probeUnasked = "_Z3shmPi"
)

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// probeStream is a PC-sampling stream of the probe module: every function
// reported (as the library does), one kernel launched twice and sampled at
// every instruction of it and of the subroutine placed in its section.
func probeStream(t testing.TB) (frames []rawstream.Frame, ref *sass.Module) {
	t.Helper()
	cubin := readFile(t, probeCubin)
	ref, err := sass.Parse(readFile(t, probeHex))
	if err != nil {
		t.Fatal(err)
	}
	c, err := sass.ParseCubin(cubin)
	if err != nil {
		t.Fatal(err)
	}
	frames = append(frames,
		&rawstream.Hello{Version: 3, Mode: rawstream.ModePCSampling, SM: 90},
		&rawstream.StallReasons{Reasons: []rawstream.StallReason{{Index: 1, Name: "smsp__pcsamp_warps_issue_stalled_long_scoreboard"}}},
		&rawstream.Module{ModuleID: 1, ContentKey: 7, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin})
	ids := map[string]uint32{}
	for i, f := range c.Functions {
		ids[f.Name] = uint32(i + 1)
		frames = append(frames, &rawstream.Function{FunctionID: uint32(i + 1), ModuleID: 1, PC: 0x1000000 * uint64(i+1), Size: uint32(f.End - f.Value), Name: f.Name})
	}
	k := ref.Func(probeKernel)
	var pcs []rawstream.PCSample
	for _, fn := range []string{probeKernel, probeHelper} {
		for _, in := range ref.Func(fn).Insts {
			pcs = append(pcs, rawstream.PCSample{FunctionID: ids[probeKernel], Offset: uint32(in.Offset - k.Start), Stalls: []rawstream.StallCount{{Reason: 1, Samples: 2}}})
		}
	}
	for l := uint64(1); l <= 2; l++ {
		frames = append(frames,
			&rawstream.Launch{LaunchID: l, FunctionID: ids[probeKernel], Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}},
			&rawstream.PCSamples{LaunchID: l, PCs: pcs},
			&rawstream.KernelEnd{LaunchID: l, StartNS: 1000 * l, EndNS: 1000*l + 500, BlocksTotal: 4, BlocksSampled: 4})
	}
	frames = append(frames, &rawstream.End{ExitCode: 0})
	return frames, ref
}

// analyseTwoFlushes feeds frames to a new analyzer and returns the merged
// items: what FlushReady gives (what the collector publishes at once at
// the application's end), then Flush (the rest, structure joined).
func analyseTwoFlushes(t testing.TB, o Options, frames []rawstream.Frame) (merged, first *profile.Profile) {
	t.Helper()
	o.Job, o.Workers = "j", 1
	a := New(o)
	defer a.Close()
	for i, f := range frames {
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	merged = profile.New("j")
	for seq := uint32(0); seq < 2; seq++ {
		flush := a.FlushReady
		if seq == 1 {
			flush = a.Flush
		}
		p, err := flush(seq)
		if err != nil {
			t.Fatal(err)
		}
		if seq == 0 {
			first = p
		}
		if p == nil {
			continue
		}
		if err := merged.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	return merged, first
}

// structured counts the instruction nodes with samples below a line frame
// and those placed directly under their function.
func structured(p *profile.Profile) (lined, flat int) {
	for _, n := range p.Nodes {
		if n.Frame.Kind != profile.KindInstruction || n.Metrics.Get(profile.InstSamples) == 0 {
			continue
		}
		if par := p.Nodes[n.Parent]; par != nil && par.Frame.Kind == profile.KindGPUFunction {
			flat++
		} else {
			lined++
		}
	}
	return lined, flat
}

func kernelMetric(p *profile.Profile, name string) uint64 {
	var v uint64
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindKernel {
			v += n.Metrics.Get(profile.Metric(name))
		}
	}
	return v
}

// Only the launched function is disassembled (its section, which holds
// the subroutine), once; a second run of the analysis (a new process) finds
// its listing in the disk cache and runs nvdisasm no more, and a machine
// without nvdisasm uses the cached listing too.
func TestOnlyLaunchedFunctionsAreDisassembled(t *testing.T) {
	frames, ref := probeStream(t)
	cubin := readFile(t, probeCubin)
	fake := nvdisasmtest.New(t, cubin, readFile(t, probeHex), 0)
	syms := nvdisasmtest.Symbols(t, cubin)
	cache := &DiskCache{Dir: t.TempDir(), Max: 1 << 30}

	src := &SASS{NVDisasm: fake.Tool, Cache: cache}
	p1, _ := analyseTwoFlushes(t, Options{Structures: src}, frames)
	runs := fake.Runs(t)
	if len(runs) != 1 || len(runs[0]) != 1 || runs[0][0] != syms[probeKernel] {
		t.Fatalf("nvdisasm runs %v, want one of symbol %d (%s) alone", runs, syms[probeKernel], probeKernel)
	}
	if st := src.Stats(); st.Functions != 1 || st.Disassembled != 1 || st.CacheHits != 0 {
		t.Errorf("first run stats %+v", st)
	}
	lined, flat := structured(p1)
	want := len(ref.Func(probeKernel).Insts) + len(ref.Func(probeHelper).Insts)
	if flat != 0 || lined != want {
		t.Fatalf("%d instructions placed by the structure, %d flat; want %d and 0", lined, flat, want)
	}

	src2 := &SASS{NVDisasm: fake.Tool, Cache: cache}
	p2, _ := analyseTwoFlushes(t, Options{Structures: src2}, frames)
	if n := len(fake.Runs(t)); n != 1 {
		t.Fatalf("the second run ran nvdisasm (%d runs in all)", n)
	}
	if st := src2.Stats(); st.CacheHits != 1 || st.Disassembled != 0 {
		t.Errorf("second run stats %+v", st)
	}
	if !bytes.Equal(noItems(p1), noItems(p2)) {
		t.Error("the profile from the cached listing differs")
	}
	src3 := &SASS{NVDisasm: "-", Cache: cache}
	p3, _ := analyseTwoFlushes(t, Options{Structures: src3}, frames)
	if !bytes.Equal(noItems(p1), noItems(p3)) {
		t.Error("without nvdisasm, the cached listing was not used")
	}
}

// Samples that arrive before their function's structure wait in the
// analysis and are placed by it, in a later item; the kernel's own
// measurements go out at once.
func TestPlacementWaitsForStructure(t *testing.T) {
	frames, _ := probeStream(t)
	cubin := readFile(t, probeCubin)
	fake := nvdisasmtest.New(t, cubin, readFile(t, probeHex), 600*time.Millisecond)
	merged, first := analyseTwoFlushes(t, Options{Structures: &SASS{NVDisasm: fake.Tool}}, frames)
	if first == nil || kernelMetric(first, profile.GPULaunches.Name()) != 2 {
		t.Fatalf("the first item lacks the kernel's launches")
	}
	if lined, flat := structured(first); lined+flat != 0 {
		t.Errorf("the first item placed %d instructions before their structure came", lined+flat)
	}
	if lined, flat := structured(merged); flat != 0 || lined == 0 {
		t.Errorf("%d instructions placed by the structure, %d flat", lined, flat)
	}
	direct, _ := analyseTwoFlushes(t, Options{Structures: &SASS{NVDisasm: "-", Files: []string{probeHex}}}, frames)
	if lined, _ := structured(direct); lined == 0 {
		t.Fatal("the committed listing did not place the samples")
	}
	if !bytes.Equal(noItems(merged), noItems(direct)) || !sameTree(merged, direct) {
		t.Error("deferred placement differs from placement with the structure at hand")
	}
}

// noItems encodes p without its item sets: how the same data was split
// into items depends on when structure arrived.
func noItems(p *profile.Profile) []byte {
	c := p.Clone()
	c.Items = nil
	return c.Encode()
}

func sameTree(a, b *profile.Profile) bool {
	if len(a.Nodes) != len(b.Nodes) {
		return false
	}
	for id, n := range a.Nodes {
		m := b.Nodes[id]
		if m == nil || m.Metrics.Get(profile.InstSamples) != n.Metrics.Get(profile.InstSamples) {
			return false
		}
	}
	return true
}

// A structure that does not come within the bound leaves the function's
// instructions flat, and the kernel says why.
func TestStructureTimeout(t *testing.T) {
	frames, _ := probeStream(t)
	cubin := readFile(t, probeCubin)
	fake := nvdisasmtest.New(t, cubin, readFile(t, probeHex), 3*time.Second)
	t0 := time.Now()
	o := Options{Structures: &SASS{NVDisasm: fake.Tool, Timeout: 2 * time.Second}, StructureWait: 300 * time.Millisecond}
	o.Job, o.Workers = "j", 1
	a := New(o)
	defer a.Close()
	for i, f := range frames {
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	a.Final()
	p, err := a.Flush(0)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the analysis took %v with a bound of 300ms", d)
	}
	if lined, flat := structured(p); lined != 0 || flat == 0 {
		t.Errorf("%d placed, %d flat", lined, flat)
	}
	if v := kernelMetric(p, StructureMissing+WhyTimeout); v != 1 {
		t.Errorf("%s = %d, want 1", StructureMissing+WhyTimeout, v)
	}
	if m := a.Missing(); len(m) != 1 || !strings.HasPrefix(m[0], probeKernel+": timeout") {
		t.Errorf("missing %q", m)
	}
}

// A function that calls one in another section gets that section too: a
// second nvdisasm run adds the callee.
func TestCalleeSectionsAreAdded(t *testing.T) {
	cubin := readFile(t, "../../testdata/sass/cflow/c.sm90.cubin")
	text := readFile(t, "../../testdata/sass/cflow/c.sm90.hex.txt")
	// Make _Z7genericPfi call the kernel of another section (the parser
	// takes a CALL's target by name).
	const caller, callee = "_Z7genericPfi", "_Z4warpPii"
	edited := bytes.Replace(text, []byte("`($_Z7genericPfi$_Z3genPKf)"), []byte("`("+callee+")"), 1)
	if bytes.Equal(edited, text) {
		t.Fatal("the listing has no CALL to edit")
	}
	fake := nvdisasmtest.New(t, cubin, edited, 0)
	syms := nvdisasmtest.Symbols(t, cubin)
	src := &SASS{NVDisasm: fake.Tool}
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	st, why := StructureOf(src, ModuleRef{Hash: h, Cubin: cubin, SM: 90}, caller)
	if st == nil {
		t.Fatal(why)
	}
	runs := fake.Runs(t)
	if len(runs) != 2 || len(runs[0]) != 1 || runs[0][0] != syms[caller] || len(runs[1]) != 2 {
		t.Fatalf("runs %v, want [%d] then [%d %d]", runs, syms[caller], syms[caller], syms[callee])
	}
	m := st.(*sassStructure).m
	if m.Func(callee) == nil || m.Func(caller) == nil {
		t.Error("the callee's section is not in the caller's listing")
	}
}

// An nvdisasm that selects other functions than the symbol indices say
// (counting otherwise) is caught: the module is disassembled whole, once,
// and serves its other functions too.
func TestSymbolMismatchFallsBackToWholeModule(t *testing.T) {
	cubin := readFile(t, probeCubin)
	fake := nvdisasmtest.NewShifted(t, cubin, readFile(t, probeHex), 0, 1)
	src := &SASS{NVDisasm: fake.Tool}
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	mod := ModuleRef{Hash: h, Cubin: cubin, SM: 90}
	st, why := StructureOf(src, mod, probeKernel)
	if st == nil {
		t.Fatal(why)
	}
	if pl, ok := st.Place(probeKernel, 0x10); !ok || pl.Function != probeKernel {
		t.Errorf("placed %+v %v", pl, ok)
	}
	if st, why := StructureOf(src, mod, probeUnasked); st == nil {
		t.Fatal(why)
	}
	runs := fake.Runs(t)
	if len(runs) != 2 || runs[1] != nil {
		t.Fatalf("runs %v, want a selection then the whole module", runs)
	}
	if s := src.Stats(); s.Whole != 1 {
		t.Errorf("stats %+v", s)
	}
}

// Without the module's bytes and without a listing, the reason says so.
func TestStructureReasons(t *testing.T) {
	src := &SASS{NVDisasm: "-"}
	if _, why := StructureOf(src, ModuleRef{Hash: 5}, "k"); ReasonCode(why) != WhyNoCubin {
		t.Errorf("no bytes: %q", why)
	}
	if _, why := StructureOf(src, ModuleRef{Hash: 6, Cubin: []byte("x")}, "k"); ReasonCode(why) != WhyNoNVDisasm {
		t.Errorf("no nvdisasm: %q", why)
	}
	if _, why := StructureOf(src, ModuleRef{}, "k"); ReasonCode(why) != WhyUnknownModule {
		t.Errorf("no module: %q", why)
	}
	cubin := readFile(t, probeCubin)
	fake := nvdisasmtest.New(t, cubin, readFile(t, probeHex), 0)
	src = &SASS{NVDisasm: fake.Tool}
	if _, why := StructureOf(src, ModuleRef{Hash: 7, Cubin: cubin}, "no_such_kernel"); ReasonCode(why) != WhyNotInModule {
		t.Errorf("not in the module: %q", why)
	}
}

// A small module's kernels are disassembled when it loads, all in one
// nvdisasm run, before any launches; the profile is the same. Above
// PrefetchBytes only the launched kernel is, at its launch, as before.
func TestSmallModulesArePrefetched(t *testing.T) {
	frames, _ := probeStream(t)
	cubin := readFile(t, probeCubin)
	c, err := sass.ParseCubin(cubin)
	if err != nil {
		t.Fatal(err)
	}
	syms := nvdisasmtest.Symbols(t, cubin)
	var kernels []int
	for _, f := range c.Functions {
		if f.Entry {
			kernels = append(kernels, syms[f.Name])
		}
	}
	if len(kernels) < 2 {
		t.Fatalf("the probe module has %d kernels: the test needs two or more", len(kernels))
	}

	plain := nvdisasmtest.New(t, cubin, readFile(t, probeHex), 0)
	p0, _ := analyseTwoFlushes(t, Options{Structures: &SASS{NVDisasm: plain.Tool}, PrefetchBytes: len(cubin) - 1}, frames)
	if runs := plain.Runs(t); len(runs) != 1 || len(runs[0]) != 1 || runs[0][0] != syms[probeKernel] {
		t.Fatalf("a module above PrefetchBytes: nvdisasm runs %v, want one of the launched kernel (%d) alone", runs, syms[probeKernel])
	}

	fake := nvdisasmtest.New(t, cubin, readFile(t, probeHex), 0)
	src := &SASS{NVDisasm: fake.Tool}
	a := New(Options{Job: "j", Workers: 1, Structures: src, PrefetchBytes: len(cubin)})
	for i, f := range frames[:3] { // HELLO, STALL_REASONS, MODULE
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(fake.Runs(t)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	a.Close()
	runs := fake.Runs(t)
	if len(runs) != 1 || len(runs[0]) != len(kernels) {
		t.Fatalf("nvdisasm runs %v after the module loaded, want one of its %d kernels %v", runs, len(kernels), kernels)
	}
	p1, _ := analyseTwoFlushes(t, Options{Structures: src, PrefetchBytes: len(cubin)}, frames)
	if n := len(fake.Runs(t)); n != 1 {
		t.Errorf("the launched kernel ran nvdisasm again (%d runs)", n)
	}
	if !bytes.Equal(noItems(p0), noItems(p1)) {
		t.Error("the profile with the module prefetched differs")
	}
}

// Prefetching stops at four times PrefetchBytes of modules in all.
func TestPrefetchBudget(t *testing.T) {
	cubin := readFile(t, probeCubin)
	rec := &prefetchRecorder{}
	a := New(Options{Job: "j", Workers: 1, Structures: rec, PrefetchBytes: len(cubin)})
	defer a.Close()
	if err := a.Add(&rawstream.Hello{Version: 3, Mode: rawstream.ModeRedundancy, SM: 90}, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		// Six modules of PrefetchBytes each, with six contents (hashes).
		b := append([]byte{}, cubin...)
		b[len(b)-1] ^= byte(i + 1)
		if err := a.Add(&rawstream.Module{ModuleID: uint64(i + 1), ContentKey: uint64(100 + i), Size: uint32(len(b)), HasBytes: true, Bytes: b}, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if rec.n != 4 {
		t.Errorf("%d modules prefetched, want 4 (four times PrefetchBytes)", rec.n)
	}
}

type prefetchRecorder struct{ n int }

func (r *prefetchRecorder) Request(ModuleRef, string) *Pending { return Resolved(nil, WhyNoNVDisasm) }
func (r *prefetchRecorder) Prefetch(ModuleRef)                 { r.n++ }

// One listing file of several cubins serves each module with its own hash:
// two modules asking for functions of the same file get structures whose
// function frames name their own module, whichever asked first (keyed by
// the listing alone, the first to ask named both).
func TestOneListingServesEachModuleUnderItsOwnHash(t *testing.T) {
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		src := &SASS{NVDisasm: "-", Files: []string{probeHex}}
		mods := [2]ModuleRef{
			{Hash: profile.ModuleHash(0x1111), SM: 90, Functions: []string{probeKernel}},
			{Hash: profile.ModuleHash(0x2222), SM: 90, Functions: []string{probeUnasked}},
		}
		fns := [2]string{probeKernel, probeUnasked}
		for _, i := range order {
			st, why := StructureOf(src, mods[i], fns[i])
			if st == nil {
				t.Fatalf("module %d: no structure: %s", i, why)
			}
			pl, ok := st.Place(fns[i], 0)
			if !ok || len(pl.Frames) == 0 {
				t.Fatalf("module %d: %s+0 not placed", i, fns[i])
			}
			if got, want := pl.Frames[0].Module, mods[i].Hash.String(); got != want {
				t.Errorf("order %v: %s's frame names module %s, want %s", order, fns[i], got, want)
			}
		}
	}
}
