package online

import (
	"math/rand/v2"
	"testing"
)

// unitMap agrees with a Go map under random sets, deletions and clears,
// with keys drawn from a small range so that runs collide and deletions
// shift them.
func TestUnitMapMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var m unitMap
	ref := map[uint64]int32{}
	for step := 0; step < 200000; step++ {
		u := rng.Uint64N(512)
		if rng.IntN(4) == 0 {
			u <<= 40 // far keys too
		}
		switch op := rng.IntN(100); {
		case op < 55:
			v := int32(rng.IntN(1000) + 1)
			m.set(u, v)
			ref[u] = v
		case op < 95:
			m.del(u)
			delete(ref, u)
		case op < 96:
			m.clear()
			clear(ref)
		}
		if got := m.get(u); got != ref[u] {
			t.Fatalf("step %d: get(%#x) = %d, want %d", step, u, got, ref[u])
		}
		if m.n != len(ref) {
			t.Fatalf("step %d: %d entries, want %d", step, m.n, len(ref))
		}
	}
	for u, v := range ref {
		if m.get(u) != v {
			t.Fatalf("get(%#x) = %d, want %d", u, m.get(u), v)
		}
	}
}
