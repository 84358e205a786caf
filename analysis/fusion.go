package analysis

import (
	"strconv"
	"strings"

	"gpuprof/analysis/blame"
)

// Loop fusion behind code reordering.
//
// An outer loop that the compiler unrolled leaves k copies of its inner
// loop one after the other (stall_exec's four chains: four copies of the
// same FFMA loop). When each copy waits on its own dependency chain, the
// independent work that code reordering would move between producer and
// consumer lies in the other copies, and interleaving it means fusing the
// k loops into one (unroll and jam). The fused loop runs its control (the
// counter update, the compare and the back-edge branch) once for k bodies,
// so (k-1)/k of the copies' loop-control samples go with the reordering.

// loopCopies returns, per loop of fv's function, how many independent
// copies of it the function holds: loops with the same parent and the
// same instruction sequence (opcodes and modifiers, registers aside) of
// which none reads a value that another computes, directly or through the
// code between them. 1 for a loop without copies.
func (fv *fnView) loopCopies() []int {
	g := fv.c.F.CFG()
	n := make([]int, len(g.Loops))
	groups := map[string][]int{}
	var order []string
	for li := range g.Loops {
		n[li] = 1
		sig := fv.loopSignature(li)
		if _, ok := groups[sig]; !ok {
			order = append(order, sig)
		}
		groups[sig] = append(groups[sig], li)
	}
	for _, sig := range order {
		ls := groups[sig]
		if len(ls) < 2 || !fv.independentLoops(ls) {
			continue
		}
		for _, li := range ls {
			n[li] = len(ls)
		}
	}
	return n
}

// loopSignature names a loop's parent and its instructions' opcodes in
// address order.
func (fv *fnView) loopSignature(li int) string {
	g := fv.c.F.CFG()
	var b strings.Builder
	b.WriteString(strconv.Itoa(g.Loops[li].Parent))
	for _, bi := range g.Loops[li].Blocks {
		blk := g.Blocks[bi]
		b.WriteByte('|')
		for i := blk.Start; i < blk.End; i++ {
			b.WriteString(fv.c.Model.Insts[i].Op)
			b.WriteByte(';')
		}
	}
	return b.String()
}

// independentLoops reports whether no loop of ls reads a value that
// another loop of ls computed: the backward slice of each loop's
// instructions (reaching definitions, followed through any code) meets no
// instruction of the others.
func (fv *fnView) independentLoops(ls []int) bool {
	owner := map[int]int{} // instruction -> loop of ls
	for k, li := range ls {
		for _, i := range fv.c.loopInsts(li) {
			owner[i] = k
		}
	}
	for k, li := range ls {
		seen := map[int]bool{}
		stack := append([]int(nil), fv.c.loopInsts(li)...)
		for _, i := range stack {
			seen[i] = true
		}
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, d := range fv.c.Model.Insts[i].Deps {
				for _, j := range d.Defs {
					if j < 0 || seen[j] {
						continue
					}
					if o, ok := owner[j]; ok && o != k {
						return false
					}
					seen[j] = true
					stack = append(stack, j)
				}
			}
		}
	}
	return true
}

// fusionSamples is what fusing the copies of the loops in `loops` saves:
// (k-1)/k of each copy's loop-control samples, which are the samples at
// its control instructions other than dependency waits (code reordering's
// hiding already counts those) and its branch_resolving and
// no_instructions samples (waiting for the back edge's target). active is
// the part of them that are active samples, which then no longer cover
// hidden latency (eq. 5/6).
func (fv *fnView) fusionSamples(loops map[int]bool, copies []int) (t, active float64) {
	for li := range loops {
		k := float64(copies[li])
		if k < 2 {
			continue
		}
		ctl := fv.loopControl(li)
		s, a := 0.0, 0.0
		for i := range fv.s {
			if fv.c.Loop[i] != li {
				continue
			}
			for r, v := range fv.s[i].ByReason {
				if r == "branch_resolving" || r == "no_instructions" || ctl[i] && !latencyReason(r) {
					s += v
					a += fv.activePart(i, r, v)
				}
			}
		}
		t += s * (k - 1) / k
		active += a * (k - 1) / k
	}
	return t, active
}

// activePart is the part of instruction i's v samples of reason r that
// are active samples, as the kernel's A counts them: all but the
// not-issued ones when the profile has them, else selected and
// not_selected.
func (fv *fnView) activePart(i int, r string, v float64) float64 {
	if fv.ni != nil {
		return v * (1 - fv.latencyShare(i, r))
	}
	if r == "selected" || r == "not_selected" {
		return v
	}
	return 0
}

// fusedLoops returns the loops with independent copies that hold the
// stalled instruction of a matched latency edge: the loops whose fusion
// the reordering implies.
func (fv *fnView) fusedLoops(ok func(fv *fnView, e blame.Edge) bool, copies []int) map[int]bool {
	out := map[int]bool{}
	for _, e := range fv.r.Edges {
		if !ok(fv, e) {
			continue
		}
		if li := fv.c.Loop[e.Dst]; li >= 0 && copies[li] >= 2 && fv.c.Loop[e.Src] == li {
			out[li] = true
		}
	}
	return out
}
