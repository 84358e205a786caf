package analysis

import (
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
	return fv.backSlice([]int{i}, func(int) bool { return true })[i]
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
