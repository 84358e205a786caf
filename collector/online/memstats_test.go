package online

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// refReuse computes reuse distances the plain way over one block's loads
// and stores at one granularity: a load's distance is the number of
// distinct (unit, version) pairs loaded since the unit's previous load of
// the same version (a store makes a new version); none, or window or
// more, is the inf bucket.
type refReuse struct {
	window  int
	loads   [][2]uint64 // (unit, version) in order
	version map[uint64]uint64
}

func newRefReuse(window int) *refReuse {
	return &refReuse{window: window, version: map[uint64]uint64{}}
}

func (r *refReuse) load(u uint64) int {
	key := [2]uint64{u, r.version[u]}
	b := ReuseBuckets
	for j := len(r.loads) - 1; j >= 0; j-- {
		if r.loads[j] != key {
			continue
		}
		seen := map[[2]uint64]bool{}
		for _, k := range r.loads[j+1:] {
			seen[k] = true
		}
		if len(seen) < r.window {
			b = reuseBucket(len(seen))
		}
		break
	}
	r.loads = append(r.loads, key)
	return b
}

func (r *refReuse) store(u uint64) { r.version[u]++ }

// The tracker against the plain definition, with windows small enough
// that growth and compaction happen many times.
func TestReuseTrackerMatchesReference(t *testing.T) {
	for _, window := range []int{1, 2, 5, 16, 64} {
		for seed := uint64(1); seed <= 3; seed++ {
			rng := rand.New(rand.NewPCG(seed, uint64(window)))
			tr, ref := newReuseTracker(window), newRefReuse(window)
			units := 2 + rng.IntN(3*window+8)
			hist := map[int]int{}
			for i := 0; i < 3000; i++ {
				u := uint64(rng.IntN(units))
				if rng.IntN(10) == 0 {
					tr.store(u)
					ref.store(u)
					continue
				}
				got, want := tr.load(u), ref.load(u)
				if got != want {
					t.Fatalf("window %d seed %d op %d: load of %d in bucket %d, the reference says %d", window, seed, i, u, got, want)
				}
				hist[got]++
			}
			if len(hist) < 2 {
				t.Errorf("window %d seed %d: one bucket only %v: the test exercises nothing", window, seed, hist)
			}
		}
	}
}

// A tracker reset between blocks measures each block as a new one would,
// and keeps its room through blocks smaller than it (a grid's border
// blocks among its inner ones) until shrinkAfter of them came in a row.
func TestReuseTrackerResetKeepsRoom(t *testing.T) {
	const window = 1 << 10
	tr := newReuseTracker(window)
	rng := rand.New(rand.NewPCG(7, 7))
	block := func(loads int) {
		tr.reset()
		ref := newRefReuse(window)
		for i := 0; i < loads; i++ {
			u := uint64(rng.IntN(loads/2 + 1))
			if got, want := tr.load(u), ref.load(u); got != want {
				t.Fatalf("block of %d loads, load %d: bucket %d, the reference says %d", loads, i, got, want)
			}
		}
	}
	block(1000)
	room := len(tr.fen)
	for i := 0; i < shrinkAfter-1; i++ {
		block(10)
		if i%4 == 3 {
			block(1000) // an inner block resets the count
		}
	}
	if len(tr.fen) != room {
		t.Fatalf("after small blocks among large ones: room %d, was %d", len(tr.fen), room)
	}
	for i := 0; i < shrinkAfter; i++ {
		block(10)
	}
	if len(tr.fen) >= room {
		t.Errorf("after %d small blocks in a row: room %d, still %d", shrinkAfter, len(tr.fen), room)
	}
}

func TestBankDegree(t *testing.T) {
	lanes := func(n int, addr func(l int) uint64, size int) []uint64 {
		var ws []uint64
		for l := 0; l < n; l++ {
			a := addr(l)
			for x := a >> 2; x <= (a+uint64(size)-1)>>2; x++ {
				ws = append(ws, x)
			}
		}
		return ws
	}
	for _, tc := range []struct {
		name             string
		words            []uint64
		degree, distinct int
	}{
		{"row of floats", lanes(32, func(l int) uint64 { return uint64(4 * l) }, 4), 1, 32},
		{"column of a 32x32 float tile", lanes(32, func(l int) uint64 { return uint64(4 * 32 * l) }, 4), 32, 32},
		{"column of a padded 32x33 tile", lanes(32, func(l int) uint64 { return uint64(4 * 33 * l) }, 4), 1, 32},
		{"broadcast", lanes(32, func(int) uint64 { return 64 }, 4), 1, 1},
		{"stride 2 floats", lanes(32, func(l int) uint64 { return uint64(8 * l) }, 4), 2, 32},
		{"float2 row", lanes(32, func(l int) uint64 { return uint64(8 * l) }, 8), 2, 64},
		{"float4 row", lanes(32, func(l int) uint64 { return uint64(16 * l) }, 16), 4, 128},
	} {
		d, n := bankDegree(tc.words)
		if d != tc.degree || n != tc.distinct {
			t.Errorf("%s: degree %d of %d words, want %d of %d", tc.name, d, n, tc.degree, tc.distinct)
		}
	}
}

