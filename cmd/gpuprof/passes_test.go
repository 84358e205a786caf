package main

import (
	"context"
	"sync"
	"testing"

	"gpuprof/profile"
)

type recordingPublisher struct{ items []*profile.Profile }

func (r *recordingPublisher) Publish(_ context.Context, item *profile.Profile, _ bool) error {
	r.items = append(r.items, item)
	return nil
}

// A pass whose kernel times are not kept loses the time and everything
// derived from it (the instance squares and histogram), so that the
// merged profile's timed instances are the timing pass's alone; its
// launches stay.
func TestPassDropsTimesWithTheirInstances(t *testing.T) {
	hist := profile.Metric("gpu.time_hist.40")
	sq := profile.Metric("gpu.time_sq_lo")
	rec := &recordingPublisher{}
	pp := &passPublisher{next: rec}
	for i, drop := range []bool{false, true} {
		pp.startPass(i == 1, drop)
		it := profile.New("j")
		k := it.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"}, profile.Frame{Kind: profile.KindKernel, Function: "k"})
		for _, m := range []profile.MetricID{profile.GPUTime, hist, sq, profile.GPULaunches} {
			it.Add(k.ID, m, 7)
		}
		if err := it.AsItem(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := pp.Publish(context.Background(), it, false); err != nil {
			t.Fatal(err)
		}
	}
	for i, it := range rec.items {
		k := it.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"}, profile.Frame{Kind: profile.KindKernel, Function: "k"}).ID
		vs := it.Nodes[k].Metrics
		want := uint64(7)
		if i == 1 {
			want = 0
		}
		if vs.Get(profile.GPUTime) != want || vs.Get(hist) != want || vs.Get(sq) != want || vs.Get(profile.GPULaunches) != 7 {
			t.Fatalf("pass %d: %v", i, vs)
		}
	}
}

// The ranks of one command (a torchrun's workers) publish their passes
// concurrently: each rank's items form one sequence over both passes, and
// only the last pass's done item ends it.
func TestPassesOfSeveralRanks(t *testing.T) {
	job := "j"
	m := &localPublisher{p: profile.New(job)}
	pp := &passPublisher{next: m}
	for pass := 0; pass < 2; pass++ {
		pp.startPass(pass == 1, false)
		var wg sync.WaitGroup
		for r := int32(0); r < 2; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := uint32(0); seq <= uint32(r)+1; seq++ { // rank r: r+1 data items, then done
					it := profile.New(job)
					done := seq == uint32(r)+1
					it.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"})
					if err := it.AsItem(r, seq); err != nil {
						t.Error(err)
						return
					}
					if done {
						it.Rank(r).Batches = int64(seq)
					}
					if err := pp.Publish(context.Background(), it, done); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
	}
	for r := int32(0); r < 2; r++ {
		want := 2 * (int(r) + 2) // both passes' items, done items included
		if got := int(m.p.Items[r].GetCardinality()); got != want || !m.p.Sealed(r) || m.p.Ranks[r].Batches != int64(want-1) {
			t.Errorf("rank %d: %d items (want %d), sealed %v, batches %d", r, got, want, m.p.Sealed(r), m.p.Ranks[r].Batches)
		}
	}
}
