package reducer

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// leaf is the role of a node whose inputs are its ranks' batches: it
// merges each item as its last chunk arrives, seals its ranks, and purges
// merged batches from the input stream once a partial covering them is
// stored.
type leaf struct {
	*node
	mine     map[int32]bool
	state    *profile.Profile
	asm      map[itemKey]*assembly // multi-chunk items being assembled
	finished map[int32]bool
	batches  uint64 // batch items merged (restored + this run)
	bytesIn  uint64
	// per rank: the highest acknowledged stream sequence, what is purged,
	// bytes acknowledged since the last purge
	ackedUpTo  map[int32]uint64
	purgedUpTo map[int32]uint64
	ackedBytes map[int32]int
	purgedDone map[int32]bool
	purgeAt    int // purgeBytes
}

type itemKey struct {
	rank int32
	seq  uint32
}

func newLeaf(n *node) *leaf {
	l := &leaf{node: n, mine: map[int32]bool{}, state: profile.New(n.cfg.Job), asm: map[itemKey]*assembly{}, finished: map[int32]bool{},
		ackedUpTo: map[int32]uint64{}, purgedUpTo: map[int32]uint64{}, ackedBytes: map[int32]int{}, purgedDone: map[int32]bool{}}
	for _, r := range n.spec.Ranks {
		l.mine[r] = true
	}
	return l
}

// open: a leaf's inputs are in the job's input stream.
func (l *leaf) open(ctx context.Context) error {
	var err error
	if l.stream, err = l.cfg.Conn.Stream(ctx, l.cfg.Job); err != nil {
		return err
	}
	l.purgeAt = l.purgeBytes()
	return nil
}

func (l *leaf) inputs() ([]string, bool) {
	var filters []string
	for _, r := range l.spec.Ranks {
		filters = append(filters, broker.BatchSubject(l.cfg.Job, r), broker.DoneSubject(l.cfg.Job, r))
	}
	return append(filters, broker.EndSubject(l.cfg.Job)), true
}

// resume restores the leaf's merged state from its own partial.
func (l *leaf) resume(ctx context.Context, a *partialAsm) (*NodeResult, error) {
	p, err := l.decodeOwn(a)
	if err != nil {
		// Start over from the inputs: acknowledged ones may be gone, so
		// say so loudly; the rank timeout names what is missing.
		l.log.Error("reducer: own last partial unreadable; starting from the inputs still in the stream", "version", a.h.PVer, "err", err)
		return nil, nil
	}
	for r := range p.Items {
		if !l.mine[r] {
			return nil, fmt.Errorf("reducer: node %v: own partial version %d holds rank %d, which is not below this node (was the plan changed?)", l.spec.Name, a.h.PVer, r)
		}
	}
	l.state = p
	l.stats.Restored = true
	l.clock = unixTime(a.h.Clock)
	l.lastDone = unixTime(a.h.LastDone)
	l.batches, l.bytesIn = a.h.Batches, a.h.BytesIn
	for _, r := range l.spec.Ranks {
		if p.RankFinished(r) {
			l.finished[r] = true
			l.count(func(c *counters) { c.ranksDone.Add(1) })
			if p.Ranks[r].Incomplete != "" {
				l.count(func(c *counters) { c.incomplete.Add(1) })
			}
		}
	}
	l.count(func(c *counters) { c.batches.Add(l.batches); c.bytesIn.Add(l.bytesIn) })
	l.log.Info("reducer: resumed from own partial", "version", a.h.PVer, "items", p.MergedItems(), "ranks_finished", len(l.finished))
	if a.h.finished() {
		if l.spec.Root {
			p, err := l.finishRoot(ctx, nil)
			return &NodeResult{Stats: l.stats, Profile: p}, err
		}
		l.stats.Finish = time.Now()
		return &NodeResult{Stats: l.stats}, nil
	}
	return nil, nil
}

func (l *leaf) arrived(data []byte) {
	l.bytesIn += uint64(len(data))
	l.count(func(c *counters) { c.bytesIn.Add(uint64(len(data))); c.msgs.Add(1) })
}

