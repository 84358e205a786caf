package main

import (
	"context"
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
