package analysis

import "gpuprof/analysis/blame"

// nothingToMove says whether a load's latency, waited for at consumer c,
// has no work that code reordering could move between the load p and c:
// straight-line code (p and c in one basic block, outside every loop)
// where each instruction after c that does work (not a memory access, not
// control) depends on p (through register and predicate chains), and each
// one before p feeds a memory access between p and c (an address), so
// that it cannot move below p. Memory accesses are not counted as work to
// move: loads moved among themselves trade one wait for another.
// Instructions already between p and c hide what they can: the stall is
// what is left. Loops are left out: there the next iteration's loads can
// be moved up (software pipelining, unrolling), which this does not see.
// Latency can only be hidden behind independent work; where none can be
// moved in, reordering saves nothing (docs/validation.md, item 23).
func (fv *fnView) nothingToMove(p, c int) bool {
	f := fv.c.Model
	if p < 0 || c <= p || c >= len(f.Insts) || !f.Insts[p].Kind.IsMemory() {
		return false
	}
	if fv.c.Loop[p] >= 0 || fv.c.Loop[c] >= 0 {
		return false
	}
	b := f.BlockOf(p)
	if f.BlockOf(c) != b {
		return false
	}
	start, end := f.Blocks[b].Start, f.Blocks[b].End
	// Instructions after c that depend on p.
	dep := make([]bool, end-start)
	dep[p-start] = true
	for i := p + 1; i < end; i++ {
		for _, d := range f.Insts[i].Deps {
			for _, x := range d.Defs {
				if x >= start && x < i && dep[x-start] {
					dep[i-start] = true
				}
			}
		}
	}
	for i := c + 1; i < end; i++ {
		if !dep[i-start] && work(f.Insts[i].Kind) && fv.active(i) > 0 {
			return false
		}
	}
	// Instructions before p that feed a memory access in [p, c].
	feeds := make([]bool, end-start)
	for i := p; i <= c; i++ {
		if f.Insts[i].Kind.IsMemory() || f.Insts[i].Kind == blame.KSharedMem {
			feeds[i-start] = true
		}
	}
	for i := c; i >= start; i-- {
		if !feeds[i-start] {
			continue
		}
		for _, d := range f.Insts[i].Deps {
			for _, x := range d.Defs {
				if x >= start && x < i {
					feeds[x-start] = true
				}
			}
		}
	}
	for i := start; i < p; i++ {
		if !feeds[i-start] && work(f.Insts[i].Kind) && fv.active(i) > 0 {
			return false
		}
	}
	return true
}

// work says whether an instruction of kind k is work that can hide a
// load's latency when moved: not control, not a memory access.
func work(k blame.Kind) bool {
	switch k {
	case blame.KControl, blame.KSync, blame.KSharedMem, blame.KConstMem:
		return false
	}
	return !k.IsMemory()
}
