package analysis

import "fmt"

// Bounds on kernel-level estimates. An optimizer's estimate may not exceed
// what its model can justify; one that does is shown as n/a with the
// reason (Advice.SpeedupNA) rather than as a number. The parallelism
// optimizers bound themselves by the work a launch has to divide
// (parallelism.go); docs/advice.md ("Bounds") states the rules.

// unjustified returns why speedup s of match m exceeds what its model
// justifies, or "".
func (kv *kernelView) unjustified(m match, s float64) string {
	if m.est == estGiven {
		return ""
	}
	hot := map[instRef]bool{}
	for _, h := range m.hots {
		hot[instRef{h.fv, h.i}] = true
	}
	for _, r := range m.alsoGone {
		hot[r] = true
	}
	return kv.eq3Unjustified(s, hot, m.Mfused > 0)
}

// eq3Unjustified checks an estimate of eq. 3 (or eq. 5/6) whose fix
// changes the instructions in hot; fused says the fix also removes issued
// loop control (loop fusion), which the issue bound does not see.
func (kv *kernelView) eq3Unjustified(s float64, hot map[instRef]bool, fused bool) string {
	if s <= 1 {
		return ""
	}
	// Eq. 3 assumes the rest of the kernel runs as before; removing
	// (nearly) all of its samples leaves nothing that bounds what the
	// change leaves behind (StallElimination caps M at 0.99 T).
	if gone := kv.T - kv.T/s; gone >= 0.99*kv.T-1e-9 {
		return fmt.Sprintf("the matched samples are %.0f%% of the kernel's: eq. 3 cannot bound the time the changed kernel takes", 100*gone/kv.T)
	}
	if fused {
		return "" // loop fusion removes issued loop control too
	}
	// The instructions the fix keeps still issue: a selected sample is a
	// cycle in which the sampled warp issued, so they need at least their
	// selected samples whatever stalls go.
	kept := kv.selectedAt(func(fv *fnView, i int) bool { return !hot[instRef{fv, i}] })
	if kept <= 0 {
		return ""
	}
	if bound := kv.T / kept; s > bound*(1+1e-9) {
		return fmt.Sprintf("the model gives %.2fx, above the %.2fx the kernel's issue allows: the instructions the change keeps issued in %.0f of its %.0f samples (selected), which removing stalls does not shorten", s, bound, kept, kv.T)
	}
	return ""
}
