package online

import (
	"strings"
	"sync/atomic"
	"testing"
)

// parallel runs every item once, on any number of workers, and a panic in
// one item is the analysis' failure (with the panic's message), not a crash;
// rethrown and recovered again it keeps one message.
func TestParallel(t *testing.T) {
	for _, workers := range []int{1, 3, 16} {
		var runs [100]atomic.Int32
		if err := parallel(workers, len(runs), func(i int) { runs[i].Add(1) }); err != nil {
			t.Fatal(err)
		}
		for i := range runs {
			if n := runs[i].Load(); n != 1 {
				t.Fatalf("%d workers: item %d ran %d times", workers, i, n)
			}
		}
	}
	if err := parallel(4, 0, func(int) { t.Fatal("no item to run") }); err != nil {
		t.Fatal(err)
	}
	err := parallel(4, 10, func(i int) {
		if i == 7 {
			panic("bad item 7")
		}
	})
	if err == nil || !strings.HasPrefix(err.Error(), "analysis failed: bad item 7\n") || !strings.Contains(err.Error(), "parallel_test.go") {
		t.Fatalf("a panicking item: %v", err)
	}
	rethrown := func() (got error) {
		defer func() { got = panicError(recover()) }()
		panic(err)
	}()
	if rethrown.Error() != err.Error() {
		t.Fatalf("rethrown failure changed:\n%v\nwant\n%v", rethrown, err)
	}
}

// TestCandidatesFullCountsQueuedLanes: the early barrier counts the lanes
// sent to a worker and not yet analysed, at the worker's candidates per
// lane in this window, or the last window's before it reports, or one
// per lane before any window (hand-computed, limit 32768).
func TestCandidatesFullCountsQueuedLanes(t *testing.T) {
	a := New(Options{Job: "t", Workers: 2, CandidateLimit: 1 << 15})
	defer a.Close()
	w := a.workers[1]
	for _, tc := range []struct {
		name             string
		sent, done, cand int64
		ratio            float64
		want             bool
	}{
		{"nothing reported yet: every queued lane a candidate", 40000, 0, 0, 1, true},
		{"nothing reported yet, under the limit", 30000, 0, 0, 1, false},
		{"last window's ratio 0.01", 40000, 0, 0, 0.01, false},
		{"this window's ratio 0.5: 5000 + 0.5 x 60000", 70000, 10000, 5000, 0.01, true},
		{"this window's ratio 0.2: 2000 + 0.2 x 60000", 70000, 10000, 2000, 1, false},
		{"held already", 0, 0, 1 << 15, 0, true},
		{"too few lanes for its own ratio: 100 + 1 x 40000", 40100, 100, 100, 1, true},
	} {
		w.sent, w.ratio = tc.sent, tc.ratio
		w.lanesDone.Store(tc.done)
		w.candN.Store(tc.cand)
		if got := a.candidatesFull(); got != tc.want {
			t.Errorf("%s: candidatesFull %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWindowRatio: windows too short to set a worker's candidates per
// lane add up until they have minRatioLanes lanes (hand-computed).
func TestWindowRatio(t *testing.T) {
	w := &worker{ratio: 1}
	w.windowRatio(100, 1000) // 1000 lanes: too few
	if w.ratio != 1 {
		t.Fatalf("ratio %v after 1000 lanes, want 1 still", w.ratio)
	}
	w.windowRatio(100, 3096) // 4096 lanes in all: 200 / 4096
	if want := 200.0 / 4096; w.ratio != want {
		t.Fatalf("ratio %v, want %v", w.ratio, want)
	}
	w.windowRatio(4096, 8192) // a window long enough on its own
	if w.ratio != 0.5 {
		t.Fatalf("ratio %v, want 0.5", w.ratio)
	}
}
