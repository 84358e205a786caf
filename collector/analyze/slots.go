package analyze

import "runtime"

// slots bounds how many workers analyse at once. Every frame wakes all
// workers and memory workers together (twice GOMAXPROCS goroutines with
// the defaults), and the one goroutine that feeds them, the dispatch loop,
// then waits its turn for a core behind them: an execution trace of a
// replay on the 16-core GPU host showed the loop runnable but not running
// for 1.1 s of 4.75 s. A worker holds a slot while it analyses a frame, so
// slots below GOMAXPROCS keep cores for the loop and the stream reader.
// Keeping two back did not change the replay times on that host
// (docs/overhead.md), so the default is GOMAXPROCS: no core kept back.
type slots chan struct{}

func newSlots(n int) slots {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return make(slots, n)
}

func (s slots) acquire() { s <- struct{}{} }
func (s slots) release() { <-s }
