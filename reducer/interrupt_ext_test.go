package reducer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

// An interrupted job: the ranks that published are merged and the rest
// are sealed incomplete within the interruption's bound, not the (long)
// rank timeout, through a two-level tree.
func TestSignalEndWithin(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "reducer")
	const job = "intr"
	ensureStream(t, c, job)
	items := jobItems(job, 5, proftest.Small, 8, 1)
	for r := 4; r < 8; r++ {
		items[r] = nil
	}
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.RankTimeout = time.Hour
	pc, sc, ec := runTree(t, cfg)
	publishRanks(t, e, job, items, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := reducer.SignalEndWithin(ctx, c, job, 130, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-ec; err != nil {
		t.Fatal(err)
	}
	got, st := <-pc, <-sc
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("the tree ended %v after the interruption, bound 1s (+ the tree's own time)", d)
	}
	reasons := map[int32]string{}
	for r := int32(4); r < 8; r++ {
		reasons[r] = "rank timeout: no data"
	}
	sameProfile(t, got, expectSealed(t, job, items, reasons))
	if !slices.Equal(st.Incomplete, []int32{4, 5, 6, 7}) {
		t.Fatalf("incomplete %v", st.Incomplete)
	}
	t.Logf("interrupted tree ended %v after the signal", time.Since(t0).Round(time.Millisecond))
}
