package online

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// panicError is the analysis' failure from a recovered panic, with the
// stack of where it happened; one already made (a panic rethrown from a
// worker, parallel) is kept as it is.
func panicError(r any) error {
	if f, ok := r.(analysisFailure); ok {
		return f
	}
	return analysisFailure{fmt.Errorf("analysis failed: %v\n%s", r, debug.Stack())}
}

type analysisFailure struct{ error }

// parallel runs f(i) for every i in [0, n) on up to workers goroutines. A
// panic in f is recovered where it happened and returned, once the other
// goroutines finished, as the analysis' failure: the collector reports it
// and keeps what it already published, instead of dying.
func parallel(workers, n int, f func(i int)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					failed = panicError(r)
					mu.Unlock()
				}
			}()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		}()
	}
	wg.Wait()
	return failed
}
