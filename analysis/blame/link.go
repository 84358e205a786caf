package blame

import "sort"

// SBReg is the register id standing for scoreboard n (0-5) in RegAccess
// and Dep.Reg.
func SBReg(n int) uint32 { return 0x10000 + uint32(n) }

func isSB(r uint32) bool { return r >= 0x10000 && r < 0x10006 }

// RegAccess is what one instruction writes and reads, for Link.
type RegAccess struct {
	Defs, Uses []uint32
	// WriteSB / ReadSB: the scoreboard the instruction sets when its result
	// is written / its sources are read (-1 for none).
	WriteSB, ReadSB int
	// Wait: scoreboards the instruction waits on before it issues.
	Wait []int
}

// Link fills f's Deps and Users with reaching definitions computed from
// acc (indexed like f.Insts): a guarded definition does not kill earlier
// ones; scoreboards are registers defined by their producers and used by
// their waiters, and a wait (not a later producer) ends their reach.
func Link(f *Func, acc []RegAccess) {
	n := len(f.Insts)
	type def struct {
		inst int
		reg  uint32
		war  bool
	}
	var defs []def
	defsOf := make([][]int, n) // instruction -> indexes into defs
	for i, a := range acc {
		for _, r := range a.Defs {
			defsOf[i] = append(defsOf[i], len(defs))
			defs = append(defs, def{i, r, false})
		}
		if a.WriteSB >= 0 {
			defsOf[i] = append(defsOf[i], len(defs))
			defs = append(defs, def{i, SBReg(a.WriteSB), false})
		}
		if a.ReadSB >= 0 {
			defsOf[i] = append(defsOf[i], len(defs))
			defs = append(defs, def{i, SBReg(a.ReadSB), true})
		}
	}
	byReg := map[uint32][]int{}
	for d, x := range defs {
		byReg[x.reg] = append(byReg[x.reg], d)
	}
	// transfer applies instruction i to the set of reaching defs.
	transfer := func(set map[int]bool, i int) {
		for _, w := range acc[i].Wait {
			for _, d := range byReg[SBReg(w)] {
				delete(set, d)
			}
		}
		for _, d := range defsOf[i] {
			x := defs[d]
			if !isSB(x.reg) && !f.Insts[i].Guarded {
				for _, o := range byReg[x.reg] {
					delete(set, o)
				}
			}
			set[d] = true
		}
	}
	nb := len(f.Blocks)
	preds := make([][]int, nb)
	for b, bl := range f.Blocks {
		for _, s := range bl.Succs {
			preds[s] = append(preds[s], b)
		}
	}
	in := make([]map[int]bool, nb)
	out := make([]map[int]bool, nb)
	for b := range in {
		in[b], out[b] = map[int]bool{}, map[int]bool{}
	}
	for changed := true; changed; {
		changed = false
		for b, bl := range f.Blocks {
			set := map[int]bool{}
			for _, p := range preds[b] {
				for d := range out[p] {
					set[d] = true
				}
			}
			in[b] = copySet(set)
			for i := bl.Start; i < bl.End; i++ {
				transfer(set, i)
			}
			if len(set) != len(out[b]) {
				changed = true
			} else {
				for d := range set {
					if !out[b][d] {
						changed = true
						break
					}
				}
			}
			out[b] = set
		}
	}
	f.Users = make([]map[uint32][]int, n)
	for b, bl := range f.Blocks {
		set := copySet(in[b])
		for i := bl.Start; i < bl.End; i++ {
			var deps []Dep
			uses := append([]uint32(nil), acc[i].Uses...)
			for _, w := range acc[i].Wait {
				uses = append(uses, SBReg(w))
			}
			for _, r := range uses {
				var ds, entry []int
				var war bool
				for _, d := range byReg[r] {
					if set[d] {
						ds = append(ds, defs[d].inst)
						war = war || defs[d].war
						x := defs[d].inst
						if f.Users[x] == nil {
							f.Users[x] = map[uint32][]int{}
						}
						f.Users[x][r] = append(f.Users[x][r], i)
					}
				}
				if len(ds) == 0 && !isSB(r) {
					entry = []int{-1}
				}
				sort.Ints(ds)
				deps = append(deps, Dep{Reg: r, SB: isSB(r), WAR: war, Defs: append(entry, ds...)})
			}
			f.Insts[i].Deps = deps
			transfer(set, i)
		}
	}
}

func copySet(s map[int]bool) map[int]bool {
	c := make(map[int]bool, len(s))
	for k := range s {
		c[k] = true
	}
	return c
}
