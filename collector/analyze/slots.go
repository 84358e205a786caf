package analyze

import "runtime"

// slots bounds how many workers analyse at once. Every frame wakes all
// workers and memory workers together (twice GOMAXPROCS goroutines with
// the defaults), and the one goroutine that feeds them, the dispatch loop,
// then waited its turn for a core behind them: an execution trace of a
// replay on the 16-core GPU host showed the loop runnable but not running
// for 1.1 s of 4.75 s, and the workers idle for want of its frames. A
// worker holds a slot while it analyses a frame; with a core or two left
// out of the slots, the loop and the stream reader always find one.
type slots chan struct{}

func newSlots(n int) slots {
	if n <= 0 {
		n = defaultSlots(runtime.GOMAXPROCS(0))
	}
	return make(slots, n)
}

// defaultSlots leaves two cores to the dispatch loop and the stream reader
// on machines of 8 cores or more, one on 4 to 7, none on smaller ones.
func defaultSlots(procs int) int {
	switch {
	case procs >= 8:
		return procs - 2
	case procs >= 4:
		return procs - 1
	}
	return max(1, procs)
}

func (s slots) acquire() { s <- struct{}{} }
func (s slots) release() { <-s }