// memReference replays a stream's global and shared records per block in
// stream order: reuse histograms per kernel function (loads only; stores
// and atomics restart their units) measured in every period-th block of
// each launch in the order the blocks first appear, scaled to the loads
// of all blocks (scaleHist, over the whole stream as one item); bank
// passes per kernel function, and memory divergence (distinct sectors per
// global warp access).
type memReference struct {
	reuse map[string]map[string]uint64 // kernel -> metric -> count
}

func runMemReference(t *testing.T, stream []byte, period int) *memReference {
	ref := &memReference{reuse: map[string]map[string]uint64{}}
	measured := map[string]*reuseAcc{}
	order := map[uint64]map[uint32]int{} // launch -> block -> order of appearance
	type launch struct {
		fn    string
		warps int
	}
	type cta struct {
		r      [3]*refReuse
		exited map[uint16]bool
	}
	funcs := map[uint32]string{}
	launches := map[uint64]launch{}
	ctas := map[[2]uint64]*cta{}
	add := func(k, m string, v uint64) {
		if ref.reuse[k] == nil {
			ref.reuse[k] = map[string]uint64{}
		}
		ref.reuse[k][m] += v
	}
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *rawstream.Function:
			funcs[f.FunctionID] = f.Name
		case *rawstream.Launch:
			launches[f.LaunchID] = launch{funcs[f.FunctionID], int((f.Block[0]*f.Block[1]*f.Block[2] + 31) / 32)}
		case *rawstream.KernelEnd:
			for k := range ctas {
				if k[0] == f.LaunchID {
					delete(ctas, k)
				}
			}
		case *rawstream.Access:
			l := launches[f.LaunchID]
			it := f.Records()
			for it.Next() {
				r := it.Record()
				key := [2]uint64{f.LaunchID, uint64(r.Block)}
				if order[f.LaunchID] == nil {
					order[f.LaunchID] = map[uint32]int{}
				}
				if _, ok := order[f.LaunchID][r.Block]; !ok {
					order[f.LaunchID][r.Block] = len(order[f.LaunchID])
				}
				measure := order[f.LaunchID][r.Block]%period == 0
				if r.Size == 0 {
					if c := ctas[key]; c != nil && r.Flags&rawstream.FlagBlockExit != 0 {
						c.exited[r.Warp] = true
						if len(c.exited) >= l.warps {
							delete(ctas, key)
						}
					}
					continue
				}
				var addrs []uint64
				for e := 0; e < r.NumLanes(); e++ {
					a, _ := r.Lane(e)
					addrs = append(addrs, a)
				}
				if r.Space == rawstream.SpaceShared {
					perBank := map[uint64]map[uint64]bool{}
					words := map[uint64]bool{}
					for _, a := range addrs {
						for x := a / 4; x <= (a+uint64(r.Size)-1)/4; x++ {
							if perBank[x%32] == nil {
								perBank[x%32] = map[uint64]bool{}
							}
							perBank[x%32][x] = true
							words[x] = true
						}
					}
					deg := 0
					for _, s := range perBank {
						deg = max(deg, len(s))
					}
					add(l.fn, SharedWarpAccesses.Name(), 1)
					add(l.fn, SharedWavefronts.Name(), uint64(deg))
					add(l.fn, SharedIdeal.Name(), uint64((len(words)+31)/32))
					continue
				}
				if r.Space != rawstream.SpaceGlobal {
					continue
				}
				c := ctas[key]
				if c == nil {
					c = &cta{exited: map[uint16]bool{}}
					for g := range c.r {
						c.r[g] = newRefReuse(ReuseWindow)
					}
					ctas[key] = c
				}
				load := r.Flags&(rawstream.FlagWrite|rawstream.FlagAtomic) == 0
				if r.Flags&(rawstream.FlagRead|rawstream.FlagWrite|rawstream.FlagAtomic) != 0 && r.Flags&rawstream.FlagPrefetch == 0 {
					sectors := map[uint64]bool{}
					for _, a := range addrs {
						for x := a / 32; x <= (a+uint64(r.Size)-1)/32; x++ {
							sectors[x] = true
						}
					}
					add(l.fn, profile.MemWarpAccess.Name(), 1)
					add(l.fn, profile.MemSectors.Name(), uint64(len(sectors)))
				}
				for g, gr := range reuseGrains {
					set := map[uint64]bool{}
					for _, a := range addrs {
						if gr.shift == 0 {
							set[a] = true
							continue
						}
						for x := a >> gr.shift; x <= (a+uint64(r.Size)-1)>>gr.shift; x++ {
							set[x] = true
						}
					}
					// ascending unit order within one access
					us := make([]uint64, 0, len(set))
					for u := range set {
						us = append(us, u)
					}
					for i := range us {
						for j := i + 1; j < len(us); j++ {
							if us[j] < us[i] {
								us[i], us[j] = us[j], us[i]
							}
						}
					}
					if load {
						entry(measured, l.fn).loads[g] += uint64(len(us))
					}
					if !measure {
						continue
					}
					for _, u := range us {
						if load {
							entry(measured, l.fn).h[g][c.r[g].load(u)]++
						} else {
							c.r[g].store(u)
						}
					}
				}
			}
		}
	}
	for fn, h := range measured {
		for g, gr := range reuseGrains {
			for k, n := range scaleHist(h.h[g], h.loads[g]) {
				if n > 0 {
					add(fn, ReuseMetric(gr.name, k), n)
				}
			}
		}
	}
	return ref
}