// accept merges one batch chunk; an item merges when its last chunk came.
func (l *leaf) accept(m jetstream.Msg, md *jetstream.MsgMetadata, subj broker.Subject, data []byte) {
	seq := md.Sequence.Stream
	r := subj.Rank
	if (subj.Kind != broker.SubjectBatch && subj.Kind != broker.SubjectDone) || !l.mine[r] {
		l.reject(m, seq, r, -1, "not an input of this node")
		return
	}
	h, err := profile.ParseHeader(data)
	if err != nil {
		l.reject(m, seq, r, -1, err.Error())
		return
	}
	done := h.Flags&profile.FlagDone != 0
	switch {
	case h.Job != l.cfg.Job:
		l.reject(m, seq, h.Rank, int64(h.Seq), fmt.Sprintf("batch of job %q", h.Job))
		return
	case h.Rank != r:
		l.reject(m, seq, h.Rank, int64(h.Seq), fmt.Sprintf("header names rank %d on the subject of rank %d", h.Rank, r))
		return
	case done != (subj.Kind == broker.SubjectDone):
		l.reject(m, seq, r, int64(h.Seq), "done flag does not match the subject")
		return
	}
	if b := l.state.Items[r]; b != nil && b.Contains(h.Seq) {
		l.stats.Duplicates++
		l.log.Debug("reducer: batch already merged; ignored (redelivered or replayed)", "rank", r, "seq", h.Seq, "stream_seq", seq)
		l.deferAck(m, r, seq)
		return
	}
	if l.finished[r] {
		l.stats.Duplicates++
		l.log.Warn("reducer: batch of a rank already sealed ignored (late)", "rank", r, "seq", h.Seq, "stream_seq", seq)
		l.deferAck(m, r, seq)
		return
	}
	if ri := l.state.Ranks[r]; ri != nil && ri.Batches >= 0 {
		if !done && int64(h.Seq) >= ri.Batches {
			l.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("sequence beyond the rank's %d batches", ri.Batches))
			return
		}
		if done {
			l.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("second done item (the first said %d batches)", ri.Batches))
			return
		}
	}
	if done {
		if b := l.state.Items[r]; b != nil && !b.IsEmpty() && int64(b.Maximum()) >= int64(h.Seq) {
			l.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("done item says %d batches but batch %d was merged", h.Seq, b.Maximum()))
			return
		}
	}
	item, msgs := l.assemble(m, seq, r, h)
	if item == nil {
		return
	}
	t0 := time.Now()
	err = l.state.Merge(item)
	l.stats.MergeTime += time.Since(t0)
	if err != nil {
		l.stats.Rejected++
		l.log.Warn("reducer: batch not merged", "rank", r, "seq", h.Seq, "stream_seq", seq, "err", err)
		for _, mm := range msgs {
			l.deferAck(mm, r, seq)
		}
		return
	}
	l.dirty = true
	for _, mm := range msgs {
		mmd, _ := mm.Metadata()
		s := seq
		if mmd != nil {
			s = mmd.Sequence.Stream
		}
		l.deferAck(mm, r, s)
	}
	l.stats.ItemsMerged++
	l.batches++
	l.count(func(c *counters) { c.batches.Add(1) })
	if done {
		if md.Timestamp.After(l.lastDone) {
			l.lastDone = md.Timestamp
		}
		l.startClock(md.Timestamp, fmt.Sprintf("done item of rank %d", r))
	}
	if l.state.Sealed(r) {
		l.finished[r] = true
		l.count(func(c *counters) { c.ranksDone.Add(1) })
	}
}

// assemble adds a chunk of item (r, h.Seq); once the item is complete it
// returns it with the messages that brought it. An item that does not
// decode is rejected whole.
func (l *leaf) assemble(m jetstream.Msg, seq uint64, r int32, h *profile.Header) (*profile.Profile, []jetstream.Msg) {
	k := itemKey{r, h.Seq}
	a := &assembly{}
	if h.Chunks > 1 {
		if a = l.asm[k]; a == nil {
			a = &assembly{}
			l.asm[k] = a
		}
	}
	complete, err := a.Add(&h.Envelope, m.Data())
	if err != nil {
		l.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("chunk %d/%d does not fit the item being assembled (checksum or size differs)", h.Chunk+1, h.Chunks))
		return nil, nil
	}
	// A chunk again (a redelivery) stays with the item too.
	a.msgs = append(a.msgs, m)
	if !complete {
		return nil, nil
	}
	delete(l.asm, k)
	item, err := profile.DecodeAssembled(h, &a.Assembler)
	if err != nil {
		l.stats.Rejected++
		l.log.Warn("reducer: batch rejected", "rank", r, "seq", h.Seq, "stream_seq", seq, "err", err)
		for _, mm := range a.msgs {
			l.deferAck(mm, r, seq)
		}
		return nil, nil
	}
	return item, a.msgs
}

func (l *leaf) complete() bool { return len(l.finished) == len(l.spec.Ranks) }

func (l *leaf) overdue(now time.Time) bool {
	return !l.clock.IsZero() && now.Sub(l.clock) > l.timeout()
}

