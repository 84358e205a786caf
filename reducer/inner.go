package reducer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// inner is the role of a node whose inputs are its children's partials:
// it keeps the latest complete version of each and its state is their
// merge, computed when it publishes.
type inner struct {
	*node
	child    map[NodeName]int // child name -> index in spec.Children
	latest   []*childPartial
	heard    []time.Time   // when each child's latest version arrived
	building []*partialAsm // each child's version being assembled
	timedOut bool
}

// childPartial is the latest complete partial of a child.
type childPartial struct {
	h       *partialHeader
	body    []byte // compressed, until decoded
	decoded *profile.Profile
	msgs    []jetstream.Msg // unacknowledged until this node's next durable publish
	// An early decode running beside the loop (closed when done).
	decoding  chan struct{}
	early     *profile.Profile
	earlyErr  error
	earlyTime time.Duration
}

func newInner(n *node) *inner {
	in := &inner{node: n, child: map[NodeName]int{}, latest: make([]*childPartial, len(n.spec.Children)),
		heard: make([]time.Time, len(n.spec.Children)), building: make([]*partialAsm, len(n.spec.Children))}
	for i, c := range n.spec.Children {
		in.child[c] = i
	}
	return in
}

// inputs: the children's subjects, replayed from the start (they hold
// only each child's latest partial).
func (in *inner) inputs() ([]string, bool) {
	var filters []string
	for _, c := range in.spec.Children {
		filters = append(filters, broker.PartialSubject(in.cfg.Job, c.Level, c.Index))
	}
	return append(filters, broker.TreeEndSubject(in.cfg.Job)), false
}

// resume: an inner node's state is a function of its children's latest
// partials, which stay in the stream until superseded; only a finished
// node (not the root, which publishes the final) has nothing left to do.
func (in *inner) resume(ctx context.Context, a *partialAsm) (*NodeResult, error) {
	if a.h.finished() && !in.spec.Root {
		in.stats.Restored = true
		in.stats.Finish = time.Now()
		in.stats.LastDone = unixTime(a.h.LastDone)
		return &NodeResult{Stats: in.stats}, nil
	}
	return nil, nil
}

func (in *inner) open(context.Context) error { return nil }

func (in *inner) arrived([]byte) {}

// accept records a child's partial chunk; a complete version replaces the
// child's previous one.
func (in *inner) accept(m jetstream.Msg, md *jetstream.MsgMetadata, subj broker.Subject, data []byte) {
	seq := md.Sequence.Stream
	ci, ok := in.child[NodeName{subj.Level, subj.Node}]
	if subj.Kind != broker.SubjectPartial || !ok {
		in.reject(m, seq, -1, -1, "not an input of this node")
		return
	}
	h, err := parsePartialHeader(data)
	if err != nil {
		in.reject(m, seq, -1, -1, err.Error())
		return
	}
	if h.Job != in.cfg.Job || int(h.Level) != subj.Level || int(h.Node) != subj.Node || h.Flags&flagFinal != 0 {
		in.reject(m, seq, -1, -1, fmt.Sprintf("partial header (job %q, node %d.%d) does not match its subject", h.Job, h.Level, h.Node))
		return
	}
	if cur := in.latest[ci]; cur != nil && (h.PVer < cur.h.PVer || h.PVer == cur.h.PVer && h.Sum == cur.h.Sum) {
		in.stats.Duplicates++
		in.ack(m, -1, seq) // superseded: the child's later version is held
		return
	}
	a := in.building[ci]
	if a != nil && (a.h.PVer != h.PVer || a.h.Sum != h.Sum) {
		if h.PVer < a.h.PVer {
			in.stats.Duplicates++
			in.ack(m, -1, seq)
			return
		}
		// A newer version started: the one being assembled is superseded
		// (the child deletes it once the newer one is stored).
		for _, mm := range a.msgs {
			in.ack(mm, -1, 0)
		}
		a = nil
	}
	if a == nil {
		a = newPartialAsm(h)
		in.building[ci] = a
	}
	complete, err := a.add(h, data, seq)
	if err != nil {
		in.reject(m, seq, -1, -1, err.Error())
		return
	}
	a.msgs = append(a.msgs, m)
	if !complete {
		return
	}
	msgs := a.msgs
	in.building[ci] = nil
	body, err := a.body()
	if err != nil {
		in.stats.Rejected++
		in.log.Warn("reducer: partial rejected", "child", in.spec.Children[ci].String(), "version", h.PVer, "err", err)
		for _, mm := range msgs {
			in.ack(mm, -1, 0)
		}
		return
	}
	if old := in.latest[ci]; old != nil {
		for _, mm := range old.msgs {
			in.ack(mm, -1, 0)
		}
	}
	in.latest[ci] = &childPartial{h: a.h, body: body, msgs: msgs}
	in.heard[ci] = time.Now()
	if a.h.finished() {
		// A child's last partial: decode it now, beside the loop, while
		// other children still work, rather than on the critical path at
		// the end; children finishing together decode in parallel.
		c := in.latest[ci]
		c.decoding = make(chan struct{})
		go func() {
			defer close(c.decoding)
			t0 := time.Now()
			c.early, c.earlyErr = decodePartial(c.h, c.body)
			c.earlyTime = time.Since(t0)
		}()
	}
	in.dirty = true
	if a.h.Clock != 0 {
		in.startClock(time.Unix(0, a.h.Clock), "child "+in.spec.Children[ci].String())
	}
	if t := unixTime(a.h.LastDone); t.After(in.lastDone) {
		in.lastDone = t
	}
}

