package analysis

import (
	"math"
	"strings"
	"testing"

	"gpuprof/profile"
)

func TestSweepFloor(t *testing.T) {
	const mb = 1e6
	stream := h100Memory.StreamGBs // 3068.4 GB/s = bytes per ns
	// BlackScholes-like: five 16 MB arrays, 28.3 µs a launch, 50 MiB L2:
	// 80e6 / 3068.4 = 26,072 ns, so nothing that keeps the bytes beats
	// 28,300 / 26,072 = 1.085x.
	ns, ok := sweepFloor(80*mb, 80*mb, 50<<20, 28300, stream)
	if !ok || math.Abs(ns-26072) > 1 {
		t.Fatalf("floor %.0f ns (ok %v), want 26072", ns, ok)
	}
	// A narrower type for one of the five arrays (a quarter of its
	// bytes stay): 68e6 bytes, 22,161 ns.
	if ns, _ := sweepFloor(80*mb, 68*mb, 50<<20, 28300, stream); math.Abs(ns-22161) > 1 {
		t.Fatalf("floor after %.0f ns, want 22161", ns)
	}
	// Objects the L2 holds: no floor.
	if _, ok := sweepFloor(40*mb, 40*mb, 50<<20, 28300, stream); ok {
		t.Fatal("a footprint within the L2 drew a floor")
	}
	// 80 MB in 20 µs would be 4,000 GB/s, above the stream: the kernel
	// cannot be sweeping all of it, so no floor.
	if _, ok := sweepFloor(80*mb, 80*mb, 50<<20, 20000, stream); ok {
		t.Fatal("a footprint the launch cannot have swept drew a floor")
	}
}

func TestKnee(t *testing.T) {
	// The H100's curve: least latency 398.4 ns; 5% over it is 418.3 ns,
	// first passed at 1291.3 GB/s (418.7 ns): the knee is the point
	// before, 669.5 GB/s.
	if k := kneeGBs(h100Memory); k != 669.5 {
		t.Fatalf("knee %.1f GB/s, want 669.5", k)
	}
	// A curve that never rises 5% has its knee at the stream ceiling.
	flat := MemorySpec{Loaded: []LatencyPoint{{100, 400}, {2000, 410}}, StreamGBs: 3000}
	if k := kneeGBs(flat); k != 3000 {
		t.Fatalf("flat curve's knee %.1f, want 3000", k)
	}
}

// Item 36 on a kernel: one 128-byte load a warp (400 sectors over 100
// warp accesses). 64 blocks of 256 threads are 512 resident warps, which
// ask for at most 512 × 128 / 398.4 = 164 GB/s, below the H100's knee of
// 669.5 GB/s: a narrower type saves nothing. 2,112 blocks fill 8 blocks
// on each of the 132 SMs, 8,448 warps asking for 2,714 GB/s: no bound.
func TestRoundTripBound(t *testing.T) {
	for _, tc := range []struct {
		grid  uint64
		bound string
	}{{64, "at most 164 GB/s"}, {2112, ""}} {
		m := parseSASS(t, "k", `
			#line 4
			LDG.E R4, desc[UR4][R2.64] {W0 S1}
			#line 5
			FADD R7, R4, 1 {B0 S4}
			STG.E desc[UR4][R8.64], R7 {S1}
			EXIT`)
		s := sampledKernel(t, m, "k", mod1)
		s.launches(1, 256, tc.grid, 32)
		s.p.Add(s.node[0x00], profile.MemWarpAccess, 100)
		s.p.Add(s.node[0x00], profile.MemSectors, 400)
		s.stall(0x10, "long_scoreboard", 80)
		s.stall(0x20, "selected", 20)
		kv, err := newKernelView(NewIndex(s.p), s.k.ID, Modules{mod1: m}, Options{})
		if err != nil || kv == nil {
			t.Fatalf("grid %d: no kernel view (%v)", tc.grid, err)
		}
		why := kv.roundTripBound()
		if tc.bound == "" && why != "" || tc.bound != "" && !strings.Contains(why, tc.bound) {
			t.Errorf("grid %d: bound %q, want one saying %q", tc.grid, why, tc.bound)
		}
	}
}