// memTotals sums every metric over the subtrees of the kernel nodes of
// each kernel function.
func memTotals(p *profile.Profile) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	inc := p.Inclusive()
	for id, n := range p.Nodes {
		if n.Frame.Kind != profile.KindKernel {
			continue
		}
		if out[n.Frame.Function] == nil {
			out[n.Frame.Function] = map[string]uint64{}
		}
		for _, mv := range inc[id] {
			name := mv.ID.Name()
			if strings.HasPrefix(name, "reuse.") || strings.HasPrefix(name, "mem.shared.") ||
				name == profile.MemWarpAccess.Name() || name == profile.MemSectors.Name() {
				out[n.Frame.Function][name] += mv.V
			}
		}
	}
	return out
}

func TestMemStatsMatchReference(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		stream := randomStream(t, seed)
		want := runMemReference(t, stream, 1).reuse
		if len(want) == 0 || len(want["_Z2k1v"]) < 4 {
			t.Fatalf("seed %d: the reference found too little: %v", seed, want)
		}
		for _, r := range runs {
			name := fmt.Sprintf("seed=%d/workers=%d/flush=%d", seed, r.workers, r.flush)
			got := memTotals(analyse(t, stream, r.workers, r.flush, nil))
			for k, ms := range want {
				for m, v := range ms {
					if got[k][m] != v {
						t.Errorf("%s: %s %s = %d, the reference says %d", name, k, m, got[k][m], v)
					}
				}
				for m, v := range got[k] {
					if ms[m] == 0 && v != 0 {
						t.Errorf("%s: %s %s = %d, the reference has none", name, k, m, v)
					}
				}
			}
		}
	}
}

// Reuse measured in every period-th block against the reference on the
// same blocks: the buckets match exactly over one item, and the loads add
// up to every traced block's however the stream is cut into items.
func TestMemStatsSampledMatchReference(t *testing.T) {
	for _, period := range []int{2, 3} {
		for seed := uint64(1); seed <= 3; seed++ {
			stream := randomStream(t, seed)
			want := runMemReference(t, stream, period).reuse
			exact := runMemReference(t, stream, 1).reuse
			differ := false
			for k, ms := range want {
				for _, g := range reuseGrains {
					if w, e := grainLoads(ms, g.name), grainLoads(exact[k], g.name); w != e {
						t.Fatalf("period %d seed %d: the reference's %s %s loads %d, exact %d", period, seed, k, g.name, w, e)
					}
				}
				for m, v := range ms {
					differ = differ || exact[k][m] != v
				}
			}
			if !differ {
				t.Fatalf("period %d seed %d: the measured blocks give the exact histograms: the test exercises nothing", period, seed)
			}
			for _, r := range runs {
				name := fmt.Sprintf("period=%d/seed=%d/workers=%d/flush=%d", period, seed, r.workers, r.flush)
				p, _ := analyseWith(t, stream, Options{Workers: r.workers, ReuseSampling: period}, r.flush)
				got := memTotals(p)
				for k, ms := range want {
					for _, g := range reuseGrains {
						if gl, wl := grainLoads(got[k], g.name), grainLoads(ms, g.name); gl != wl {
							t.Errorf("%s: %s %s loads %d, want %d", name, k, g.name, gl, wl)
						}
					}
					for m, v := range ms {
						if (r.flush == 0 || !strings.HasPrefix(m, "reuse.")) && got[k][m] != v {
							t.Errorf("%s: %s %s = %d, the reference says %d", name, k, m, got[k][m], v)
						}
					}
				}
			}
		}
	}
}

