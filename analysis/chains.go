package analysis

import (
	"strings"

	"gpuprof/analysis/blame"
	"gpuprof/sass"
)

// Loads on a dependent chain (docs/validation.md, item 20). A load whose
// address depends on its own earlier result (a pointer chase, a tree walk:
// j = next[j]) waits a full round trip in every iteration, however few
// bytes it moves. The estimates that shrink an access's cost with its
// bytes (GPA's memory access adjustment, the traffic apportioning of item
// 1, a narrower type) assume its waits are for bandwidth; for such a load
// they are the round trip itself, which fewer sectors shorten only by the
// queueing. Where its data comes from (L1, L2 or DRAM) and how much of the
// round trip is queueing are not in the profile, so those estimates leave
// such loads out and, where nothing else is left, are n/a.

// recurrentLoad reports whether instruction i of fv is a global, generic
// or texture load on a dependence cycle: its result feeds, through the
// registers, its own address in a later iteration.
func recurrentLoad(fv *fnView, i int) bool {
	k := fv.c.Model.Insts[i].Kind
	if k != blame.KGlobalMem && k != blame.KGenericMem && k != blame.KTextureMem {
		return false
	}
	if op := fv.c.F.Insts[i].Mem.Op; op != sass.MemLoad && op != sass.MemAtomic {
		return false
	}
	return fv.c.backSlice([]int{i}, func(int) bool { return true })[i]
}

// chainedLoads splits refs into the loads on a dependent chain and the
// rest (nothing is split under GPA's rules alone).
func (kv *kernelView) chainedLoads(refs []instRef) (chained, rest []instRef) {
	for _, r := range refs {
		if !kv.gpaOnly && recurrentLoad(r.fv, r.i) {
			chained = append(chained, r)
		} else {
			rest = append(rest, r)
		}
	}
	return chained, rest
}

// Shared accesses at data-chosen addresses (docs/validation.md, item 55).
// Padding a row or swizzling an index changes which bank an index maps
// to, a pattern fixed by the index arithmetic: lanes a row apart land in
// distinct banks. Where each lane's index comes from data the lane loaded
// (a binary search over a table, a merge path, a hash), the lanes probe
// positions the data picks, and they meet on banks by chance whatever the
// layout: no padding or swizzle removes those passes (held-out set 9:
// quantBnB's and merge's searches, 1.09x estimated, 0.91-0.92x achieved).

// dataAddressed reports whether memory instruction i of fv takes its
// address from a value loaded from memory that differs between a warp's
// lanes: a global, generic, shared or texture load whose own address
// depends on the thread's index (constant and local loads are left out:
// kernel arguments, and spilled registers, hold no data of their own).
func dataAddressed(fv *fnView, i int) bool {
	defs := addressDefs(fv, i)
	slice := fv.c.backSlice(defs, func(int) bool { return true })
	for _, j := range defs {
		slice[j] = true
	}
	for j := range slice {
		if j != i && laneLoad(fv, j) && fv.threadIndexed(j) {
			return true
		}
	}
	// i on its own chain (j = table[j] with j first from the thread's
	// index): its earlier results choose its address.
	return slice[i] && fv.threadIndexed(i)
}

// addressDefs lists the instructions defining the registers memory
// instruction i of fv reads to form its address (sass's AddressRegs: never
// a store's data, its guard or a scoreboard).
func addressDefs(fv *fnView, i int) []int {
	addr := map[uint32]bool{}
	for _, r := range fv.c.F.Insts[i].AddressRegs() {
		addr[uint32(r)] = true
	}
	var out []int
	for _, d := range fv.c.Model.Insts[i].Deps {
		if d.SB || !addr[d.Reg] {
			continue
		}
		for _, j := range d.Defs {
			if j >= 0 {
				out = append(out, j)
			}
		}
	}
	return out
}

// laneLoad reports whether instruction j of fv loads data from memory
// (global, generic, shared, texture or surface).
func laneLoad(fv *fnView, j int) bool {
	m := fv.c.F.Insts[j].Mem
	if m.Op != sass.MemLoad && m.Op != sass.MemAtomic {
		return false
	}
	return m.Space != sass.SpaceConstant && m.Space != sass.SpaceLocal && m.Space != sass.SpaceNone
}

// threadIndexed reports whether the address of memory instruction j of
// fv depends on the thread's index, so that its lanes load different
// elements.
func (fv *fnView) threadIndexed(j int) bool {
	lane := fv.c.laneVarying()
	for _, d := range addressDefs(fv, j) {
		if lane[d] {
			return true
		}
	}
	return false
}

// laneVarying marks the instructions whose results depend, through the
// registers (scoreboards aside), on the thread's index (SR_TID,
// SR_LANEID): computed once per function, forward from those reads, so
// that asking it of every load in a slice stays linear.
func (c *code) laneVarying() []bool {
	c.laneOnce.Do(func() {
		v := make([]bool, len(c.F.Insts))
		var stack []int
		for i := range c.F.Insts {
			if readsThreadIndex(&c.F.Insts[i]) {
				v[i] = true
				stack = append(stack, i)
			}
		}
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for r, us := range c.Model.Users[i] {
				if sass.Reg(r).Kind() == sass.KindSB {
					continue
				}
				for _, u := range us {
					if !v[u] {
						v[u] = true
						stack = append(stack, u)
					}
				}
			}
		}
		c.lane = v
	})
	return c.lane
}

// readsThreadIndex reports whether in reads SR_TID or SR_LANEID.
func readsThreadIndex(in *sass.Instruction) bool {
	if in.Opcode != "S2R" && in.Opcode != "CS2R" {
		return false
	}
	for _, o := range in.Operands {
		if o.Kind == sass.OperandSpecial && (strings.HasPrefix(o.Name, "SR_TID") || o.Name == "SR_LANEID") {
			return true
		}
	}
	return false
}