// Item 45: 134 MB swept in 282 µs is 475 GB/s of asked bytes; with 18
// sectors touched per warp access where a coalesced one needs 4 (a
// transpose's column stores beside its coalesced loads) the memory moves
// 4.5 times that, 2138 GB/s, past a 670 GB/s knee; a kernel whose
// accesses touch no more than they need moves its 475.
func TestSectorRate(t *testing.T) {
	if r := sectorRate(134e6, 282e3, 18, 4); !approx(r, 134e6/282e3*4.5) {
		t.Errorf("sector rate %v, want %v", r, 134e6/282e3*4.5)
	}
	if r := sectorRate(134e6, 282e3, 3, 4); !approx(r, 134e6/282e3) {
		t.Errorf("sector rate %v with fewer sectors than needed, want %v", r, 134e6/282e3)
	}
}

// Item 46: a store whose address the thread loaded first (same base
// register, same definition reaching it, same offset and width) is a
// read-modify-write; a store to an address it never loads, or loaded
// through a base redefined in between, is not.
func TestLoadsStoredAddress(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 4
		LDG.E R4, desc[UR4][R2.64+0x8] {W0 S1}
		FADD R5, R4, 1 {B0 S4}
		STG.E desc[UR4][R2.64+0x8], R5 {S1}
		STG.E desc[UR4][R2.64+0x10], R5 {S1}
		IADD3 R2, R2, 0x100, RZ {S4}
		STG.E desc[UR4][R2.64+0x8], R5 {S1}
		STG.E desc[UR4][R6.64], R5 {S1}
		EXIT`)
	c := codeOf(m, m.Func("k"))
	for i, want := range map[int]bool{2: true, 3: false, 5: false, 6: false} {
		if got := c.loadsStoredAddress(i); got != want {
			t.Errorf("store %d (%s): loaded %v, want %v", i, c.F.Insts[i].Opcode, got, want)
		}
	}
}

func TestMergedObjectAdviceKeepsEachKernelsShare(t *testing.T) {
	obj := profile.ObjectID(7)
	mk := func(k profile.NodeID, frac float64) Advice {
		return Advice{Kind: KindCompression, Hotspots: []Where{{Context: k, Object: &obj}}, red: &redInfo{frac: frac, byKernel: map[profile.NodeID]float64{k: frac}}}
	}
	// One array read as 8-bit values by kernel 1 (an index saves
	// nothing) and as 32-bit values by kernel 2 (1 - 8/32 = 0.75).
	out := mergeObjectInsights([]Advice{mk(1, 0), mk(2, 0.75)})
	if len(out) != 1 {
		t.Fatalf("%d advices, want the two merged", len(out))
	}
	r := out[0].red
	if r.fracIn(1) != 0 || r.fracIn(2) != 0.75 || r.frac != 0.75 {
		t.Fatalf("shares %v %v (max %v), want 0, 0.75 and 0.75", r.fracIn(1), r.fracIn(2), r.frac)
	}
}

// Item 39: regrouping a warp's lanes removes the idle lanes' share of the
// issue and dependency samples of divergent code, not of its memory
// waits. The load at 0x00 and the add at 0x10 run with half the lanes;
// the add has 40 selected and 60 long_scoreboard samples, the store 100
// selected at full efficiency: T = 200, M = 40 × 0.5 = 20, 200/180 (it was
// 100 × 0.5 = 50, 200/150, before the memory waits were kept).
func TestBranchDivergenceKeepsMemoryWaits(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 4
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		#line 5
		FADD R7, R4, 1 {B0 S4}
		#line 6
		STG.E desc[UR4][R8.64], R7 {S1}
		EXIT`)
	s := sampledKernel(t, m, "k", mod1)
	for off, lanes := range map[uint64]uint64{0x00: 16, 0x10: 16, 0x20: 32} {
		s.p.Add(s.node[off], profile.InstExecuted, 100)
		s.p.Add(s.node[off], InstThreadExecuted, 100*lanes)
	}
	s.stall(0x10, "selected", 40)
	s.stall(0x10, "long_scoreboard", 60)
	s.stall(0x20, "selected", 100)
	a := find(s.advise(t, m, Options{}), OptBranchDivergence)
	if a == nil {
		t.Fatal("branch divergence not raised")
	}
	if want := 200.0 / 180; !approx(a.Speedup, want) || !strings.Contains(a.Evidence, "memory waits' 30 stay") {
		t.Fatalf("speedup %v, want %v (%s)", a.Speedup, want, a.Evidence)
	}
}

