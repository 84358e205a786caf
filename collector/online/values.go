package online

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"gpuprof/profile"
)

// ValueHasher replaces the values read from the application's memory by
// keyed hashes before they reach any sketch, for codes whose data may not
// leave the node (gpuprof run --no-values). It is AES-128 of the value
// under a per-job key (gpuprof run makes one and gives it to every rank, so
// the same value hashes alike on every rank and merged counts stay right);
// the key is stored nowhere, so a profile's hashes cannot be inverted, not
// even by trying every small integer.
type ValueHasher struct{ b cipher.Block }

// ValueKeyLen is the key's length in bytes.
const ValueKeyLen = 16

// NewValueHasher returns a hasher keyed by key (ValueKeyLen bytes).
func NewValueHasher(key []byte) (*ValueHasher, error) {
	if len(key) != ValueKeyLen {
		return nil, fmt.Errorf("online: value key of %d bytes, want %d", len(key), ValueKeyLen)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &ValueHasher{b}, nil
}

// Hash maps a raw value to its keyed hash.
func (h *ValueHasher) Hash(v uint64) uint64 {
	var in, out [aes.BlockSize]byte
	binary.LittleEndian.PutUint64(in[:], v)
	h.b.Encrypt(out[:], in[:])
	return binary.LittleEndian.Uint64(out[:])
}

// valCap is how many distinct values a counter counts exactly before it
// spills them into its sketch, unless its shard's budget of exact entries
// (shardValBudget, shared by all the keys of a shard until the next item)
// lets it grow: values that recur are then counted once per item rather
// than once per spill.
const (
	valCap         = 256
	shardValBudget = 1 << 14
)

// valCounter counts the values of one key (instruction or data object) in
// one shard: runs of one value cost a comparison, distinct values go to a
// small open-addressing table, and a full table (one the shard's budget
// no longer lets grow) spills into a bounded sketch. A counter whose
// spill was mostly values seen once switches to feeding the sketch
// directly: counting such values exactly first buys nothing.
type valCounter struct {
	budget *int         // the shard's exact entries left
	tables *tablePool   // the shard's tables to reuse (nil: allocate)
	hash   *ValueHasher // nil: values are kept as read
	// ents: the open-addressing table, each value beside its count (n
	// 0 marks an empty slot), so that a probe touches one cache line
	ents   []vc
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
		c.sk = newSketch(kind, c.hash != nil)
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
	if c.hash != nil {
		// Hashed here, once per run of one value: from this point on only
		// the hash exists outside the worker's last-value register.
		v = c.hash.Hash(v)
	}
	if c.direct {
		c.sketch(kind).AddN(v, n)
		return
	}
	if 2*(c.n+1) > len(c.ents) {
		c.grow()
	}
	mask := uint64(len(c.ents) - 1)
	for i := mix64(v) & mask; ; i = (i + 1) & mask {
		e := &c.ents[i]
		if e.n == 0 {
			e.v, e.n = v, n
			c.n++
			break
		}
		if e.v == v {
			e.n += n
			return
		}
	}
	if c.n < valCap {
		return
	}
	// Exact counting is cheaper than the sketch for a value, so the table
	// grows while the shard's budget lasts: values that come back after
	// more than valCap others (a grid's values at every step of a
	// time-stepping code) are then counted once per item. Only a table
	// that cannot grow decides whether counting exactly pays.
	if c.budget != nil && *c.budget > 0 && c.n < shardValBudget/4 {
		*c.budget--
		return
	}
	single := c.singletons()*4 >= c.n*3
	c.release(c.n)
	c.spill(kind)
	// Mostly values seen once: counting them exactly buys nothing.
	c.direct = single
}

func (c *valCounter) singletons() int {
	k := 0
	for _, e := range c.ents {
		if e.n == 1 {
			k++
		}
	}
	return k
}

// release returns the entries beyond valCap to the shard's budget.
func (c *valCounter) release(n int) {
	if c.budget != nil && n > valCap {
		*c.budget += n - valCap
	}
}

// addCount adds n occurrences of v to the open-addressing table t (n 0
// marks an empty slot; t at most half full) and reports whether v took a
// new slot. settle, which runs for every new value of a run, has the same
// loop written out: this one is over the inliner's budget.
func addCount(t []vc, v, n uint64) bool {
	mask := uint64(len(t) - 1)
	for i := mix64(v) & mask; ; i = (i + 1) & mask {
		e := &t[i]
		if e.n == 0 {
			e.v, e.n = v, n
			return true
		}
		if e.v == v {
			e.n += n
			return false
		}
	}
}

// grow doubles the table (most keys see few distinct values, so it starts
// small). Growing fourfold rehashed fewer entries but allocated more: on
// the H100 the rehash's cost is the first touch of fresh memory (page
// faults: a third of a pointer chase's collector CPU was the kernel's),
// so the smaller tables won.
func (c *valCounter) grow() {
	old := c.ents
	n := max(2*len(old), 16)
	c.ents = c.tables.get(n)
	for _, e := range old {
		if e.n != 0 {
			addCount(c.ents, e.v, e.n)
		}
	}
	c.tables.put(old)
}

// tablePool keeps value tables for reuse, by size: a shard's counters
// are made anew for every item and grow their tables by doubling again,
// and those tables were most of what the analysis of many short launches
// allocated (its garbage collection a tenth of its CPU). Tables come back
// when a counter grows or gives a large table back, and when an item's
// counters are done with (recycle). It belongs to one worker at a time.
type tablePool struct {
	free  [tableClasses][][]vc
	bytes int // in free
}

// tableClasses: tables of 16 to 2^19 entries are kept, at most
// tablesPerClass of each size and tablePoolBytes in all (a shard's; 64
// MiB for the 32 shards at most).
const (
	tableClasses   = 16
	tablesPerClass = 64
	tablePoolBytes = 2 << 20
)

// tableBytes is a table's size in bytes.
func tableBytes(t []vc) int { return len(t) * int(unsafe.Sizeof(vc{})) }

func tableClass(n int) int { return bits.Len(uint(n)) - 5 } // 16 -> 0

// get returns an empty table of n entries (a power of two, at least 16).
func (p *tablePool) get(n int) []vc {
	if p != nil {
		if k := tableClass(n); k >= 0 && k < tableClasses {
			if f := p.free[k]; len(f) > 0 {
				t := f[len(f)-1]
				p.free[k] = f[:len(f)-1]
				p.bytes -= tableBytes(t)
				return t
			}
		}
	}
	t := make([]vc, n)
	prefault(t)
	return t
}

// recycle takes the value tables of old, the accumulators of an item
// built already (nothing reads them any more; the workers are between
// frames), for the counters to come.
func (a *acc) recycle(old *acc) {
	for _, f := range old.tables.free {
		for _, t := range f {
			a.tables.keep(t)
		}
	}
	for _, oa := range old.objPC {
		a.tables.put(oa.vals.ents)
		oa.vals.ents = nil
	}
}

// put takes a table back, emptying it, if the pool has room for it.
func (p *tablePool) put(t []vc) {
	if p.room(t) {
		clear(t)
		p.add(t)
	}
}

// room says whether the pool keeps a table like t.
func (p *tablePool) room(t []vc) bool {
	if p == nil || len(t) < 16 {
		return false
	}
	k := tableClass(len(t))
	return k < tableClasses && len(t) == 16<<k && len(p.free[k]) < tablesPerClass && p.bytes+tableBytes(t) <= tablePoolBytes
}

// keep adds empty table t if the pool has room for it.
func (p *tablePool) keep(t []vc) {
	if p.room(t) {
		p.add(t)
	}
}

// add adds empty table t, for which the pool has room.
func (p *tablePool) add(t []vc) {
	k := tableClass(len(t))
	p.free[k] = append(p.free[k], t)
	p.bytes += tableBytes(t)
}

// spill feeds the table into the sketch and empties it.
func (c *valCounter) spill(kind AccessKind) {
	all := make([]vc, 0, c.n)
	for i, e := range c.ents {
		if e.n != 0 {
			all = append(all, e)
			c.ents[i].n = 0
		}
	}
	c.n = 0
	if len(c.ents) > 4*valCap { // give a table grown on the budget back
		c.tables.put(c.ents)
		c.ents = nil
	}
	feed(c.sketch(kind), all)
}

type vc struct{ v, n uint64 }

// feed adds exact counts to a sketch: the profile.SketchK heaviest first,
// heaviest first (so SpaceSaving keeps the true heavy hitters exactly),
// then the rest in the order given (deterministic for a given input; a
// full sort of every spill would cost more than the sketch updates).
func feed(sk *profile.ValueSketch, all []vc) {
	if len(all) > 2*profile.SketchK {
		// Move the SketchK heaviest to the front.
		heavier := func(a, b vc) bool { return a.n > b.n || a.n == b.n && a.v < b.v }
		for i := 0; i < profile.SketchK; i++ {
			m := i
			for j := i + 1; j < len(all); j++ {
				if heavier(all[j], all[m]) {
					m = j
				}
			}
			all[i], all[m] = all[m], all[i]
		}
	} else {
		slices.SortFunc(all, func(a, b vc) int {
			if a.n != b.n {
				return cmp.Compare(b.n, a.n)
			}
			return cmp.Compare(a.v, b.v)
		})
	}
	for _, x := range all {
		sk.AddN(x.v, x.n)
	}
}

// mergeCounters combines counters (settled, in a fixed order) into one
// sketch: exact counts are summed first, then the spilled sketches merged.
// It only reads the counters. A Go map of the sums was most of the last
// item's time for a data object read by many instructions in many shards
// whose values are all new (a pointer chase: hundreds of thousands of
// entries, each its own value); those are sorted (radix) and summed where
// equal. Where the shards' entries repeat each other's (a loop reloading
// one array: a value's entry in every shard), they are summed in an
// open-addressing table first and only the sums sorted.
func mergeCounters(cs []*valCounter, kind AccessKind) *profile.ValueSketch {
	var sks []*profile.ValueSketch
	hashed := false
	total, most := 0, 0
	for _, c := range cs {
		hashed = hashed || c.hash != nil
		total += c.n
		most = max(most, c.n)
		if c.sk != nil {
			sks = append(sks, c.sk)
		}
	}
	var all []vc
	if repeating(cs) {
		var sums valSums
		sums.init(min(total, 8*most, maxSumsInit))
		for _, c := range cs {
			for _, e := range c.ents {
				if e.n != 0 {
					sums.add(e)
				}
			}
		}
		all = sortByValue(sums.entries())
	} else {
		all = make([]vc, 0, total)
		prefault(all[:total])
		for _, c := range cs {
			for _, e := range c.ents {
				if e.n != 0 {
					all = append(all, e)
				}
			}
		}
		all = sumByValue(sortByValue(all))
	}
	if len(all) == 0 && len(sks) == 0 {
		return nil
	}
	sk := newSketch(kind, hashed)
	feed(sk, all)
	for _, o := range sks {
		sk.Merge(o)
	}
	return sk
}

// valSums sums counts by value: an open-addressing table (n 0 marks an
// empty slot), at most half full.
type valSums struct {
	t []vc
	n int
}

// maxSumsInit bounds the values a valSums is first sized for (16 MiB).
const maxSumsInit = 1 << 19

// init sizes the table for distinct values: mergeCounters asks for room
// for every entry, up to eight times the largest counter's, so that
// entries all distinct (a pointer chase) seldom grow it and entries that
// repeat each other's (a loop reloading an array: 32 shards' entries a
// value) do not spread over a table far larger than their sums.
func (s *valSums) init(distinct int) {
	n := 64
	for n < 2*distinct {
		n *= 2
	}
	s.t, s.n = make([]vc, n), 0
	prefault(s.t)
}

func (s *valSums) add(e vc) {
	if 2*(s.n+1) > len(s.t) {
		old := s.t
		s.t = make([]vc, 4*len(old))
		prefault(s.t)
		for _, o := range old {
			if o.n != 0 {
				addCount(s.t, o.v, o.n)
			}
		}
	}
	if addCount(s.t, e.v, e.n) {
		s.n++
	}
}

// sumByValue merges the entries of equal values of a sorted slice, in
// place.
func sumByValue(es []vc) []vc {
	k := 0
	for i, e := range es {
		if i > 0 && e.v == es[k-1].v {
			es[k-1].n += e.n
			continue
		}
		es[k] = e
		k++
	}
	return es[:k]
}

// entries returns the sums, in the table's order.
func (s *valSums) entries() []vc {
	out := make([]vc, 0, s.n)
	for _, e := range s.t {
		if e.n != 0 {
			out = append(out, e)
		}
	}
	return out
}

// repeating says whether the counters' values recur from one counter to
// another: some of the largest counter's values, looked up in the second
// largest's table.
func repeating(cs []*valCounter) bool {
	var a, b *valCounter
	for _, c := range cs {
		switch {
		case a == nil || c.n > a.n:
			a, b = c, a
		case b == nil || c.n > b.n:
			b = c
		}
	}
	if a == nil || b == nil || b.n == 0 {
		return false
	}
	probes, hits := 0, 0
	for _, e := range a.ents {
		if e.n == 0 {
			continue
		}
		if b.has(e.v) {
			hits++
		}
		if probes++; probes == 64 {
			break
		}
	}
	return 4*hits >= probes
}

// has says whether value v is in the counter's table.
func (c *valCounter) has(v uint64) bool {
	mask := uint64(len(c.ents) - 1)
	for i := mix64(v) & mask; ; i = (i + 1) & mask {
		e := &c.ents[i]
		if e.n == 0 {
			return false
		}
		if e.v == v {
			return true
		}
	}
}

// sortByValue sorts entries by value: a radix sort over the bytes in
// which the values differ, or a comparison sort for few entries. It may
// return another slice than es.
func sortByValue(es []vc) []vc {
	if len(es) < 512 {
		slices.SortFunc(es, func(a, b vc) int { return cmp.Compare(a.v, b.v) })
		return es
	}
	var or, and uint64 = 0, ^uint64(0)
	for _, e := range es {
		or |= e.v
		and &= e.v
	}
	diff := or ^ and // bits in which some values differ
	tmp := make([]vc, len(es))
	prefault(tmp)
	for shift := uint(0); shift < 64; shift += 8 {
		if diff>>shift&0xff == 0 {
			continue
		}
		var counts [256]int
		for _, e := range es {
			counts[e.v>>shift&0xff]++
		}
		pos := 0
		for i, c := range counts {
			counts[i] = pos
			pos += c
		}
		for _, e := range es {
			b := e.v >> shift & 0xff
			tmp[counts[b]] = e
			counts[b]++
		}
		es, tmp = tmp, es
	}
	return es
}

// newSketch is an empty sketch for values of kind, or of their hashes.
func newSketch(kind AccessKind, hashed bool) *profile.ValueSketch {
	if hashed {
		return profile.NewValueSketch(profile.ValHashed, kind.UnitBits)
	}
	return profile.NewValueSketch(kind.Type, kind.UnitBits)
}
