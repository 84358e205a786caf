package analysis

import (
	"fmt"
	"sort"

	"gpuprof/sass"
)

// carried flags loops that keep a running value in global memory: a load
// and a store of the same address (one base, its definitions all outside
// the loop, one offset and width) in the loop's body, so every iteration
// reads back what the last one wrote. `acc[i] += a[j] * x[j]` compiles so
// when the compiler cannot prove that acc does not alias a or x: the load
// then sits on the loop's critical path, each iteration waiting for the
// previous one's store to come back from memory. Accumulating in a local
// variable and storing once after the loop (or __restrict__ on the
// pointers) keeps the value in a register; the estimate removes the load,
// the store and the stalls blamed on them (eq. 3, staticspeed.go).
func carried(c *code) []Advice {
	f := c.F
	g := f.CFG()
	du := f.DefUse()
	type key struct {
		base string
		off  int64
		bits int
	}
	seen := map[int]bool{}
	var idx []int
	for li := range g.Loops {
		loads := map[key]int{}
		type store struct {
			k key
			i int
		}
		var stores []store
		for i := range f.Insts {
			if !c.inLoop(i, li) {
				continue
			}
			in := &f.Insts[i]
			if in.Mem.Space != sass.SpaceGlobal && in.Mem.Space != sass.SpaceGeneric {
				continue
			}
			o, ok := memOperand(in)
			if !ok || !o.Base.Tracked() || !invariantIn(c, du, i, o, li) {
				continue
			}
			k := key{addrKey(f, i, o), o.Offset, in.Mem.Bits}
			switch in.Mem.Op {
			case sass.MemLoad:
				if _, ok := loads[k]; !ok {
					loads[k] = i
				}
			case sass.MemStore:
				stores = append(stores, store{k, i})
			}
		}
		for _, st := range stores {
			if l, ok := loads[st.k]; ok {
				for _, i := range []int{l, st.i} {
					if !seen[i] {
						seen[i] = true
						idx = append(idx, i)
					}
				}
			}
		}
	}
	if len(idx) == 0 {
		return nil
	}
	sort.Ints(idx)
	return []Advice{staticAdvice(c, StaticCarried,
		"the loop keeps a running value in global memory, loading and storing it at the same address every iteration (the compiler cannot keep it in a register, as the pointer may alias the others): accumulate in a local variable and store it once after the loop, or declare the pointers __restrict__.",
		fmt.Sprintf("%d loads and stores of loop-invariant addresses, each address both loaded and stored in the loop", len(idx)), idx)}
}

// invariantIn says whether the address of memory operand o of instruction
// i does not change in loop li: none of its base registers' definitions
// reaching i lies in the loop.
func invariantIn(c *code, du *sass.DefUse, i int, o sass.Operand, li int) bool {
	for _, r := range []sass.Reg{o.Base, o.UBase} {
		if !r.Tracked() {
			continue
		}
		for _, d := range du.Reaching(i, r) {
			if d >= 0 && c.inLoop(int(d), li) {
				return false
			}
		}
	}
	return true
}