// grainLoads adds a histogram's buckets of granularity g.
func grainLoads(ms map[string]uint64, g string) uint64 {
	n := uint64(0)
	for k := 0; k <= ReuseBuckets; k++ {
		n += ms[ReuseMetric(g, k)]
	}
	return n
}

func TestScaleHist(t *testing.T) {
	var h [ReuseBuckets + 1]uint64
	h[0], h[3], h[ReuseBuckets] = 1, 2, 4 // 7 measured loads of 30
	got := scaleHist(h, 30)
	// 30/7 per load: 4.29, 8.57, 17.14; the floors add to 29, and the one
	// left goes to the largest remainder (8.57).
	if got[0] != 4 || got[3] != 9 || got[ReuseBuckets] != 17 {
		t.Errorf("scaleHist(1,2,4 of 30) = %v", got)
	}
	if got := scaleHist(h, 7); got != h {
		t.Errorf("all loads measured, yet scaled: %v", got)
	}
	var none [ReuseBuckets + 1]uint64
	if got := scaleHist(none, 5); got[ReuseBuckets] != 5 {
		t.Errorf("nothing measured: %v, want the 5 loads as no reuse", got)
	}
	// Large counts do not overflow.
	h[0], h[3], h[ReuseBuckets] = 1<<40, 1<<40, 0
	if got := scaleHist(h, 3<<40); got[0] != 3<<39 || got[3] != 3<<39 {
		t.Errorf("large: %v", got)
	}
}

// Reuse measured in one block in DefaultReuseSampling against every block,
// on the fully traced H100 captures: per kernel and granularity, the
// shares of loads below 2^4, 2^8 and 2^14 units and without reuse (the
// report's columns) differ by at most maxReuseShareErr.
func TestReuseSamplingAccuracyOnCaptures(t *testing.T) {
	const maxReuseShareErr = 0.02
	worst, sum, n := 0.0, 0.0, 0
	for _, c := range loadCaptures(t, captureGlob("*.redundancy.p1.gpr")) {
		exact, _ := analyseWith(t, c.data, Options{Workers: 2, Structures: c.st, ReuseSampling: 1}, 0)
		sampled, _ := analyseWith(t, c.data, Options{Workers: 2, Structures: c.st}, 0)
		e, s := memTotals(exact), memTotals(sampled)
		for _, k := range slices.Sorted(maps.Keys(e)) {
			for _, g := range reuseGrains {
				total := grainLoads(e[k], g.name)
				if total != grainLoads(s[k], g.name) {
					t.Errorf("%s %s %s: %d loads sampled, %d exact", c.name, k, g.name, grainLoads(s[k], g.name), total)
				}
				if total == 0 {
					continue
				}
				var row []string
				for _, below := range []int{4, 8, 14, ReuseBuckets + 1} {
					share := func(ms map[string]uint64) float64 {
						x := uint64(0)
						if below > ReuseBuckets {
							x = ms[ReuseMetric(g.name, ReuseBuckets)]
						} else {
							for b := 0; b <= below && b < ReuseBuckets; b++ {
								x += ms[ReuseMetric(g.name, b)]
							}
						}
						return float64(x) / float64(total)
					}
					es, ss := share(e[k]), share(s[k])
					d := math.Abs(es - ss)
					worst, sum, n = max(worst, d), sum+d, n+1
					row = append(row, fmt.Sprintf("%.3f/%.3f", es, ss))
					if d > maxReuseShareErr {
						t.Errorf("%s %s %s: share below 2^%d exact %.3f, sampled %.3f", c.name, k, g.name, below, es, ss)
					}
				}
				t.Logf("%-28s %-32.32s %-4s %8d loads <2^4 <2^8 <2^14 inf (exact/sampled): %v", c.name, k, g.name, total, row)
			}
		}
	}
	if n == 0 {
		t.Fatal("no kernel with loads")
	}
	t.Logf("shares compared: %d, mean difference %.4f, worst %.4f", n, sum/float64(n), worst)
}

