package online

import (
	"cmp"
	"reflect"
	"slices"
	"testing"

	"gpuprof/profile"
)

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

// Value tables come back empty and of the size asked for, whether new,
// put back by a counter that grew, or recycled from an item's counters.
func TestTablePool(t *testing.T) {
	var p tablePool
	a := p.get(64)
	a[3] = vc{7, 2}
	p.put(a)
	if b := p.get(64); &b[0] != &a[0] || b[3] != (vc{}) {
		t.Errorf("a table put back is not reused empty: %v", b[3])
	}
	if c := p.get(128); len(c) != 128 {
		t.Errorf("get(128) gave %d entries", len(c))
	}
	p.put(make([]vc, 100)) // not a size the pool keeps: dropped
	if len(p.free[tableClass(128)]) != 0 {
		t.Error("a table of 100 entries went into the class of 128")
	}
	// An item's counters give their tables to the next item's.
	budget := shardValBudget
	old := newAcc()
	old.objPC[objPCKey{}] = &opAcc{vals: valCounter{budget: &budget, tables: &old.tables}}
	for v := uint64(0); v < 300; v++ {
		old.objPC[objPCKey{}].vals.add(v, AccessKind{UnitBits: 32})
	}
	old.objPC[objPCKey{}].vals.settle(AccessKind{UnitBits: 32})
	used := old.objPC[objPCKey{}].vals.ents
	if len(used) != 1024 {
		t.Fatalf("the counter's table has %d entries, want 1024 for 300 values", len(used))
	}
	next := newAcc()
	next.recycle(old)
	got := next.tables.get(1024)
	if &got[0] != &used[0] {
		t.Fatal("the counter's table was not recycled: get made a new one")
	}
	for _, e := range got {
		if e != (vc{}) {
			t.Fatal("a recycled table is not empty")
		}
	}
	if len(next.tables.free[tableClass(512)]) == 0 {
		t.Error("the tables the counter outgrew were not kept")
	}
}

// The pool keeps no more than tablePoolBytes.
func TestTablePoolBound(t *testing.T) {
	var p tablePool
	for i := 0; i < 100; i++ {
		p.put(make([]vc, 8192))
	}
	if p.bytes > tablePoolBytes || p.bytes == 0 {
		t.Errorf("pool holds %d bytes, bound %d", p.bytes, tablePoolBytes)
	}
	held := 0
	for _, f := range p.free {
		for _, x := range f {
			held += tableBytes(x)
		}
	}
	if held != p.bytes {
		t.Errorf("pool counts %d bytes, holds %d", p.bytes, held)
	}
}

// mergeCounters sums the exact counts of a value across counters before
// the sketch sees them, whatever their number: the sorted merge gives the
// same sketch as summing the counters' exact entries in a map and sorting
// the sums, then merging their spilled sketches.
func TestMergeCountersSumsAcrossCounters(t *testing.T) {
	kind := AccessKind{UnitBits: 32, Type: profile.ValInt}
	// Below and above the radix sort's threshold, and past the spill;
	// counters whose values recur from one to the next (summed in a table
	// first) and counters of values of their own (sorted first).
	for _, tc := range []struct {
		n        int
		disjoint bool
	}{{40, false}, {3000, false}, {9000, false}, {40, true}, {3000, true}, {9000, true}} {
		n := tc.n
		if got := repeating(nil); got {
			t.Fatal("no counters repeat each other")
		}
		var cs []*valCounter
		budget := shardValBudget
		for k := 0; k < 6; k++ {
			c := &valCounter{budget: &budget}
			for i := 0; i < n; i++ {
				// Values shared by the counters (or not), values of one
				// counter, and a heavy one; high bits set on some.
				v := uint64(i*(k+1)) % uint64(n)
				if tc.disjoint {
					v += uint64(k * n)
				}
				if i%7 == 0 {
					v = 3
				}
				if i%11 == 0 {
					v |= 0xabcd << 40
				}
				c.add(v, kind)
			}
			c.settle(kind)
			cs = append(cs, c)
		}
		exact := map[uint64]uint64{}
		ref := newSketch(kind, false)
		for _, c := range cs {
			for _, e := range c.ents {
				if e.n != 0 {
					exact[e.v] += e.n
				}
			}
		}
		all := make([]vc, 0, len(exact))
		for v, c := range exact {
			all = append(all, vc{v, c})
		}
		slices.SortFunc(all, func(a, b vc) int { return cmp.Compare(a.v, b.v) })
		feed(ref, all)
		for _, c := range cs {
			if c.sk != nil {
				ref.Merge(c.sk)
			}
		}
		if rep := repeating(cs); rep == tc.disjoint && n == 3000 { // (past the spill the tables hold what came after it)
			t.Errorf("%d values a counter, disjoint %v: repeating says %v", n, tc.disjoint, rep)
		}
		if got := mergeCounters(cs, kind); !reflect.DeepEqual(got, ref) {
			t.Errorf("%d values a counter, disjoint %v (%d exact in all): merged sketch %+v, want %+v", n, tc.disjoint, len(all), got.Top, ref.Top)
		}
	}
}

// BenchmarkMergeCounters merges the counters of one key from every shard:
// values every shard sees (a loop reloading one array: the sums are
// few) and values each shard sees once (a pointer chase: every entry is
// its own).
func BenchmarkMergeCounters(b *testing.B) {
	kind := AccessKind{UnitBits: 32, Type: profile.ValInt}
	for _, shape := range []struct {
		name   string
		shared bool
	}{{"recurring", true}, {"fresh", false}} {
		var cs []*valCounter
		for s := 0; s < numShards; s++ {
			budget := shardValBudget
			c := &valCounter{budget: &budget}
			for i := 0; i < 2000; i++ {
				v := uint64(i) * 0x9e3779b97f4a7c15 >> 20
				if !shape.shared {
					v = uint64(s*2000+i) * 0x9e3779b97f4a7c15 >> 20
				}
				c.add(v, kind)
				c.add(v+1, kind) // no runs
			}
			c.settle(kind)
			cs = append(cs, c)
		}
		b.Run(shape.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				mergeCounters(cs, kind)
			}
		})
	}
}
