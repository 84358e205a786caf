package main

import (
	"context"
	"fmt"
	"os"

	"github.com/RoaringBitmap/roaring/v2"

	"gpuprof/collector"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// passPublisher publishes the items of several collection passes of one
// rank as one sequence, so the rank's profile is their merge by calling
// context: the Sanitizer and CUPTI cannot share a process, so value tracing
// and PC sampling are separate runs of the application (as GVProf does).
// Every pass's done item but the last becomes a data item (it still carries
// the pass's provenance); the last done item counts all of them.
type passPublisher struct {
	next     collector.Publisher
	offset   uint32 // sequence of the current pass's item 0
	count    uint32 // items published so far
	last     bool   // the current pass is the last
	dropTime bool   // the current pass's kernel times are not to be kept
	// interrupted reports that the current pass was interrupted: it is
	// then the last.
	interrupted func() bool
}

func (pp *passPublisher) startPass(last, dropTime bool) {
	pp.offset, pp.last, pp.dropTime = pp.count, last, dropTime
}

func (pp *passPublisher) Publish(ctx context.Context, item *profile.Profile, done bool) error {
	if len(item.Items) != 1 {
		return fmt.Errorf("passes: item of %d ranks", len(item.Items))
	}
	for r, bm := range item.Items {
		seq := pp.offset + bm.Minimum()
		item.Items[r] = roaring.BitmapOf(seq)
		ri := item.Rank(r)
		switch {
		case done && !pp.last && (pp.interrupted == nil || !pp.interrupted()):
			ri.Batches, done = -1, false
		case done:
			ri.Batches = int64(seq)
		}
		pp.count = seq + 1
	}
	if pp.dropTime {
		// The time and everything derived from it (instance squares and
		// histogram), or the instances would count this pass's launches.
		item.DropMetrics(profile.TimeMetric)
	}
	return pp.next.Publish(ctx, item, done)
}

// streamMode reads the mode from a recorded stream's HELLO.
func streamMode(path string) (rawstream.Mode, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fr, err := rawstream.NewDecoder(f).Next()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	h, ok := fr.(*rawstream.Hello)
	if !ok {
		return 0, fmt.Errorf("%s: stream does not start with HELLO", path)
	}
	return h.Mode, nil
}
