package analysis

import "gpuprof/sass"

// sharedRemovable is, per instruction of the function, the share of a
// shared memory instruction's work that shared memory transaction
// reduction can remove (docs/validation.md, item 42). The advice offers
// two changes, and each needs something in the code to act on:
//
//   - wider accesses: a thread's accesses at consecutive offsets of one
//     base, of one direction and width, in one basic block and one barrier
//     interval, become one access of up to 128 bits; n accesses of b bits
//     widen to w = min(128, the power of two at most n*b) bits, and
//     1 - b/w of each goes. An access with no such neighbour has no wider
//     access to make (item 34 priced every access as if it had).
//   - a reload: a load of the address (same base and reaching definition,
//     same offset and width) the thread itself loaded or stored earlier in
//     the block, with no shared store of another base and no shared atomic
//     between (either could write it); keeping the value in a register
//     removes all of it.
//
// Everything else is 0: the waits of a shared access that is neither stay.
func (c *code) sharedRemovable() []float64 {
	c.shOnce.Do(func() { c.shShare = sharedShares(c) })
	return c.shShare
}

func sharedShares(c *code) []float64 {
	f := c.F
	out := make([]float64, len(f.Insts))
	iv, _ := c.barrierIntervals()
	type access struct {
		i     int
		key   string
		off   int64
		bits  int
		store bool
		other bool // an atomic, or an access whose address this cannot name
	}
	type group struct {
		key   string
		store bool
		bits  int
		iv    int
	}
	for _, bl := range f.CFG().Blocks {
		var accs []access
		for i := bl.Start; i < bl.End; i++ {
			in := &f.Insts[i]
			if in.Mem.Space != sass.SpaceShared || in.Mem.Async {
				continue
			}
			a := access{i: i, bits: accessBits(in), store: in.Mem.Op == sass.MemStore}
			o, ok := memOperand(in)
			switch {
			case in.Mem.Op != sass.MemLoad && in.Mem.Op != sass.MemStore:
				a.other = true
			case !ok:
				a.other = true
			default:
				a.key, a.off = addrKey(f, i, o), o.Offset
			}
			accs = append(accs, a)
		}
		// at holds the offsets each group of like accesses (one base, one
		// direction and width, one barrier interval) touches in the block.
		at := map[group]map[int64]bool{}
		for _, a := range accs {
			if a.other {
				continue
			}
			g := group{a.key, a.store, a.bits, iv[a.i]}
			if at[g] == nil {
				at[g] = map[int64]bool{}
			}
			at[g][a.off] = true
		}
		for k, a := range accs {
			if a.other {
				continue
			}
			// Wider accesses: the run of consecutive offsets a belongs to.
			if a.bits < 128 {
				step := int64(a.bits / 8)
				g := group{a.key, a.store, a.bits, iv[a.i]}
				n := 1
				for o := a.off - step; at[g][o]; o -= step {
					n++
				}
				for o := a.off + step; at[g][o]; o += step {
					n++
				}
				if n > 1 {
					w := a.bits
					for w*2 <= min(128, n*a.bits) {
						w *= 2
					}
					out[a.i] = 1 - float64(a.bits)/float64(w)
				}
			}
			// A reload of the thread's own earlier access.
			if a.store {
				continue
			}
			for j := k - 1; j >= 0; j-- {
				b := accs[j]
				if b.other || (b.store && b.key != a.key) {
					break
				}
				if b.key == a.key && b.off == a.off && b.bits == a.bits {
					out[a.i] = 1
					break
				}
			}
		}
	}
	return out
}
