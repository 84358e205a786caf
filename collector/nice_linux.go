package collector

import (
	"os"
	"strconv"
	"syscall"
	"time"
)

// yieldToApp lowers the scheduling priority of every thread of this
// process to nice n until done closes: the application's threads (and
// the injection library's, which feed the collector) then take the cores
// they need first, and the analysis the rest. On Linux nice is a thread's
// own and a new thread takes its creator's, so the threads are set again
// every yieldEvery, for those the Go runtime starts later.
func yieldToApp(n int, done <-chan struct{}) {
	if n <= 0 {
		return
	}
	renice := func() {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil {
				// Best effort: a thread may have exited.
				_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, n)
			}
		}
	}
	renice()
	go func() {
		t := time.NewTicker(yieldEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				renice()
			}
		}
	}()
}

const yieldEvery = 250 * time.Millisecond