func (in *inner) complete() bool {
	for _, c := range in.latest {
		if c == nil || !c.h.finished() {
			return false
		}
	}
	return true
}

// overdue: an inner node gives up on an unfinished child only when the
// child's own deadline (from the clock its partials carry) is past by
// ChildGrace and it has been silent for ChildGrace: a child working
// through a backlog publishes every PartialInterval and is waited for.
func (in *inner) overdue(now time.Time) bool {
	for i, c := range in.latest {
		if c != nil && c.h.finished() {
			continue
		}
		clock := in.clock
		if c != nil && c.h.Clock != 0 {
			clock = time.Unix(0, c.h.Clock)
		}
		if clock.IsZero() || now.Sub(clock) <= in.timeout() {
			return false
		}
		// A child not heard from yet gets ChildGrace from this node's start.
		heard := in.heard[i]
		if heard.IsZero() {
			heard = in.stats.Start
		}
		if now.Sub(heard) <= in.cfg.ChildGrace {
			return false
		}
	}
	return true
}

// expire gives up on unfinished children: their ranks are sealed in the
// merge (merged).
func (in *inner) expire() { in.timedOut = true }

func (in *inner) snapshot() *profile.Profile { return in.merged() }

func (in *inner) below() (batches, bytesIn uint64) {
	for _, c := range in.latest {
		if c != nil {
			batches += c.h.Batches
			bytesIn += c.h.BytesIn
		}
	}
	return batches, bytesIn
}

func (in *inner) view(pr *Progress) {
	for _, c := range in.latest {
		if c != nil {
			pr.RanksDone += int(c.h.Sealed)
			pr.BatchesMerged += c.h.Batches
			pr.BytesIn += c.h.BytesIn
		}
	}
}

// published: the children's partials the new version covers can go.
func (in *inner) published() {
	for _, c := range in.latest {
		if c != nil {
			for _, m := range c.msgs {
				in.ack(m, -1, 0)
			}
			c.msgs = nil
		}
	}
}

func (in *inner) acked(jetstream.Msg, int32, uint64) {}

