package analysis

// What a function's loops are made of and what they sampled: which
// instructions lie in a loop, which control it, its active samples.
// Fusion, barriers, chains and the redundancy estimates all ask it.

// loopInsts lists the instructions of loop li (nested loops included).
func (c *code) loopInsts(li int) []int {
	g := c.F.CFG()
	var out []int
	for _, bi := range g.Loops[li].Blocks {
		for i := g.Blocks[bi].Start; i < g.Blocks[bi].End; i++ {
			out = append(out, i)
		}
	}
	return out
}

// loopControl marks the control of loop li: the branches that close it
// (the last instructions of its back-edge sources) and the backward slice
// of their predicates within the loop's own blocks (the compare and the
// counter update).
func (fv *fnView) loopControl(li int) map[int]bool {
	g := fv.c.F.CFG()
	own := map[int]bool{}
	for i := range fv.s {
		if fv.c.Loop[i] == li {
			own[i] = true
		}
	}
	var branches []int
	for _, e := range g.Loops[li].BackEdges {
		if br := g.Blocks[e.From].End - 1; br >= 0 && own[br] {
			branches = append(branches, br)
		}
	}
	ctl := fv.c.backSlice(branches, func(j int) bool { return own[j] })
	for _, br := range branches {
		ctl[br] = true
	}
	return ctl
}

// backSlice is the instructions whose register or predicate results
// reach the instructions from, through reaching definitions (not
// scoreboard waits), keeping to those where in holds; from themselves are
// not in it unless reached.
func (c *code) backSlice(from []int, in func(j int) bool) map[int]bool {
	out := map[int]bool{}
	stack := append([]int(nil), from...)
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range c.Model.Insts[i].Deps {
			if d.SB {
				continue
			}
			for _, j := range d.Defs {
				if j >= 0 && !out[j] && in(j) {
					out[j] = true
					stack = append(stack, j)
				}
			}
		}
	}
	return out
}

// loopActive sums the active samples of loop li and its nested loops.
func (fv *fnView) loopActive(li int) float64 {
	g := fv.c.F.CFG()
	t := 0.0
	for i := range fv.s {
		for l := fv.c.Loop[i]; l >= 0; l = g.Loops[l].Parent {
			if l == li {
				t += fv.active(i)
				break
			}
		}
	}
	return t
}

// inLoop reports whether instruction i lies in loop li (nested included).
func (fv *fnView) inLoop(i, li int) bool { return fv.c.inLoop(i, li) }

// loopTrips is the mean number of passes through loop li per entry, from
// the instruction counts: the executions of the header's first
// instruction over those of the last instruction of the blocks that enter
// it from outside (a guard that may skip the loop counts as an entry, so
// the figure errs low); ok is false without counts.
func (fv *fnView) loopTrips(li int) (float64, bool) {
	g := fv.c.F.CFG()
	lp := g.Loops[li]
	in := map[int]bool{}
	for _, b := range lp.Blocks {
		in[b] = true
	}
	h := g.Blocks[lp.Header]
	head := fv.s[h.Start].Executed
	if head <= 0 {
		return 0, false
	}
	entries := 0.0
	for _, p := range h.Preds {
		if in[p] {
			continue
		}
		pb := g.Blocks[p]
		if pb.End <= pb.Start {
			return 0, false
		}
		e := fv.s[pb.End-1].Executed
		if e <= 0 {
			return 0, false
		}
		entries += e
	}
	if entries <= 0 {
		return 0, false
	}
	return head / entries, true
}
