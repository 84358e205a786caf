package online

import (
	"testing"

	"gpuprof/collector/rawstream"
)

// The lane groups of a launch follow from its traced warps, which follow
// from the grid, the block size and block sampling (P, r) alone.
func TestLaneGroupsOfLaunch(t *testing.T) {
	for _, tc := range []struct {
		name         string
		p            uint32
		grid, block  uint32
		r            uint32
		instrumented bool
		warps        uint64
		groups       int
	}{
		// stall_memory on the H100: 264 blocks of 128 threads, P=50; with
		// r=7 the blocks 43, 93, 143, 193 and 243 are traced.
		{"few sampled blocks", 50, 264, 128, 7, true, 5 * 4, 4},
		// r=0: blocks 0, 50, ..., 250: six.
		{"offset 0", 50, 264, 128, 0, true, 6 * 4, 4},
		// 64 warps or more need no split; 32..63 are split in two.
		{"enough warps", 50, 500, 256, 1, true, 10 * 8, 1},
		{"two groups", 1, 5, 256, 0, true, 5 * 8, 2},
		// r=3: blocks 47, 97, ..., 4047.
		{"many warps", 50, 4096, 256, 3, true, 81 * 8, 1},
		{"unsampled", 1, 8, 64, 0, true, 8 * 2, 4},
		{"a partial warp counts", 1, 3, 33, 0, true, 3 * 2, 4},
		{"fewer blocks than P", 50, 10, 128, 45, true, 4, 4},
		{"no sampled block", 50, 10, 128, 30, true, 0, 4},
		{"not instrumented", 1, 4096, 256, 0, false, 0, 4},
	} {
		a := &Analyzer{hello: &rawstream.Hello{BlockSampling: tc.p}}
		l := &rawstream.Launch{Grid: [3]uint32{tc.grid, 1, 1}, Block: [3]uint32{tc.block, 1, 1}, BlockOffset: tc.r, Instrumented: tc.instrumented}
		b, wpb := a.tracedBlocks(l)
		w := b * wpb
		if w != tc.warps {
			t.Errorf("%s: %d traced warps, want %d", tc.name, w, tc.warps)
		}
		if g := laneGroupsOf(w); g != tc.groups {
			t.Errorf("%s: %d lane groups for %d warps, want %d", tc.name, g, w, tc.groups)
		}
	}
}

// A warp's lane groups cover its 32 lanes once and go to distinct shards.
func TestGroupMasksAndShards(t *testing.T) {
	for _, groups := range []int{1, 2, 4} {
		var all uint32
		shards := map[int]bool{}
		for g := 0; g < groups; g++ {
			m := groupMask(g, groups)
			if all&m != 0 {
				t.Errorf("%d groups: group %d's lanes %#x overlap %#x", groups, g, m, all)
			}
			all |= m
			shards[shardOf(7, g, groups)] = true
		}
		if all != ^uint32(0) {
			t.Errorf("%d groups cover lanes %#x", groups, all)
		}
		if len(shards) != groups {
			t.Errorf("%d groups of one warp went to %d shards", groups, len(shards))
		}
	}
}

// A launch goes to every shard until its calling context had a traced
// launch; then to as few shards as give each about spanRecords of the
// records its traced warps are expected to bring, the next narrow launch
// to the shards after, and a launch of that context with many more warps
// to every shard again.
func TestNarrowLaunches(t *testing.T) {
	a := &Analyzer{}
	if span, _ := a.spanFor(3, 160); span != numShards {
		t.Fatalf("no hint: span %d, want %d", span, numShards)
	}
	// many_launches at P=50: 1,170 records over 160 traced warps.
	a.spanHints = map[uint32]float64{3: 1170.0 / 160}
	span, base := a.spanFor(3, 160)
	if span != 2 || base != 0 {
		t.Fatalf("1,170 records expected: span %d from %d, want 2 from 0", span, base)
	}
	if span, base = a.spanFor(3, 160); span != 2 || base != 2 {
		t.Errorf("the next launch: span %d from %d, want 2 from 2", span, base)
	}
	// The same call site on a grid 100 times larger: 117,000 records.
	if span, _ = a.spanFor(3, 16000); span != numShards {
		t.Errorf("a large launch of a small launch's context: span %d, want %d", span, numShards)
	}
	// A narrow launch is split into lane groups only as far as its span
	// needs: 5 warps on 2 shards whole, on 8 shards in quarters.
	if g := laneGroupsFor(5, 2); g != 1 {
		t.Errorf("5 warps on 2 shards: %d lane groups, want 1", g)
	}
	if g := laneGroupsFor(5, 8); g != 4 {
		t.Errorf("5 warps on 8 shards: %d lane groups, want 4", g)
	}
	// Every lane group of every warp of a narrow launch lands in its span.
	l := &launchInfo{span: 3, shardBase: numShards - 1, groups: 2, narrow: true}
	seen := map[int]bool{}
	for idx := uint32(0); idx < 40; idx++ {
		for g := 0; g < l.groups; g++ {
			seen[l.shardOf(3<<narrowIdxBits|idx, g)] = true
		}
	}
	if len(seen) != 3 || !seen[numShards-1] || !seen[0] || !seen[1] {
		t.Errorf("a span of 3 from shard %d used shards %v", numShards-1, seen)
	}
	// Records past twice the span's share widen it, for warps to come.
	l.recs = 2*3*spanRecords + 1
	l.widen()
	if l.span != 7 {
		t.Errorf("%d records widen a span of 3 to %d, want 7", l.recs, l.span)
	}
	l.recs = 1 << 20
	l.widen()
	if l.span != numShards {
		t.Errorf("2^20 records: span %d, want every shard", l.span)
	}
}

// A launch's warp table finds every warp put in it, whether the launch
// brought fewer warps than block sampling predicted or many more (the
// table then grows), and finds no other.
func TestWarpUnits(t *testing.T) {
	for _, tc := range []struct {
		traced uint64
		warps  int
	}{{0, 5}, {10, 10}, {100, 3}, {40, 5000}, {1 << 20, 70000}} {
		var wu warpUnits
		want := map[uint64]uint64{}
		r := uint64(12345)
		for len(want) < tc.warps {
			r = r*6364136223846793005 + 1442695040888963407
			k := (r >> 16) & (1<<48 - 1) // block << 16 | warp
			if _, ok := want[k]; ok {
				continue
			}
			if _, ok := wu.get(k); ok {
				t.Fatalf("traced %d: warp %#x found before it was put", tc.traced, k)
			}
			u := uint64(len(want))<<32 | uint64(len(want)/8)
			wu.put(k, u, tc.traced)
			want[k] = u
		}
		for k, u := range want {
			if got, ok := wu.get(k); !ok || got != u {
				t.Fatalf("traced %d: warp %#x: got %#x %v, want %#x", tc.traced, k, got, ok, u)
			}
		}
		for _, k := range []uint64{1<<48 - 1, 0, 77} {
			_, put := want[k]
			if _, ok := wu.get(k); ok != put {
				t.Fatalf("traced %d: warp %#x found %v, put %v", tc.traced, k, ok, put)
			}
		}
		if wu.n != tc.warps || 2*wu.n > len(wu.e) {
			t.Fatalf("traced %d: %d entries in %d slots, want %d at most half full", tc.traced, wu.n, len(wu.e), tc.warps)
		}
	}
}
