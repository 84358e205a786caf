package analysis

import (
	"fmt"
	"math"

	"gpuprof/profile"
)

// Issue-bound kernels (docs/validation.md, item 16). A kernel whose
// schedulers issue in almost every cycle is bound by its instruction
// count: removing instructions saves their issue cycles, even where their
// own samples are few (their waits hide behind other warps' issue). With
// instruction counts (the hybrid pass) the share of the kernel's issue an
// optimisation removes is known, and so is the share of the kernel's time
// the schedulers issue.

// issueUtilization is the share of the busy schedulers' cycles the
// kernel's timed launches issued in, from its instruction counts at the
// GPU's top clock (a lower bound on the share: nothing issues faster); ok
// is false without counts, timed launches or launch configuration.
func (kv *kernelView) issueUtilization() (u, all float64, ok bool) {
	p := kv.parallelism()
	if p == nil || kv.gpaOnly || !kv.hybrid || p.g.ClockGHz <= 0 {
		return 0, 0, false
	}
	tNs := float64(kv.x.KernelTime[kv.k])
	launches := float64(kv.x.TimedLaunches(kv.k))
	if tNs <= 0 || launches <= 0 {
		return 0, 0, false
	}
	warps := kv.countedWarps()
	for _, fv := range kv.fns {
		for i := range fv.s {
			all += math.Max(0, fv.s[i].Executed)
		}
	}
	if warps <= 0 || all <= 0 {
		return 0, 0, false
	}
	perLaunch := p.cfg.GridBlocks * math.Ceil(p.cfg.Threads/32) * all / warps
	busy := math.Min(float64(p.g.SMs), p.cfg.GridBlocks) * float64(p.g.Schedulers)
	return math.Min(1, launches*perLaunch/(busy*p.g.ClockGHz*tNs)), all, true
}

// issueCap bounds the speedup s of hiding latency (reordering, unrolling,
// inlining, asynchronous copies: changes that keep the kernel's
// instructions) by its schedulers' issue (docs/validation.md, item 41):
// a kernel whose schedulers issue in a share u of the cycles can get at
// most 1/u faster without issuing less, however its waits are hidden, as
// the occupancy model's bound already says. u is a lower bound (counted at
// the top clock), so 1/u errs high. It returns s unchanged where no
// instruction counts are known or s is below the bound.
func (kv *kernelView) issueCap(s float64) (float64, string) {
	u, _, ok := kv.issueUtilization()
	if !ok || u <= 0 || s <= 1 || s <= 1/u {
		return s, ""
	}
	b := max(1, 1/u)
	return b, fmt.Sprintf("; capped at %.3f: the schedulers already issue in %.0f%% of the cycles (instruction counts at the top clock, item 41)", b, 100*u)
}

// countedWarps is the warps the instruction counts cover: the executions
// of the kernel's entry instruction, which every warp runs once.
func (kv *kernelView) countedWarps() float64 {
	name := kv.x.P.Nodes[kv.k].Frame.Function
	for _, fv := range kv.fns {
		if fv.c.F.Name == name {
			if i := fv.c.F.InstAt(0); i >= 0 {
				return fv.s[i].Executed
			}
		}
	}
	return 0
}

// issueSavings is the samples an optimisation that removes gone[r] of
// instruction r's executions saves in an issue-bound kernel: the kernel's
// samples × its issue utilization × the share of its issue removed.
func (kv *kernelView) issueSavings(gone map[instRef]float64) (m float64, note string, ok bool) {
	u, all, ok := kv.issueUtilization()
	if !ok {
		return 0, "", false
	}
	removed := 0.0
	for r, f := range gone {
		removed += f * math.Max(0, r.fv.s[r.i].Executed)
	}
	share := removed / all
	return kv.T * u * share, fmt.Sprintf("issue-bound: the schedulers issue in %.0f%% of the cycles (counts at the top clock) and %.1f%% of the issued instructions go", 100*u, 100*share), true
}

// addressSlice is the instructions of loop li that compute only the
// address of memory instruction i (its backward slice in the loop whose
// every result is read by the slice or by i alone), less the loop
// control: what goes with the access.
func (fv *fnView) addressSlice(i, li int, control map[int]bool) []int {
	in := fv.c.backSlice([]int{i}, func(k int) bool { return k != i && !control[k] && fv.inLoop(k, li) })
	// Drop what something outside the slice also reads, until none does.
	for changed := true; changed; {
		changed = false
		for k := range in {
			for _, users := range fv.c.Model.Users[k] {
				for _, u := range users {
					if u != i && !in[u] {
						delete(in, k)
						changed = true
					}
				}
			}
		}
	}
	out := make([]int, 0, len(in))
	for k := range in {
		out = append(out, k)
	}
	return out
}

// unrollPeriod is how many registers scalar replacement of load i in loop
// li needs: 1 when its address is loop-invariant, else the distinct values
// it loaded (a register per value, and the loop unrolled by as many so
// that each copy names its register); 0 when unknown.
func (kv *kernelView) unrollPeriod(fv *fnView, i, li int) float64 {
	if _, inv := fv.c.invariantAddress(i, li); inv {
		return 1
	}
	st := kv.x.P.PCs[profile.PCKey{Context: kv.k, PC: profile.PC{Func: fv.fid, Offset: uint32(fv.c.F.Insts[i].Offset)}, Access: profile.Load}]
	if st == nil || st.Values == nil || len(st.Values.Top) >= profile.SketchK {
		return 0 // no values, or more than the sketch counts exactly
	}
	return math.Max(1, st.Values.Distinct())
}
