package reducer_test

import (
	"context"
	"testing"
	"time"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

func runTree(t *testing.T, cfg reducer.Config) (chan *profile.Profile, chan *reducer.TreeStats, chan error) {
	pc, sc, ec := make(chan *profile.Profile, 1), make(chan *reducer.TreeStats, 1), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		p, st, err := reducer.RunTree(ctx, cfg)
		pc <- p
		sc <- st
		ec <- err
	}()
	return pc, sc, ec
}

// The tree runs while the ranks publish, and its final profile is the
// in-process merge of the same items, byte for byte.
func TestTreeMatchesFlatMerge(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ranks, k, bats int
		shape          proftest.Shape
	}{
		{"8ranks-k4", 8, 4, 3, proftest.Small},
		{"64ranks-k8", 64, 8, 2, proftest.Small},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startBroker(t)
			c := connect(t, e, "reducer")
			job := "tree-" + tc.name
			ensureStream(t, c, job)
			items := jobItems(job, 7, tc.shape, tc.ranks, tc.bats)
			want := flatMerge(t, job, items)
			log, _ := newLogger(t)
			cfg := treeConfig(t, c, job, tc.ranks, tc.k, log)
			ready := make(chan reducer.NodeName, 100)
			cfg.OnReady = func(n reducer.NodeName) { ready <- n }
			pc, sc, ec := runTree(t, cfg)
			for range cfg.Tree.Nodes() {
				<-ready
			}
			pst := publishRanks(t, e, job, items, 16)
			if err := <-ec; err != nil {
				t.Fatal(err)
			}
			got, st := <-pc, <-sc
			sameProfile(t, got, want)
			if st.ItemsMerged != uint64(tc.ranks*(tc.bats+1)) {
				t.Errorf("items merged %d, want %d", st.ItemsMerged, tc.ranks*(tc.bats+1))
			}
			var chunks uint64
			for _, s := range pst {
				chunks += s.Acked
			}
			t.Logf("%s: %d chunks published, %d items merged, %.1f MB in, %d partials (%.1f MB), tail %v, elapsed %v",
				st.Plan, chunks, st.ItemsMerged, float64(st.BytesIn)/(1<<20), st.Partials, st.PartialMB, st.Tail, st.Elapsed)
			for _, ns := range st.Nodes {
				t.Logf("node %v: start %v finish %v merge %v encode %v publish %v lastDone %v", ns.Node, ns.Start.Format("05.000"), ns.Finish.Format("05.000"), ns.MergeTime, ns.EncodeTime, ns.PublishTime, ns.LastDone.Format("05.000"))
			}
		})
	}
}
