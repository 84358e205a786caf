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
