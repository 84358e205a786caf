package analysis

// Chains through a loop's iterations.
//
// Unrolling a loop puts several iterations' instructions side by side, so
// one iteration's waits overlap another's work, but only where the
// iterations are independent. A wait on a chain through the iterations
// (an accumulator, a recurrence such as x = x*x + c, a pointer chase) is
// as long unrolled as not: each link needs the one before it, which the
// previous iteration produced (item 54).

// onRecurrence reports whether, in loop li, producer src depends on
// consumer dst's result through the registers the loop computes: dst
// waits on src, and src (in the next iteration) needs what dst made, so
// the two lie on a chain through the iterations. Scoreboards are left
// out: a slot reused by unrelated instructions is no dependency.
func (c *code) onRecurrence(src, dst, li int) bool {
	return c.backSlice([]int{src}, func(j int) bool { return c.inLoop(j, li) })[dst]
}
