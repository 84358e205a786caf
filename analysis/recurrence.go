package analysis

import "gpuprof/sass"

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
	du := c.F.DefUse()
	seen := map[int]bool{src: true}
	stack := []int{src}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for k, r := range du.Uses[i] {
			if r.Kind() == sass.KindSB {
				continue
			}
			for _, d := range du.UD[i][k] {
				di := int(d)
				if d < 0 || !c.inLoop(di, li) {
					continue
				}
				if di == dst {
					return true
				}
				if !seen[di] {
					seen[di] = true
					stack = append(stack, di)
				}
			}
		}
	}
	return false
}