// merged is an inner node's current state: the merge of its children's
// latest partials, with the ranks of unfinished children sealed as
// incomplete after the deadline.
func (in *inner) merged() *profile.Profile {
	for i := range in.latest {
		in.decodeChild(i)
	}
	t0 := time.Now()
	defer func() { in.stats.MergeTime += time.Since(t0) }()
	parts := make([]*profile.Profile, len(in.latest))
	for i, c := range in.latest {
		if c != nil {
			parts[i] = c.decoded
		}
	}
	// MergeAll: as merging the children one by one, with the tables merged
	// in parallel (this merge is on the tail's critical path).
	p := profile.NewSized(in.cfg.Job, parts...)
	errs := p.MergeAll(parts)
	for i, c := range in.latest {
		if c == nil {
			continue
		}
		if err := errs[i]; err != nil {
			in.log.Error("reducer: child partial not merged", "child", in.spec.Children[i].String(), "version", c.h.PVer, "err", err)
		}
		// Ranks the child sealed with no data at all hold no item, which
		// Merge (a no-op for a profile without items) would drop.
		for _, r := range c.decoded.SortedRanks() {
			if b := c.decoded.Items[r]; (b == nil || b.IsEmpty()) && c.decoded.Ranks[r].Incomplete != "" {
				reason := c.decoded.Ranks[r].Incomplete
				p.SealRanks([]int32{r}, func(int32) string { return reason })
			}
		}
	}
	if in.timedOut {
		var open []int32
		for i, c := range in.latest {
			if c != nil && c.h.finished() {
				continue
			}
			ch, _ := in.cfg.Tree.Node(in.spec.Children[i])
			open = append(open, ch.Ranks...)
		}
		sealed := p.SealRanks(open, func(r int32) string {
			return fmt.Sprintf("reducer node %v did not finish", in.childOf(r))
		})
		if len(sealed) > 0 && len(in.stats.Incomplete) == 0 {
			in.log.Warn("reducer: ranks of unfinished children sealed as incomplete", "ranks", fmt.Sprint(sealed))
			in.stats.Incomplete = sealed
			in.count(func(c *counters) { c.ranksDone.Add(int64(len(sealed))); c.incomplete.Add(int64(len(sealed))) })
		}
	}
	return p
}

// decodeChild decodes child i's latest partial once; an unreadable one is
// dropped (the child's ranks then count as missing unless a later version
// comes).
func (in *inner) decodeChild(i int) {
	c := in.latest[i]
	if c == nil || c.decoded != nil {
		return
	}
	var q *profile.Profile
	var err error
	if c.decoding != nil {
		<-c.decoding
		q, err = c.early, c.earlyErr
		in.stats.DecodeTime += c.earlyTime
	} else {
		t0 := time.Now()
		q, err = decodePartial(c.h, c.body)
		in.stats.DecodeTime += time.Since(t0)
	}
	if err == nil {
		err = in.checkChildRanks(i, q)
	}
	if err != nil {
		in.stats.Rejected++
		in.log.Error("reducer: child partial unreadable; its ranks count as missing", "child", in.spec.Children[i].String(), "version", c.h.PVer, "err", err)
		in.latest[i] = nil
		return
	}
	c.decoded, c.body = q, nil
}

func (in *inner) childOf(r int32) NodeName {
	for _, c := range in.spec.Children {
		ch, _ := in.cfg.Tree.Node(c)
		for _, x := range ch.Ranks {
			if x == r {
				return c
			}
		}
	}
	return NodeName{}
}

// checkChildRanks refuses a partial that claims ranks its child does not
// own (a plan mismatch, or a forged partial).
func (in *inner) checkChildRanks(i int, p *profile.Profile) error {
	ch, err := in.cfg.Tree.Node(in.spec.Children[i])
	if err != nil {
		return err
	}
	own := map[int32]bool{}
	for _, r := range ch.Ranks {
		own[r] = true
	}
	for r := range p.Ranks {
		if !own[r] {
			return fmt.Errorf("holds rank %d, which is not below child %v", r, ch.Name)
		}
	}
	return nil
}