// sortedAddrs gives the lanes' distinct addresses in order, and
// countUnits counts what appendUnits lists.
func TestSortedAddrsAndCountUnits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		size := []uint8{1, 2, 4, 8, 16}[rng.IntN(5)]
		active := rng.Uint32() | 1
		n := bits.OnesCount32(active)
		r := rawstream.Record{Size: size, Active: active, Lanes: make([]byte, n*(8+int(size)))}
		var want []uint64
		base := uint64(rng.IntN(1 << 20))
		for e := 0; e < n; e++ {
			a := base + uint64(e)*uint64(size) // coalesced
			if rng.IntN(4) == 0 {
				a = base + uint64(rng.IntN(64))
			}
			binary.LittleEndian.PutUint64(r.Lanes[e*(8+int(size)):], a)
			want = append(want, a)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		got := sortedAddrs(nil, &r)
		if !slices.Equal(got, want) {
			t.Fatalf("sortedAddrs: %v, want %v", got, want)
		}
		for _, shift := range []uint{0, sectorShift, lineShift} {
			if c, l := countUnits(got, uint64(size), shift), len(appendUnits(nil, got, uint64(size), shift)); c != l {
				t.Fatalf("countUnits(%v, %d, %d) = %d, appendUnits lists %d", got, size, shift, c, l)
			}
		}
	}
}

// TestSpan: a coalesced compact record's byte span and distinct
// addresses, by hand; records with gaps are left to the addresses.
func TestSpan(t *testing.T) {
	rec := func(active uint32, size uint8, base, step uint64, uniform bool) rawstream.Record {
		var plain rawstream.Record
		plain.Active, plain.Size, plain.Space, plain.Flags = active, size, rawstream.SpaceGlobal, rawstream.FlagRead
		for m := active; m != 0; m &= m - 1 {
			plain.Lanes = binary.LittleEndian.AppendUint64(plain.Lanes, base+step*uint64(bits.TrailingZeros32(m)))
			v := make([]byte, size)
			if !uniform {
				v[0] = byte(bits.TrailingZeros32(m))
			}
			plain.Lanes = append(plain.Lanes, v...)
		}
		var a rawstream.Access
		a.AppendCompact(&plain)
		var r rawstream.Record
		if _, err := rawstream.ParseRecordHeader(a.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name           string
		r              rawstream.Record
		lo, hi         uint64
		n              int
		ok             bool
		sectors, lines uint64
	}{
		{"32 lanes of 4 bytes", rec(^uint32(0), 4, 0x1000, 4, false), 0x1000, 0x107f, 32, true, 4, 1},
		{"lanes 8-15 of 8 bytes", rec(0xff00, 8, 0x2010, 8, false), 0x2050, 0x208f, 8, true, 3, 2},
		{"one address, one value", rec(^uint32(0), 4, 0x3004, 0, true), 0x3004, 0x3007, 1, true, 1, 1},
		{"stride 2, size 4 (overlapping)", rec(0xf, 4, 0x4000, 2, false), 0x4000, 0x4009, 4, true, 1, 1},
		{"stride 8, size 4 (gaps)", rec(^uint32(0), 4, 0x1000, 8, false), 0, 0, 0, false, 0, 0},
		{"lanes 0 and 2", rec(0x5, 4, 0x1000, 4, false), 0, 0, 0, false, 0, 0},
	} {
		lo, hi, n, ok := span(&tc.r)
		if ok != tc.ok || lo != tc.lo || hi != tc.hi || n != tc.n {
			t.Errorf("%s: span %#x-%#x, %d addresses, ok %v; want %#x-%#x, %d, %v", tc.name, lo, hi, n, ok, tc.lo, tc.hi, tc.n, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		// The same counts as the addresses give.
		addrs := sortedAddrs(nil, &tc.r)
		if s := uint64(countUnits(addrs, uint64(tc.r.Size), sectorShift)); s != tc.sectors || hi>>sectorShift-lo>>sectorShift+1 != s {
			t.Errorf("%s: %d sectors from the addresses, want %d", tc.name, s, tc.sectors)
		}
		if l := uint64(countUnits(addrs, uint64(tc.r.Size), lineShift)); l != tc.lines || hi>>lineShift-lo>>lineShift+1 != l {
			t.Errorf("%s: %d lines from the addresses, want %d", tc.name, l, tc.lines)
		}
		if len(addrs) != n {
			t.Errorf("%s: %d distinct addresses, span says %d", tc.name, len(addrs), n)
		}
	}
}
