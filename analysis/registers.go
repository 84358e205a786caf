package analysis

import (
	"math/bits"

	"gpuprof/sass"
)

// Register pressure: how many general-purpose registers a function's code
// keeps live at once. A register limit below that number cannot be met by
// allocation alone: the compiler must spill values to local memory or
// reschedule to keep fewer of them live (longer sequences, less
// instruction-level parallelism). What either costs is not known from the
// profile, so an occupancy increase that needs it has no estimate
// (occupancy.go).

// regSet is a set of R registers (R0..R254).
type regSet [4]uint64

func (s *regSet) add(i int) { s[i>>6] |= 1 << (i & 63) }
func (s *regSet) del(i int) { s[i>>6] &^= 1 << (i & 63) }
func (s *regSet) or(o regSet) (c bool) {
	for k := range s {
		n := s[k] | o[k]
		c = c || n != s[k]
		s[k] = n
	}
	return c
}
func (s regSet) count() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// rIndexes lists the general-purpose registers among rs (RZ aside).
func rIndexes(rs []sass.Reg) []int {
	var out []int
	for _, r := range rs {
		if r.Kind() == sass.KindR && r.Tracked() {
			out = append(out, r.Index())
		}
	}
	return out
}

// maxLiveRegs is the largest number of R registers live at one point of
// f's code: backward liveness over its CFG (a guarded definition does not
// end a value's life), counting at each instruction the values live after
// it together with those it writes.
func maxLiveRegs(f *sass.Function) int {
	g, du := f.CFG(), f.DefUse()
	n := len(g.Blocks)
	// kills and uses per instruction
	kill := make([][]int, len(f.Insts))
	use := make([][]int, len(f.Insts))
	for i := range f.Insts {
		use[i] = rIndexes(du.Uses[i])
		if !f.Insts[i].Guarded() {
			kill[i] = rIndexes(du.Defs[i])
		}
	}
	in := make([]regSet, n)
	out := make([]regSet, n)
	step := func(b int) regSet {
		live := out[b]
		for i := g.Blocks[b].End - 1; i >= g.Blocks[b].Start; i-- {
			for _, r := range kill[i] {
				live.del(r)
			}
			for _, r := range use[i] {
				live.add(r)
			}
		}
		return live
	}
	for changed := true; changed; {
		changed = false
		for b := n - 1; b >= 0; b-- {
			for _, s := range g.Blocks[b].Succs {
				if out[b].or(in[s]) {
					changed = true
				}
			}
			if l := step(b); l != in[b] {
				in[b], changed = l, true
			}
		}
	}
	most := 0
	for b := range g.Blocks {
		if !g.Blocks[b].Reachable {
			continue
		}
		live := out[b]
		for i := g.Blocks[b].End - 1; i >= g.Blocks[b].Start; i-- {
			at := live
			for _, r := range rIndexes(du.Defs[i]) {
				at.add(r)
			}
			most = max(most, at.count())
			for _, r := range kill[i] {
				live.del(r)
			}
			for _, r := range use[i] {
				live.add(r)
			}
			most = max(most, live.count())
		}
	}
	return most
}

// maxRegIndex is the highest R register f's code names (-1 for none).
func maxRegIndex(f *sass.Function) int {
	du := f.DefUse()
	top := -1
	for i := range f.Insts {
		for _, r := range rIndexes(du.Defs[i]) {
			top = max(top, r)
		}
		for _, r := range rIndexes(du.Uses[i]) {
			top = max(top, r)
		}
	}
	return top
}
