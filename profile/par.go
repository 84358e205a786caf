package profile

import (
	"runtime"
	"slices"
	"sync"
)

// Helpers that spread the encoding and decoding of large profiles over the
// cores: a reducer's tail is one node encoding or decoding a partial of
// millions of entries while the rest of the machine is idle.

// parMin is the number of table entries below which work stays on one
// goroutine (spawning costs more than it saves on a collector's batch);
// tables of 4*parMin entries and more are sorted in parallel. A variable,
// so tests can push small profiles through the parallel paths.
var parMin = 1 << 14

// parChunk is the number of entries one encoding task writes.
var parChunk = 1 << 15

// workers bounds the goroutines of one encode or decode.
func workers() int { return max(runtime.GOMAXPROCS(0), 1) }

// runAll runs fs on up to workers() goroutines and waits for all.
func runAll(fs []func()) {
	if len(fs) == 1 || workers() == 1 {
		for _, f := range fs {
			f()
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan func())
	for w := 0; w < min(workers(), len(fs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range next {
				f()
			}
		}()
	}
	for _, f := range fs {
		next <- f
	}
	close(next)
	wg.Wait()
}

// psort sorts xs by cmp. Every table's first key is a node id, an xxhash
// value, so its top bits spread entries evenly: large tables are split
// into buckets by those bits (bucket order is sorted order) and the
// buckets sorted in parallel. It returns the sorted slice, which may be a
// new one.
func psort[T any](xs []T, top func(*T) uint64, cmp func(a, b T) int) []T {
	if len(xs) < 4*parMin || workers() == 1 {
		slices.SortFunc(xs, cmp)
		return xs
	}
	const bits = 8
	var count [1<<bits + 1]int
	for i := range xs {
		count[top(&xs[i])>>(64-bits)+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	out := make([]T, len(xs))
	pos := count
	for i := range xs {
		b := top(&xs[i]) >> (64 - bits)
		out[pos[b]] = xs[i]
		pos[b]++
	}
	// Group adjacent buckets into tasks of similar size.
	var fs []func()
	per := max(len(xs)/(4*workers()), 1)
	lo := 0
	for b := 1; b <= 1<<bits; b++ {
		if count[b]-count[lo] >= per || b == 1<<bits {
			s := out[count[lo]:count[b]]
			fs = append(fs, func() { slices.SortFunc(s, cmp) })
			lo = b
		}
	}
	runAll(fs)
	return out
}
