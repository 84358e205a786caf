package reducer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

// Ranks past the plan (a command that started more CUDA processes than
// its launcher said) are consumed by no leaf; after the tree they are
// merged from the input stream, so the job's profile is the merge of every
// rank that published, and a rank whose items are not all there is sealed
// as incomplete, saying why.
func TestMergeUnplanned(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "reducer")
	job := "unplanned"
	ensureStream(t, c, job)
	items := jobItems(job, 11, proftest.Small, 4, 2)
	items[3] = items[3][:2] // rank 3 ended without its done item
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 2, 8, log) // planned: ranks 0 and 1
	pc, _, ec := runTree(t, cfg)
	publishRanks(t, e, job, items, 16)
	if err := <-ec; err != nil {
		t.Fatal(err)
	}
	got := <-pc
	if len(got.Items) != 2 {
		t.Fatalf("the tree merged %d ranks, want the 2 planned", len(got.Items))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	extra, err := reducer.MergeUnplanned(ctx, c, job, cfg.Tree, got)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(extra) != "[2 3]" {
		t.Fatalf("unplanned ranks %v, want [2 3]", extra)
	}
	want := expectSealed(t, job, items, map[int32]string{3: "not in the plan, and items are missing"})
	sameProfile(t, got, want)
	if !got.Sealed(2) || got.Ranks[2].Incomplete != "" {
		t.Errorf("rank 2: sealed %v, %+v", got.Sealed(2), got.Ranks[2])
	}
	// Nothing past the plan: nothing to do.
	if extra, err := reducer.MergeUnplanned(ctx, c, job, mustPlan(t, 4), got); err != nil || len(extra) != 0 {
		t.Errorf("with every rank planned: %v %v", extra, err)
	}
}

func mustPlan(t *testing.T, n int) *reducer.Tree {
	tr, err := reducer.PlanN(n, 8)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
