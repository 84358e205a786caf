package analyze

import (
	"sort"

	"gpuprof/profile"
)

// valCap is how many distinct values a counter counts exactly before it
// spills them into its sketch (heaviest first).
const valCap = 256

// valCounter counts the values of one key (instruction or data object) in
// one shard: runs of one value cost a comparison, distinct values go to a
// small open-addressing table, and a full table spills into a bounded
// sketch. A counter whose spills are mostly values seen once switches to
// feeding the sketch directly: counting such values exactly first buys
// nothing.
type valCounter struct {
	keys   []uint64
	counts []uint64 // 0 marks an empty slot
	n      int
	sk     *profile.ValueSketch
	direct bool
	lastV  uint64
	lastN  uint64
}

func (c *valCounter) add(v uint64, kind AccessKind) {
	if c.lastN > 0 && v == c.lastV {
		c.lastN++
		return
	}
	c.settle(kind)
	c.lastV, c.lastN = v, 1
}

func (c *valCounter) sketch(kind AccessKind) *profile.ValueSketch {
	if c.sk == nil {
		c.sk = profile.NewValueSketch(kind.Type, kind.UnitBits)
	}
	return c.sk
}

// settle moves the pending run into the table (or the sketch).
func (c *valCounter) settle(kind AccessKind) {
	if c.lastN == 0 {
		return
	}
	v, n := c.lastV, c.lastN
	c.lastN = 0
	if c.direct {
		c.sketch(kind).AddN(v, n)
		return
	}
	if 2*(c.n+1) > len(c.keys) {
		c.grow()
	}
	mask := uint64(len(c.keys) - 1)
	for i := mix64(v) & mask; ; i = (i + 1) & mask {
		if c.counts[i] == 0 {
			c.keys[i], c.counts[i] = v, n
			c.n++
			break
		}
		if c.keys[i] == v {
			c.counts[i] += n
			return
		}
	}
	if c.n >= valCap {
		ones := c.spill(kind)
		c.direct = ones*4 >= valCap*3
	}
}

// grow doubles the table (most keys see few distinct values, so it starts
// small).
func (c *valCounter) grow() {
	ok, oc := c.keys, c.counts
	n := max(2*len(ok), 16)
	c.keys, c.counts = make([]uint64, n), make([]uint64, n)
	mask := uint64(n - 1)
	for i, cnt := range oc {
		if cnt == 0 {
			continue
		}
		j := mix64(ok[i]) & mask
		for c.counts[j] != 0 {
			j = (j + 1) & mask
		}
		c.keys[j], c.counts[j] = ok[i], cnt
	}
}

// spill feeds the table into the sketch and empties it; it returns how many
// values had been seen once.
func (c *valCounter) spill(kind AccessKind) int {
	all := make([]vc, 0, c.n)
	ones := 0
	for i, n := range c.counts {
		if n != 0 {
			all = append(all, vc{c.keys[i], n})
			if n == 1 {
				ones++
			}
			c.counts[i] = 0
		}
	}
	c.n = 0
	feed(c.sketch(kind), all)
	return ones
}

type vc struct{ v, n uint64 }

// feed adds exact counts to a sketch, heaviest first (so SpaceSaving keeps
// the true heavy hitters exactly) and in a fixed order (so the result does
// not depend on table layout).
func feed(sk *profile.ValueSketch, all []vc) {
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].v < all[j].v
	})
	for _, x := range all {
		sk.AddN(x.v, x.n)
	}
}

// mergeCounters combines the counters of one key from every shard (in
// shard order) into one sketch: exact counts are summed first, then the
// spilled sketches merged.
func mergeCounters(cs []*valCounter, kind AccessKind) *profile.ValueSketch {
	exact := map[uint64]uint64{}
	var sks []*profile.ValueSketch
	for _, c := range cs {
		c.settle(kind)
		for i, n := range c.counts {
			if n != 0 {
				exact[c.keys[i]] += n
			}
		}
		if c.sk != nil {
			sks = append(sks, c.sk)
		}
	}
	if len(exact) == 0 && len(sks) == 0 {
		return nil
	}
	sk := profile.NewValueSketch(kind.Type, kind.UnitBits)
	all := make([]vc, 0, len(exact))
	for v, n := range exact {
		all = append(all, vc{v, n})
	}
	feed(sk, all)
	for _, o := range sks {
		sk.Merge(o)
	}
	return sk
}