// expire seals the leaf's unfinished ranks as incomplete.
func (l *leaf) expire() {
	var open []int32
	for _, r := range l.spec.Ranks {
		if !l.finished[r] {
			open = append(open, r)
		}
	}
	sealed := l.state.SealRanks(open, l.leafReason)
	for _, r := range sealed {
		l.finished[r] = true
		l.log.Warn("reducer: rank sealed as incomplete", "rank", r, "reason", l.state.Ranks[r].Incomplete)
	}
	l.stats.Incomplete = append(l.stats.Incomplete, sealed...)
	l.count(func(c *counters) { c.ranksDone.Add(int64(len(sealed))); c.incomplete.Add(int64(len(sealed))) })
	// Chunks of items that never completed: nothing to merge.
	keys := make([]itemKey, 0, len(l.asm))
	for k := range l.asm {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].rank < keys[j].rank || keys[i].rank == keys[j].rank && keys[i].seq < keys[j].seq
	})
	for _, k := range keys {
		pi := l.asm[k]
		l.log.Warn("reducer: batch incomplete at the rank timeout; not merged", "rank", k.rank, "seq", k.seq, "chunks", pi.Have(), "of", pi.Envelope().Chunks)
		for _, m := range pi.msgs {
			l.deferAck(m, -1, 0)
		}
		delete(l.asm, k)
	}
}

// leafReason says why rank r is incomplete at the deadline.
func (l *leaf) leafReason(r int32) string {
	b := l.state.Items[r]
	ri := l.state.Ranks[r]
	switch {
	case b == nil || b.IsEmpty():
		return "rank timeout: no data"
	case ri == nil || ri.Batches < 0:
		return fmt.Sprintf("rank timeout: no done item (%d batches merged)", b.GetCardinality())
	default:
		var miss []string
		for s := int64(0); s < ri.Batches && len(miss) < 8; s++ {
			if !b.Contains(uint32(s)) {
				miss = append(miss, fmt.Sprint(s))
			}
		}
		return fmt.Sprintf("rank timeout: batches missing (%d of %d merged; first missing %s)", b.GetCardinality()-1, ri.Batches, strings.Join(miss, ","))
	}
}

func (l *leaf) snapshot() *profile.Profile { return l.state }

func (l *leaf) below() (uint64, uint64) { return l.batches, l.bytesIn }

func (l *leaf) view(pr *Progress) {
	pr.RanksDone = len(l.finished)
	pr.BatchesMerged, pr.BytesIn = l.batches, l.bytesIn
	pr.RanksIncomplete = len(l.stats.Incomplete)
}

func (l *leaf) published() {
	if !l.cfg.KeepInputs {
		l.purge()
	}
}

func (l *leaf) acked(m jetstream.Msg, r int32, seq uint64) {
	l.ackedUpTo[r] = max(l.ackedUpTo[r], seq)
	l.ackedBytes[r] += len(m.Data())
}

// purgeEvery: a running rank's merged batches are purged once this many
// bytes of them are acknowledged (a finished rank's at once), which keeps
// purge requests few while bounding what a full stream holds. A small
// input stream lowers it (purgeBytes), or ranks whose merged batches wait
// below it could fill the stream and hold their publishers forever.
const purgeEvery = 8 << 20

// purgeBytes is a leaf's purge threshold: purgeEvery, or an eighth of the
// input stream's share per rank if that is less.
func (l *leaf) purgeBytes() int {
	lim := purgeEvery
	if info := l.stream.CachedInfo(); info != nil && info.Config.MaxBytes > 0 && l.cfg.Tree != nil && len(l.cfg.Tree.Ranks) > 0 {
		lim = min(lim, int(max(info.Config.MaxBytes/int64(8*len(l.cfg.Tree.Ranks)), 1)))
	}
	return lim
}

// purge drops a leaf's merged batches from the stream: for each rank, every
// message below the lowest one still unacknowledged (held by an item being
// assembled) is in a stored partial.
func (l *leaf) purge() {
	hold := map[int32]uint64{}
	for _, pi := range l.asm {
		for _, m := range pi.msgs {
			if md, err := m.Metadata(); err == nil {
				r := itemRank(m)
				if h, ok := hold[r]; !ok || md.Sequence.Stream < h {
					hold[r] = md.Sequence.Stream
				}
			}
		}
	}
	for _, r := range l.spec.Ranks {
		upTo := l.ackedUpTo[r] + 1
		if h, ok := hold[r]; ok && h < upTo {
			upTo = h
		}
		due := l.finished[r] && !l.purgedDone[r] || l.ackedBytes[r] >= l.purgeAt
		if !due || upTo <= l.purgedUpTo[r]+1 || upTo <= 1 {
			continue
		}
		l.ackedBytes[r] = 0
		l.purgedDone[r] = l.finished[r]
		subjects := []string{broker.BatchSubject(l.cfg.Job, r)}
		if l.finished[r] {
			subjects = append(subjects, broker.DoneSubject(l.cfg.Job, r))
		}
		for _, s := range subjects {
			l.housekeep(func(ctx context.Context) {
				if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(s), jetstream.WithPurgeSequence(upTo)); err != nil {
					l.log.Debug("reducer: purge of merged batches failed (they stay in the stream)", "subject", s, "err", err)
				}
			})
		}
		l.purgedUpTo[r] = upTo - 1
	}
}

func itemRank(m jetstream.Msg) int32 {
	s, err := broker.ParseSubject(m.Subject())
	if err != nil {
		return -1
	}
	return s.Rank
}
