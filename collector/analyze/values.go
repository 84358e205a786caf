package analyze

import (
	"sort"

	"gpuprof/profile"
)

// valCap bounds the exact value counts kept per key between spills into
// the key's sketch.
const valCap = 256

// valCounter counts values exactly while there are few of them and spills
// into a bounded sketch otherwise. Runs of one value (the common case of a
// warp's lanes) cost one comparison each.
type valCounter struct {
	m     map[uint64]uint64
	sk    *profile.ValueSketch
	lastV uint64
	lastN uint64
}

func (c *valCounter) add(v uint64, kind AccessKind) {
	if c.lastN > 0 && v == c.lastV {
		c.lastN++
		return
	}
	c.settle(kind)
	c.lastV, c.lastN = v, 1
}

// settle moves the pending run into the exact counts, spilling if full.
func (c *valCounter) settle(kind AccessKind) {
	if c.lastN == 0 {
		return
	}
	if c.m == nil {
		c.m = make(map[uint64]uint64, 8)
	}
	c.m[c.lastV] += c.lastN
	c.lastN = 0
	if len(c.m) >= valCap {
		if c.sk == nil {
			c.sk = profile.NewValueSketch(kind.Type, kind.UnitBits)
		}
		feed(c.sk, c.m)
		clear(c.m)
	}
}

type vc struct{ v, n uint64 }

// feed adds exact counts to a sketch, heaviest first (so SpaceSaving keeps
// the true heavy hitters exactly) and in a fixed order (so the result does
// not depend on map iteration).
func feed(sk *profile.ValueSketch, m map[uint64]uint64) {
	all := make([]vc, 0, len(m))
	for v, n := range m {
		all = append(all, vc{v, n})
	}
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
		for v, n := range c.m {
			exact[v] += n
		}
		if c.sk != nil {
			sks = append(sks, c.sk)
		}
	}
	if len(exact) == 0 && len(sks) == 0 {
		return nil
	}
	sk := profile.NewValueSketch(kind.Type, kind.UnitBits)
	feed(sk, exact)
	for _, o := range sks {
		sk.Merge(o)
	}
	return sk
}