// Item 38: the value-tracing pass ran a quarter of the timed arrays; the
// timed pass allocated 268 MB at the site where the traced kernel's
// 67 MB object was allocated, so the kernel's footprint is counted at
// 268 MB (and a second object, allocated once, at its own 4 MB).
func TestFootprintAtTheTimedSize(t *testing.T) {
	p := profile.New("j")
	host := p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "main", File: "main.cu", Line: 10})
	k := p.Child(host.ID, profile.Frame{Kind: profile.KindKernel, Function: "triad"})
	site := p.Child(host.ID, profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "alloc_arrays", File: "main.cu", Line: 20})
	other := p.Child(host.ID, profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "alloc_table", File: "main.cu", Line: 30})
	traced := profile.ObjectIDOf(site.ID, 67<<20)
	timed := profile.ObjectIDOf(site.ID, 268<<20)
	table := profile.ObjectIDOf(other.ID, 4<<20)
	p.Objects[traced] = &profile.DataObject{ID: traced, Context: site.ID, Size: 67 << 20}
	p.Objects[timed] = &profile.DataObject{ID: timed, Context: site.ID, Size: 268 << 20}
	p.Objects[table] = &profile.DataObject{ID: table, Context: other.ID, Size: 4 << 20}
	p.ObjStats[profile.ObjectKey{Context: k.ID, Object: traced, Access: profile.Load}] = &profile.ObjectStat{Accesses: 10}
	p.ObjStats[profile.ObjectKey{Context: k.ID, Object: table, Access: profile.Load}] = &profile.ObjectStat{Accesses: 10}
	kv := &kernelView{x: NewIndex(p), k: k.ID}
	total, by := kv.footprint()
	if total != 272<<20 || by[traced] != 268<<20 || by[table] != 4<<20 {
		t.Fatalf("footprint %v by %v, want 272 MiB with the traced array at 268 MiB", total, by)
	}
}

// Item 47: a block reduction's tail, each step behind an exit of the
// threads it no longer needs, and its last store made by one lane, all at
// one source line. The store's lanes (1 of 32) stand for the code after
// the last exit, not for the steps before it, which lanes could leave
// from with more lanes running. Without the exits, the line's one block
// runs with the store's lanes throughout.
func TestDivergenceLanesStopAtExits(t *testing.T) {
	for _, exits := range []bool{true, false} {
		text := `
		#line 11
		S2R R0, SR_TID.X {S1}
		ISETP.GT.U32.AND P0, PT, R0, 0xf, PT {S4}
		@P0 EXIT
		LDS.64 R4, [R2] {S1}
		DADD R4, R4, R4 {S4}
		ISETP.NE.AND P0, PT, R0, RZ, PT {S4}
		@P0 EXIT
		STG.E.64 desc[UR4][R8.64], R4 {S1}
		EXIT`
		if !exits {
			text = strings.ReplaceAll(text, "@P0 EXIT", "NOP")
		}
		m := parseSASS(t, "k", text)
		s := sampledKernel(t, m, "k", mod1)
		for off := uint64(0); off <= 0x80; off += 0x10 {
			s.stall(off, "selected", 10)
		}
		s.p.Add(s.node[0x70], profile.MemWarpAccess, 100)
		s.p.Add(s.node[0x70], profile.MemStores, 100)
		s.launches(1, 128, 1, 16)
		x := NewIndex(s.p)
		kv, err := newKernelView(x, s.k.ID, Modules{mod1: m}, Options{})
		if err != nil || kv == nil {
			t.Fatalf("no kernel view (%v)", err)
		}
		eff, _ := simt(x, s.k.ID, kv)
		if e, ok := eff[s.node[0x70]]; !ok || !approx(e, 1.0/32) {
			t.Errorf("exits %v: store's lanes %v %v, want 1/32", exits, e, ok)
		}
		e, ok := eff[s.node[0x40]]
		if exits && ok {
			t.Errorf("the add before the last exit priced at the store's lanes, %v", e)
		}
		if !exits && (!ok || !approx(e, 1.0/32)) {
			t.Errorf("without exits the add's lanes are %v %v, want the line's 1/32", e, ok)
		}
	}
}
