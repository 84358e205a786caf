package analysis

import (
	"gpuprof/analysis/blame"
	"gpuprof/sass"
)

// Block-wide barriers and latency hiding (docs/validation.md, item 18).
//
// Code reordering and loop unrolling hide a wait behind independent work
// the same warp could issue meanwhile. A barrier (__syncthreads, BAR.SYNC)
// is a wall for that work: nothing moves across it, since the block's
// other threads may read or write shared memory on the far side. So the
// work that can cover a wait lies between the same two barriers as the
// wait (a barrier interval), and a loop whose every iteration passes a
// barrier has no iterations that overlap: unrolling it lets nothing new
// into an interval. And a warp waiting at a barrier is not work: its
// samples (active ones included, which only say another warp issued) do
// not count toward the work that covers latency.

// blockBarrier reports whether in makes the warp wait for the rest of its
// block (BAR.SYNC, BAR.RED; not BAR.ARV, which arrives without waiting).
func blockBarrier(in *sass.Instruction) bool {
	if in.Class != sass.ClassSync || in.Op != "BAR" || in.Guarded() {
		return false
	}
	for _, m := range in.Mods {
		if m == "ARV" {
			return false
		}
	}
	return true
}

// barrierIntervals numbers the barrier intervals of c's function: the
// instructions control can pass between without crossing a block-wide
// barrier share a number; barriers themselves get -1. n is the number of
// intervals (1 for a function without barriers).
func (c *code) barrierIntervals() (iv []int, n int) {
	c.barOnce.Do(func() {
		f := c.F
		parent := make([]int, len(f.Insts))
		for i := range parent {
			parent[i] = i
		}
		var find func(i int) int
		find = func(i int) int {
			for parent[i] != i {
				parent[i] = parent[parent[i]]
				i = parent[i]
			}
			return i
		}
		bar := make([]bool, len(f.Insts))
		for i := range f.Insts {
			bar[i] = blockBarrier(&f.Insts[i])
		}
		join := func(a, b int) {
			if !bar[a] && !bar[b] {
				parent[find(a)] = find(b)
			}
		}
		g := f.CFG()
		for _, b := range g.Blocks {
			for i := b.Start; i+1 < b.End; i++ {
				join(i, i+1)
			}
			for _, s := range b.Succs {
				if b.End > b.Start && g.Blocks[s].End > g.Blocks[s].Start {
					join(b.End-1, g.Blocks[s].Start)
				}
			}
		}
		c.interval = make([]int, len(f.Insts))
		ids := map[int]int{}
		for i := range f.Insts {
			if bar[i] {
				c.interval[i] = -1
				continue
			}
			r := find(i)
			if _, ok := ids[r]; !ok {
				ids[r] = len(ids)
			}
			c.interval[i] = ids[r]
		}
		c.nInterval = max(1, len(ids))
	})
	return c.interval, c.nInterval
}

// barrierEveryIteration reports whether every iteration of loop li passes
// a block-wide barrier: a block of the loop holding one dominates each of
// its back edges' sources.
func (fv *fnView) barrierEveryIteration(li int) bool {
	g := fv.c.F.CFG()
	l := g.Loops[li]
	for _, b := range l.Blocks {
		has := false
		for i := g.Blocks[b].Start; i < g.Blocks[b].End; i++ {
			if blockBarrier(&fv.c.F.Insts[i]) {
				has = true
				break
			}
		}
		if !has {
			continue
		}
		all := len(l.BackEdges) > 0
		for _, e := range l.BackEdges {
			if !g.Dominates(b, e.From) {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// hasBarriers reports whether any function of the kernel context has a
// block-wide barrier.
func (kv *kernelView) hasBarriers() bool {
	for _, fv := range kv.fns {
		for i := range fv.c.F.Insts {
			if blockBarrier(&fv.c.F.Insts[i]) {
				return true
			}
		}
	}
	return false
}

// hidingScopes splits a latency-hiding match by barrier interval: the
// latency samples of the blamed edges that ok accepts, each in the
// interval of its stalled instruction, and the active samples, other than
// synchronisation waits, of the instructions where in holds.
func (kv *kernelView) hidingScopes(ok func(fv *fnView, e blame.Edge) bool, in func(fv *fnView, i int) bool) map[scopeKey]*scope {
	out := map[scopeKey]*scope{}
	at := func(fv *fnView, i int) *scope {
		iv, _ := fv.c.barrierIntervals()
		k := scopeKey{fv.c, iv[i]}
		if out[k] == nil {
			out[k] = &scope{}
		}
		return out[k]
	}
	for _, fv := range kv.fns {
		iv, _ := fv.c.barrierIntervals()
		for _, e := range fv.r.Edges {
			if !ok(fv, e) {
				continue
			}
			i := e.Dst
			if iv[i] < 0 {
				i = e.Src
			}
			v := e.Samples * kv.latShare(fv, e)
			s := at(fv, i)
			s.M += v
			if execEdge(fv, e) {
				s.Mexec += v
			}
		}
		for i := range fv.s {
			if in(fv, i) && iv[i] >= 0 {
				at(fv, i).A += max(0, fv.active(i)-kv.activeSync(fv, i))
			}
		}
	}
	return out
}

// activeSync is the part of instruction i's active samples that are
// synchronisation waits (a warp at a barrier sampled while another warp
// issued). Without not-issued data the active samples are the selected and
// not_selected ones, which hold no such waits.
func (kv *kernelView) activeSync(fv *fnView, i int) float64 {
	if fv.ni == nil {
		return 0
	}
	t := 0.0
	for r, v := range fv.s[i].ByReason {
		if rs, _ := blame.LookupReason(r); rs.Group == blame.GSync {
			t += max(0, v-fv.ni[i][r])
		}
	}
	return t
}

// loopsInterval returns the barrier interval that holds every instruction
// of the loops (ok false when a barrier lies in them or between them).
func (fv *fnView) loopsInterval(loops map[int]bool) (int, bool) {
	iv, _ := fv.c.barrierIntervals()
	at := -2
	for li := range loops {
		for _, i := range fv.c.loopInsts(li) {
			switch {
			case iv[i] < 0:
				return 0, false
			case at == -2:
				at = iv[i]
			case iv[i] != at:
				return 0, false
			}
		}
	}
	return at, at >= 0
}
