package analyze

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
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
// and atomics restart their units), bank passes per kernel function, and
// memory divergence (distinct sectors per global warp access).
type memReference struct {
	reuse map[string]map[string]uint64 // kernel -> metric -> count
}

func runMemReference(t *testing.T, stream []byte) *memReference {
	ref := &memReference{reuse: map[string]map[string]uint64{}}
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
					for _, u := range us {
						if load {
							add(l.fn, ReuseMetric(gr.name, c.r[g].load(u)), 1)
						} else {
							c.r[g].store(u)
						}
					}
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
		want := runMemReference(t, stream).reuse
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
