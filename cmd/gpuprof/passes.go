package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"

	"gpuprof/collector"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// passPublisher publishes the items of several collection passes of the
// same ranks as one sequence per rank, so each rank's profile is their
// merge by calling context: the Sanitizer and CUPTI cannot share a
// process, so value tracing and PC sampling are separate runs of the
// application (as GVProf does). Every pass's done item but the last
// becomes a data item (it still carries the pass's provenance); the last
// done item counts all of them. The ranks of one pass publish
// concurrently (one per CUDA process).
type passPublisher struct {
	next collector.Publisher

	mu       sync.Mutex
	offset   map[int32]uint32 // sequence of the current pass's item 0, per rank
	count    map[int32]uint32 // items published so far, per rank
	last     bool             // the current pass is the last
	dropTime bool             // the current pass's kernel times are not to be kept
	// interrupted reports that the current pass was interrupted: it is
	// then the last (set after startPass, before the pass runs).
	interrupted func() bool
}

func (pp *passPublisher) startPass(last, dropTime bool) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.count == nil {
		pp.offset, pp.count = map[int32]uint32{}, map[int32]uint32{}
	}
	for r, n := range pp.count {
		pp.offset[r] = n
	}
	pp.last, pp.dropTime, pp.interrupted = last, dropTime, nil
}

func (pp *passPublisher) Publish(ctx context.Context, item *profile.Profile, done bool) error {
	if len(item.Items) != 1 {
		return fmt.Errorf("passes: item of %d ranks", len(item.Items))
	}
	pp.mu.Lock()
	if pp.count == nil {
		pp.offset, pp.count = map[int32]uint32{}, map[int32]uint32{}
	}
	for r, bm := range item.Items {
		seq := pp.offset[r] + bm.Minimum()
		item.Items[r] = roaring.BitmapOf(seq)
		ri := item.Rank(r)
		switch {
		case done && !pp.last && (pp.interrupted == nil || !pp.interrupted()):
			ri.Batches, done = -1, false
		case done:
			ri.Batches = int64(seq)
		}
		pp.count[r] = seq + 1
	}
	dropTime := pp.dropTime
	pp.mu.Unlock()
	if dropTime {
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
