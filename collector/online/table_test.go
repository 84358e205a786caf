package online

import (
	"math/rand/v2"
	"testing"
)

// The open-addressing tables agree with Go maps.
func TestTablesAgreeWithMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var sp spTable
	var vs valSet
	ref := map[[2]uint64]spFirst{}
	set := map[uint64]bool{}
	for i := 0; i < 200000; i++ {
		a, v := uint64(rng.IntN(5)), uint64(rng.IntN(50000))
		if rng.IntN(10) == 0 {
			v = 0
		}
		pos := uint64(i + 1)
		e, added := sp.put(a, v, pos, pos*3)
		old, had := ref[[2]uint64{a, v}]
		if added == had || (had && (e.pos != old.pos || e.pc != old.pc)) {
			t.Fatalf("put(%d, %d): added %v, entry %+v; map had %v %+v", a, v, added, *e, had, old)
		}
		if !had {
			ref[[2]uint64{a, v}] = spFirst{pos, pos * 3}
		}
		if vs.has(v) != set[v] {
			t.Fatalf("has(%d) = %v before add", v, !set[v])
		}
		vs.add(v)
		set[v] = true
	}
	if sp.n != len(ref) {
		t.Fatalf("%d entries, map has %d", sp.n, len(ref))
	}
	n := 0
	sp.each(func(e *spEntry) {
		n++
		if r := ref[[2]uint64{e.a, e.v}]; r.pos != e.pos {
			t.Fatalf("entry %+v, map %+v", *e, r)
		}
	})
	if n != len(ref) || sp.get(99, 1) != nil {
		t.Fatalf("each saw %d of %d", n, len(ref))
	}
	sp.reset()
	if sp.n != 0 || sp.get(0, 1) != nil {
		t.Fatal("reset left entries")
	}
}

// keyTable and pairSet agree with Go maps, across growth (keyTable) and
// resets (pairSet).
func TestKeyTableAndPairSetAgreeWithMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var kt keyTable[uint64]
	ref := map[[2]uint64]*uint64{}
	for i := 0; i < 100000; i++ {
		k1, k2 := uint64(rng.IntN(3000)), uint64(1+rng.IntN(7))
		v, added := kt.get(k1, k2)
		old, had := ref[[2]uint64{k1, k2}]
		if added == had || had && v != old {
			t.Fatalf("get(%d, %d): added %v, %p; map had %v %p", k1, k2, added, v, had, old)
		}
		if !had {
			ref[[2]uint64{k1, k2}] = v
		}
		*v++
	}
	if kt.n != len(ref) {
		t.Fatalf("%d entries, map has %d", kt.n, len(ref))
	}
	var ps pairSet
	for round := 0; round < 4; round++ {
		n := 1000 << round
		ps.reset(n)
		seen := map[[2]uint64]bool{}
		for i := 0; i < n; i++ {
			a, v := uint64(1+rng.IntN(4)), uint64(rng.IntN(n))
			if got := ps.addNew(a, v); got == seen[[2]uint64{a, v}] {
				t.Fatalf("round %d: addNew(%d, %d) = %v, map had it: %v", round, a, v, got, seen[[2]uint64{a, v}])
			}
			seen[[2]uint64{a, v}] = true
		}
		if ps.n != len(seen) {
			t.Fatalf("round %d: %d pairs, map has %d", round, ps.n, len(seen))
		}
	}
}
