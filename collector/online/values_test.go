package online

import "testing"

// Values that come back after more than valCap others (a grid's values
// at every step) are counted exactly while the shard's budget lets the
// table grow; values that never come back go to the sketch once it
// cannot.
func TestValueCounterGrowsBeforeGivingUp(t *testing.T) {
	kind := AccessKind{UnitBits: 32}
	budget := shardValBudget
	c := valCounter{budget: &budget}
	for step := 0; step < 3; step++ {
		for v := uint64(0); v < 1300; v++ {
			c.add(v, kind)
		}
	}
	c.settle(kind)
	if c.direct || c.sk != nil || c.n != 1300 {
		t.Fatalf("direct %v, sketch %v, %d exact values: want 1300 exact", c.direct, c.sk != nil, c.n)
	}
	for _, e := range c.ents {
		if e.n != 0 && e.n != 3 {
			t.Fatalf("value %d counted %d times, want 3", e.v, e.n)
		}
	}
	// Values seen once each, past what the budget allows: the counter
	// spills them and feeds the sketch directly from then on.
	u := valCounter{budget: &budget}
	for v := uint64(0); v < 3*shardValBudget; v++ {
		u.add(1e6+v, kind)
	}
	u.settle(kind)
	if !u.direct || u.sk == nil || u.n != 0 {
		t.Errorf("values seen once: direct %v, sketch %v, %d exact", u.direct, u.sk != nil, u.n)
	}
}
