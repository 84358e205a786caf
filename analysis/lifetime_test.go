package analysis

import (
	"math"
	"testing"

	"gpuprof/profile"
)

func TestLatencyAt(t *testing.T) {
	m := MemorySpec{Loaded: []LatencyPoint{{100, 400}, {1100, 500}, {2100, 700}}}
	for _, c := range []struct{ gbs, want float64 }{
		{50, 400},   // below the curve: its first point
		{600, 450},  // between the first two
		{1100, 500}, // on a point
		{1600, 600}, // between the last two
		{3100, 900}, // above: along the last two
		{2100, 700}, // the last point
	} {
		if got := m.LatencyAt(c.gbs); !approx(got, c.want) {
			t.Errorf("LatencyAt(%v) = %v, want %v", c.gbs, got, c.want)
		}
	}
}

// blockFloor by hand on a GPU of 132 SMs, dispatch 80 ns per block.
func TestBlockFloor(t *testing.T) {
	flat := H100
	flat.Memory = MemorySpec{DispatchNs: 80, Loaded: []LatencyPoint{{0, 400}, {1000, 400}}, StreamGBs: 3000}
	perSM := 262144.0 / 132
	for _, c := range []struct {
		name                       string
		g                          GPUSpec
		grid, resident, chain, byt float64
		want                       float64
	}{
		// 2 × 400 ns over 8 resident blocks: 100 ns per block, above the dispatch.
		{"latency", flat, 262144, 8, 2, 1e6, perSM * 100},
		// 400 ns over 8: 50 ns per block, under the dispatch.
		{"dispatch", flat, 262144, 8, 1, 1e6, perSM * 80},
		// 1 GB at 3000 GB/s.
		{"bandwidth", flat, 262144, 8, 2, 1e9, 1e9 / 3000},
		// one block per SM: one lifetime.
		{"one wave", flat, 132, 8, 2, 1e6, 800},
	} {
		if got, _, _ := blockFloor(c.g, c.grid, c.resident, c.chain, c.byt); !approx(got, c.want) {
			t.Errorf("%s: %v ns, want %v", c.name, got, c.want)
		}
	}
	// A latency that grows with the bandwidth, L = 400 + 0.2 (B/T - 1000):
	// T = perSM × 2 L / 8 is the positive root of T² - a(200) T - a 0.2 B = 0
	// with a = perSM/4.
	sloped := flat
	sloped.Memory.Loaded = []LatencyPoint{{1000, 400}, {2000, 600}}
	a, B := perSM/4, 4e8
	want := (a*200 + math.Sqrt(a*a*200*200+4*a*0.2*B)) / 2
	if got, gbs, lat := blockFloor(sloped, 262144, 8, 2, B); !approx(got, want) || !approx(gbs, B/want) || !approx(lat, 400+0.2*(B/want-1000)) {
		t.Errorf("sloped: %v ns at %v GB/s, %v ns latency; want %v ns", got, gbs, lat, want)
	}
}

// A one-shot kernel: label = l[i] (1 byte), v = x[i], w = table[label]
// (a 16-byte object), y[i] = w * v. Its chain is label → table → store
// and x → store: the table load, 4 KB touched of a 16-byte object,
// hardly reaches DRAM, so the chain is about 2 round trips.
func TestOneShotChainAndBytes(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 5
		LDC.64 R2, c[0x0][0x210]
		LDC.64 R4, c[0x0][0x218]
		LDC.64 R8, c[0x0][0x220]
		LDC.64 R10, c[0x0][0x228]
		#line 6
		LDG.E.U8 R6, desc[UR4][R2.64] {W0 S1}
		LDG.E R7, desc[UR4][R4.64] {W1 S1}
		IMAD.WIDE R12, R6, 0x4, R8 {B0 S4}
		LDG.E R13, desc[UR4][R12.64] {W2 S1}
		FMUL R14, R13, R7 {B12 S4}
		STG.E desc[UR4][R10.64], R14 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	k := s.k.ID
	s.launches(2, 512, 262144, 16)
	sectors := map[uint64]uint64{0x40: 128, 0x50: 512, 0x70: 128, 0x90: 512} // 128 warps each
	for off, sec := range sectors {
		s.p.Add(s.node[off], profile.MemWarpAccess, 128)
		s.p.Add(s.node[off], profile.MemSectors, sec)
	}
	s.stall(0x80, "long_scoreboard", 50)
	s.stall(0x90, "lg_throttle", 50)
	fid := profile.FuncIDOf(mod1, "k")
	for off, size := range map[uint32]uint64{0x40: 4096, 0x70: 16} {
		id := profile.ObjectIDOf(1, size)
		s.p.Objects[id] = &profile.DataObject{ID: id, Size: size}
		s.p.Spatial[profile.SpatialKey{Context: k, Object: id, PC: profile.PC{Func: fid, Offset: off}, Access: profile.Load}] = 1
	}
	x := NewIndex(s.p)
	kv, err := newKernelView(x, k, Modules{mod1: m}, Options{})
	if err != nil || kv == nil {
		t.Fatal(err)
	}
	ref := func(off uint32) instRef {
		for _, fv := range kv.fns {
			return instRef{fv, fv.c.F.InstAt(uint64(off))}
		}
		t.Fatal("no function")
		return instRef{}
	}
	tableDRAM := 16.0 / (32 * 128)
	for _, c := range []struct {
		name         string
		rm           map[instRef]removal
		chain, bytes float64
	}{
		{"as it is", nil, 2 + tableDRAM, 32 + 128 + 32*tableDRAM + 128},
		// Narrower x (half its bytes): the access stays in the chain.
		{"narrower x", map[instRef]removal{ref(0x50): {bytes: 0.5}}, 2 + tableDRAM, 32 + 64 + 32*tableDRAM + 128},
		// x loaded for half the threads, after a test of label: label →
		// x (half a round trip) → store.
		{"conditional x", map[instRef]removal{ref(0x50): {bytes: 0.5, chain: 0.5, after: []instRef{ref(0x40)}}}, 2.5, 32 + 64 + 32*tableDRAM + 128},
	} {
		as := kv.oneShotAccesses(c.rm)
		bytes := 0.0
		for _, a := range as {
			bytes += a.bytes
		}
		chain := kv.memoryChain(as)
		if !approx(chain, c.chain) || !approx(bytes, c.bytes) {
			t.Errorf("%s: chain %v bytes/warp %v, want %v and %v", c.name, chain, bytes, c.chain, c.bytes)
		}
		// Two launches of 262144 blocks of 512 threads (4 resident per SM).
		fl, note, ok := kv.lifetimeFloor(c.rm)
		want, _, _ := blockFloor(H100, 262144, 4, c.chain, c.bytes*262144*16)
		if !ok || !approx(fl, 2*want) {
			t.Errorf("%s: floor %v (ok %v), want %v; %s", c.name, fl, ok, 2*want, note)
		}
	}
}

// A kernel's estimated time after a change is at most its time before
// (item 44): a floor of 150 over a kernel that took 100 leaves 100 (and
// says so); a floor of 80 stands.
func TestKeepKernelTime(t *testing.T) {
	if l, capped := keepKernelTime(150, 100); l != 100 || !capped {
		t.Errorf("floor 150 over 100: %v (capped %v), want 100 capped", l, capped)
	}
	if l, capped := keepKernelTime(80, 100); l != 80 || capped {
		t.Errorf("floor 80 under 100: %v (capped %v), want 80 as it is", l, capped)
	}
}
