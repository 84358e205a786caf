package reducer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// Config configures reducer nodes (RunNode) and trees (RunTree).
type Config struct {
	// Job to reduce; its stream must exist (broker.Conn.EnsureStream).
	Job string
	// Conn to the broker.
	Conn *broker.Conn
	// Tree is the plan; every process of one job must use the same plan.
	Tree *Tree
	// Node is the node RunNode runs (ignored by RunTree).
	Node NodeName
	// RankTimeout: how long after a node's clock starts (the first done item
	// it sees, or the launcher's end signal) ranks may still finish; those
	// that have not are sealed as incomplete and named in the profile.
	// Default 60s.
	RankTimeout time.Duration
	// ChildGrace is added per level above the leaves to an inner node's
	// deadline, so that its children can time out their ranks and publish
	// first; past it, an inner node seals the ranks of children that never
	// finished. Default 10s.
	ChildGrace time.Duration
	// PartialInterval: the most often a node publishes its cumulative
	// partial while its inputs run (default 1s); it also publishes at once
	// when it finishes.
	PartialInterval time.Duration
	// MaxAckPending bounds the inputs a node holds unacknowledged (default
	// 8192); it publishes early when half are pending.
	MaxAckPending int
	// AckWait before the broker redelivers an unacknowledged input
	// (default 2m; inputs wait at most about PartialInterval).
	AckWait time.Duration
	// PullBytes bounds the bytes one fetch brings (default 4 MiB, and at
	// least the server's max payload). Nodes
	// sharing a connection share the server's per-client pending limit
	// (64 MiB by default), past which the server cuts the client.
	PullBytes int
	// KeepInputs keeps merged batches in the stream; by default a leaf
	// purges a rank's batches once their merge is durable, so the stream's
	// byte limit bounds only what is not yet merged.
	KeepInputs bool
	// AckTimeout bounds the wait for the broker's acknowledgement of one
	// published chunk before it is published again (default 10s).
	AckTimeout time.Duration
	// Retry is the backoff for transient broker failures (default
	// broker.DefaultRetry).
	Retry broker.RetryPolicy
	// Output: where the root writes the final profile (a file, or a
	// directory to hold profile.FileName); empty: not written.
	Output string
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// OnProgress is called every ProgressInterval (default 500ms) and at
	// the end. RunNode reports the node's view, RunTree the whole tree's.
	OnProgress       func(Progress)
	ProgressInterval time.Duration
	// OnReady, if set, is called once a node is consuming its inputs (tests
	// and benchmarks wait for the whole tree before starting the ranks).
	OnReady func(NodeName)

	counters *counters // shared by a RunTree's nodes
}

func (c Config) withDefaults() Config {
	if c.RankTimeout <= 0 {
		c.RankTimeout = 60 * time.Second
	}
	if c.ChildGrace <= 0 {
		c.ChildGrace = 10 * time.Second
	}
	if c.PartialInterval <= 0 {
		c.PartialInterval = time.Second
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = 8192
	}
	if c.AckWait <= 0 {
		c.AckWait = 2 * time.Minute
	}
	if c.PullBytes <= 0 {
		c.PullBytes = 4 << 20
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 10 * time.Second
	}
	if c.Retry == (broker.RetryPolicy{}) {
		c.Retry = broker.DefaultRetry
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 500 * time.Millisecond
	}
	return c
}

func (c Config) check() error {
	if err := broker.ValidateJob(c.Job); err != nil {
		return err
	}
	if c.Conn == nil {
		return errors.New("reducer: no broker connection")
	}
	if c.Tree == nil {
		return errors.New("reducer: no plan")
	}
	return nil
}

// Progress is what a progress display shows.
type Progress struct {
	RanksTotal      int
	RanksDone       int // sealed (complete or incomplete)
	RanksIncomplete int
	BatchesMerged   uint64 // batch items merged (data and done items)
	BytesIn         uint64 // batch bytes consumed by the leaves
	Elapsed         time.Duration
}

// NodeStats is what one node did.
type NodeStats struct {
	Node     NodeName
	Start    time.Time
	Finish   time.Time
	Restored bool // the node resumed from its own last partial (or the final)
	// Leaves: batch items merged, bytes of batch messages consumed.
	ItemsMerged uint64
	BytesIn     uint64
	MsgsIn      uint64
	Duplicates  uint64 // inputs that changed nothing (redelivered, replayed)
	Rejected    uint64 // inputs refused (corrupt, wrong job or rank, ...)
	// Partials published (for the root, the final) and their bytes.
	PartialsOut uint64
	BytesOut    uint64
	MergeTime   time.Duration // merging
	DecodeTime  time.Duration // decoding children's partials (inner nodes)
	EncodeTime  time.Duration // encoding and compressing partials
	PublishTime time.Duration // waiting for partials to be stored
	// LastDone is the broker time of the latest done item below the node.
	LastDone time.Time
	// Incomplete lists the ranks this node sealed as incomplete.
	Incomplete []int32
}

// NodeResult is a finished node's outcome.
type NodeResult struct {
	Stats NodeStats
	// Profile is the final profile (root only).
	Profile *profile.Profile
}

// counters aggregate a tree's progress across its nodes.
type counters struct {
	ranksDone, incomplete  atomic.Int64
	batches, bytesIn, msgs atomic.Uint64
}

// RunNode runs node cfg.Node of cfg.Tree until it finishes (every rank
// below it sealed, or its deadline passed) and returns its stats; the root
// returns the final profile too. When ctx ends first it stops at once
// without acknowledging anything, as a killed process would: a later
// RunNode of the same node resumes from the broker and gives the same
// result.
func RunNode(ctx context.Context, cfg Config) (*NodeResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	spec, err := cfg.Tree.Node(cfg.Node)
	if err != nil {
		return nil, err
	}
	// A message larger than a fetch's byte bound is never delivered (the
	// server ends the fetch with a 409 and the node would pull forever):
	// every fetch must hold the largest message, with its subject and reply.
	if mp := cfg.Conn.MaxPayload() + 4096; cfg.PullBytes < mp {
		cfg.PullBytes = mp
	}
	n := &node{cfg: cfg, spec: spec, log: cfg.Logger.With("job", cfg.Job, "node", spec.Name.String())}
	return n.run(ctx)
}

type itemKey struct {
	rank int32
	seq  uint32
}

// pendingItem is a multi-chunk batch being assembled; its messages stay
// unacknowledged until the item is merged and durable.
type pendingItem struct {
	asm    profile.Assembler
	h0     *profile.Header // the first chunk's header
	chunks map[uint16]bool
	msgs   []jetstream.Msg
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

type deferredAck struct {
	m    jetstream.Msg
	rank int32 // batch inputs: the rank (for purging), else -1
	seq  uint64
}

type node struct {
	cfg  Config
	spec *Node
	log  *slog.Logger
	js   jetstream.JetStream
	// stream holds the node's inputs: the input stream for a leaf, the
	// tree stream for an inner node; tree holds its own partials.
	stream, tree jetstream.Stream
	stats        NodeStats

	mine map[int32]bool
	// Leaves.
	state    *profile.Profile
	asm      map[itemKey]*pendingItem
	finished map[int32]bool
	// Inner nodes.
	child     map[NodeName]int // child name -> index in spec.Children
	latest    []*childPartial
	heard     []time.Time // when each child's latest version arrived
	building  []*partialAsm
	buildMsgs [][]jetstream.Msg
	timedOut  bool

	dirty       bool
	deferred    []deferredAck
	pver        uint64
	hk          chan func(context.Context) // housekeeping: deletions off the merge path
	clock       time.Time
	lastDone    time.Time
	lastPublish time.Time
	publishCost time.Duration // of the last partial: merging (inner nodes), encoding and storing
	pending     uint64        // inputs the consumer has not yet delivered
	batches     uint64        // batch items merged below (restored + this run)
	bytesIn     uint64
	ackedUpTo   map[int32]uint64 // leaves: highest acknowledged stream sequence per rank
	purgedUpTo  map[int32]uint64
	ackedBytes  map[int32]int // acknowledged since the rank's last purge
	purgedDone  map[int32]bool
	purgeAt     int // purgeBytes
}

func (n *node) run(ctx context.Context) (*NodeResult, error) {
	n.stats = NodeStats{Node: n.spec.Name, Start: time.Now()}
	n.mine = map[int32]bool{}
	for _, r := range n.spec.Ranks {
		n.mine[r] = true
	}
	var err error
	if n.js, err = n.cfg.Conn.NewJetStream(n.cfg.AckTimeout); err != nil {
		return nil, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
	}
	if n.tree, err = n.cfg.Conn.TreeStream(ctx, n.cfg.Job); err != nil {
		return nil, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
	}
	n.stream = n.tree
	if n.spec.Leaf() {
		if n.stream, err = n.cfg.Conn.Stream(ctx, n.cfg.Job); err != nil {
			return nil, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
		}
		n.purgeAt = n.purgeBytes()
		n.state = profile.New(n.cfg.Job)
		n.asm = map[itemKey]*pendingItem{}
		n.finished = map[int32]bool{}
		n.ackedUpTo = map[int32]uint64{}
		n.purgedUpTo = map[int32]uint64{}
		n.ackedBytes = map[int32]int{}
		n.purgedDone = map[int32]bool{}
	} else {
		n.child = map[NodeName]int{}
		for i, c := range n.spec.Children {
			n.child[c] = i
		}
		n.latest = make([]*childPartial, len(n.spec.Children))
		n.heard = make([]time.Time, len(n.spec.Children))
		n.building = make([]*partialAsm, len(n.spec.Children))
		n.buildMsgs = make([][]jetstream.Msg, len(n.spec.Children))
	}
	stopHK := n.startHousekeeping()
	res, err := n.restore(ctx)
	if err == nil && res == nil {
		var cons jetstream.Consumer
		if cons, err = n.consumer(ctx); err == nil {
			res, err = n.loop(ctx, cons)
		}
	}
	// A finished node lets its last deletions through; a killed one
	// leaves them.
	wait := 2 * time.Second
	if err != nil {
		wait = 0
	}
	stopHK(wait)
	return res, err
}

// restore resumes from what the node already made durable: the root's
// published final (then there is nothing left to do), or a node's own
// latest complete partial. Inner nodes rebuild their state from their
// children's partials, which the consumer replays.
func (n *node) restore(ctx context.Context) (*NodeResult, error) {
	if n.spec.Root {
		msgs, err := n.scan(ctx, broker.FinalSubject(n.cfg.Job))
		if err != nil {
			return nil, err
		}
		if a, _, _ := latestComplete(msgs); a != nil {
			p, err := n.decodeOwn(a)
			if err != nil {
				n.log.Warn("reducer: ignoring an unreadable final profile in the stream", "err", err)
			} else {
				n.log.Info("reducer: the final profile was already published", "version", a.h.PVer)
				n.stats.Restored = true
				n.stats.Finish = time.Now()
				n.stats.LastDone = unixTime(a.h.LastDone)
				return &NodeResult{Stats: n.stats, Profile: p}, n.write(p)
			}
		}
	}
	subj := broker.PartialSubject(n.cfg.Job, n.spec.Name.Level, n.spec.Name.Index)
	msgs, err := n.scan(ctx, subj)
	if err != nil {
		return nil, err
	}
	a, _, maxPVer := latestComplete(msgs)
	if len(msgs) > 0 {
		n.pver = maxPVer + 1
	}
	if a == nil {
		return nil, nil
	}
	if !n.spec.Leaf() {
		if a.h.finished() && !n.spec.Root {
			n.stats.Restored = true
			n.stats.Finish = time.Now()
			n.stats.LastDone = unixTime(a.h.LastDone)
			return &NodeResult{Stats: n.stats}, nil
		}
		// An inner node's state is a function of its children's latest
		// partials, which stay in the stream until superseded.
		return nil, nil
	}
	p, err := n.decodeOwn(a)
	if err != nil {
		// Start over from the inputs: acknowledged ones may be gone, so
		// say so loudly; the rank timeout names what is missing.
		n.log.Error("reducer: own last partial unreadable; starting from the inputs still in the stream", "version", a.h.PVer, "err", err)
		return nil, nil
	}
	for r := range p.Items {
		if !n.mine[r] {
			return nil, fmt.Errorf("reducer: node %v: own partial version %d holds rank %d, which is not below this node (was the plan changed?)", n.spec.Name, a.h.PVer, r)
		}
	}
	n.state = p
	n.stats.Restored = true
	n.clock = unixTime(a.h.Clock)
	n.lastDone = unixTime(a.h.LastDone)
	n.batches, n.bytesIn = a.h.Batches, a.h.BytesIn
	for _, r := range n.spec.Ranks {
		if p.RankFinished(r) {
			n.finished[r] = true
			n.count(func(c *counters) { c.ranksDone.Add(1) })
			if p.Ranks[r].Incomplete != "" {
				n.count(func(c *counters) { c.incomplete.Add(1) })
			}
		}
	}
	n.count(func(c *counters) { c.batches.Add(n.batches); c.bytesIn.Add(n.bytesIn) })
	n.log.Info("reducer: resumed from own partial", "version", a.h.PVer, "items", p.MergedItems(), "ranks_finished", len(n.finished))
	if a.h.finished() {
		if n.spec.Root {
			p, err := n.finishRoot(ctx, nil)
			return &NodeResult{Stats: n.stats, Profile: p}, err
		}
		n.stats.Finish = time.Now()
		return &NodeResult{Stats: n.stats}, nil
	}
	return nil, nil
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (n *node) decodeOwn(a *partialAsm) (*profile.Profile, error) {
	body, err := a.body()
	if err != nil {
		return nil, err
	}
	if a.h.Job != n.cfg.Job {
		return nil, &PartialError{int(a.h.Level), int(a.h.Node), a.h.PVer, 0, fmt.Sprintf("job %q, want %q", a.h.Job, n.cfg.Job)}
	}
	return decodePartial(a.h, body)
}

type scanned struct {
	data []byte
	seq  uint64
}

// scan reads every message now on subj (a node's own partials: one or two
// versions, since superseded ones are deleted).
func (n *node) scan(ctx context.Context, subj string) ([]scanned, error) {
	var last *jetstream.RawStreamMsg
	err := broker.Retry(ctx, n.cfg.Retry, func() error {
		var err error
		last, err = n.tree.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			last, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reducer: node %v: reading %s: %w", n.spec.Name, subj, err)
	}
	if last == nil {
		return nil, nil
	}
	var out []scanned
	err = broker.Retry(ctx, n.cfg.Retry, func() error {
		out = out[:0]
		oc, err := n.tree.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}, DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			return err
		}
		for {
			b, err := oc.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return err
			}
			got := 0
			for m := range b.Messages() {
				got++
				md, err := m.Metadata()
				if err != nil {
					continue
				}
				out = append(out, scanned{m.Data(), md.Sequence.Stream})
				if md.Sequence.Stream >= last.Sequence {
					return nil
				}
			}
			if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
				return err
			}
			if got == 0 {
				return fmt.Errorf("%w: %s ended before sequence %d", nats.ErrTimeout, subj, last.Sequence)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reducer: node %v: reading %s: %w", n.spec.Name, subj, err)
	}
	return out, nil
}

// latestComplete picks the highest complete version among a node's
// partial chunks; the others' sequences are stale.
func latestComplete(msgs []scanned) (best *partialAsm, stale []uint64, maxPVer uint64) {
	type key struct {
		pver, sum uint64
	}
	groups := map[key]*partialAsm{}
	var order []key
	for _, m := range msgs {
		h, err := parsePartialHeader(m.data)
		if err != nil {
			stale = append(stale, m.seq)
			continue
		}
		maxPVer = max(maxPVer, h.PVer)
		k := key{h.PVer, h.Sum}
		a := groups[k]
		if a == nil {
			a = newPartialAsm(h)
			groups[k] = a
			order = append(order, k)
		}
		if _, err := a.add(h, m.data, m.seq); err != nil {
			stale = append(stale, m.seq)
		}
	}
	for _, k := range order {
		a := groups[k]
		if a.have == len(a.parts) && (best == nil || a.h.PVer > best.h.PVer) {
			best = a
		}
	}
	for _, k := range order {
		if a := groups[k]; a != best {
			stale = append(stale, a.seqs...)
		}
	}
	return best, stale, maxPVer
}

// consumer (re)creates the node's durable consumer. A leaf resumes after
// the consumer's acknowledgement floor: everything at or below it is in the
// partial it restored. An inner node replays its children's subjects from
// the start: they hold only each child's latest partial. Recreating rather
// than reusing also redelivers at once what a killed predecessor held
// unacknowledged, instead of after AckWait.
func (n *node) consumer(ctx context.Context) (jetstream.Consumer, error) {
	name := n.spec.Name.Consumer()
	var filters []string
	if n.spec.Leaf() {
		for _, r := range n.spec.Ranks {
			filters = append(filters, broker.BatchSubject(n.cfg.Job, r), broker.DoneSubject(n.cfg.Job, r))
		}
		filters = append(filters, broker.EndSubject(n.cfg.Job))
	} else {
		for _, c := range n.spec.Children {
			filters = append(filters, broker.PartialSubject(n.cfg.Job, c.Level, c.Index))
		}
		filters = append(filters, broker.TreeEndSubject(n.cfg.Job))
	}
	cc := jetstream.ConsumerConfig{
		Durable:        name,
		Description:    fmt.Sprintf("gpuprof reducer node %v of job %s", n.spec.Name, n.cfg.Job),
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        n.cfg.AckWait,
		MaxAckPending:  n.cfg.MaxAckPending,
		MaxDeliver:     -1,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	var cons jetstream.Consumer
	err := broker.Retry(ctx, n.cfg.Retry, func() error {
		old, err := n.stream.Consumer(ctx, name)
		switch {
		case err == nil:
			info, err := old.Info(ctx)
			if err != nil {
				return err
			}
			if n.spec.Leaf() && info.AckFloor.Stream > 0 {
				cc.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
				cc.OptStartSeq = info.AckFloor.Stream + 1
			}
			if err := n.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return err
		}
		cons, err = n.stream.CreateOrUpdateConsumer(ctx, cc)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reducer: node %v: consumer %s: %w", n.spec.Name, name, err)
	}
	if cc.OptStartSeq > 0 {
		n.log.Debug("reducer: consumer resumes", "stream_seq", cc.OptStartSeq)
	}
	// Until the first delivery says otherwise, what is pending holds the
	// deadline back (a resumed node must not time out ranks whose batches
	// wait in the stream).
	if info, err := cons.Info(ctx); err == nil {
		n.pending = info.NumPending
	} else {
		n.pending = 1
	}
	return cons, nil
}

func (n *node) count(f func(*counters)) {
	if n.cfg.counters != nil {
		f(n.cfg.counters)
	}
}

// loop consumes inputs until the node finishes.
func (n *node) loop(ctx context.Context, cons jetstream.Consumer) (*NodeResult, error) {
	msgs := make(chan jetstream.Msg)
	errs := make(chan error, 1)
	var (
		wg   sync.WaitGroup
		stop chan struct{}
	)
	startPull := func(cons jetstream.Consumer) {
		stop = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.pull(cons, msgs, errs, stop)
		}()
	}
	stopPull := func() {
		if stop != nil {
			close(stop)
			wg.Wait()
			stop = nil
		}
	}
	defer func() { stopPull() }()
	startPull(cons)
	// Messages in flight when the connection drops (a broker restart, or a
	// server cutting a slow client) are lost to this client but count as
	// delivered, so they would come back only after AckWait; after a
	// reconnect the node recreates its consumer, which redelivers them at
	// once (the redelivered copies of what it merged are no-ops).
	status := n.cfg.Conn.NC.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
	defer n.cfg.Conn.NC.RemoveStatusListener(status)
	reconnecting := false
	if n.cfg.OnReady != nil {
		n.cfg.OnReady(n.spec.Name)
	}
	tick := time.NewTicker(min(max(n.cfg.PartialInterval/4, 20*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	var lastProgress time.Time
	if n.done() {
		return n.finish(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-msgs:
			if n.spec.Leaf() {
				n.handleBatch(m)
			} else {
				n.handlePartial(m)
			}
			if n.done() {
				return n.finish(ctx)
			}
			if len(n.deferred) >= n.cfg.MaxAckPending/2 {
				if err := n.publish(ctx, false); err != nil {
					return nil, err
				}
			}
		case st := <-status:
			if st == nats.RECONNECTING {
				reconnecting = true
				continue
			}
			if st != nats.CONNECTED || !reconnecting {
				continue
			}
			reconnecting = false
			n.log.Info("reducer: reconnected; recreating the consumer so that lost deliveries come back now")
			stopPull()
			c, err := n.consumer(ctx)
			if err != nil {
				return nil, err
			}
			startPull(c)
		case err := <-errs:
			if errors.Is(err, broker.ErrConsumerLeaderChanged) {
				n.log.Info("reducer: the consumer's leader changed; recreating the consumer so that lost deliveries come back now")
				stopPull()
				c, err := n.consumer(ctx)
				if err != nil {
					return nil, err
				}
				startPull(c)
				continue
			}
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionClosed) {
				return nil, fmt.Errorf("reducer: node %v: pulling inputs: %w (another process may have taken this node)", n.spec.Name, err)
			}
			n.log.Warn("reducer: pulling inputs failed; retrying", "err", err)
		case now := <-tick.C:
			if n.deadlinePassed(now) {
				n.expire()
				return n.finish(ctx)
			}
			if n.dirty && now.Sub(n.lastPublish) >= n.interval() && !n.spec.Root {
				if err := n.publish(ctx, false); err != nil {
					return nil, err
				}
			}
			if n.spec.Root && n.spec.Leaf() && n.dirty && now.Sub(n.lastPublish) >= n.interval() {
				// A leaf that is also the root still needs its partial as
				// its durable state.
				if err := n.publish(ctx, false); err != nil {
					return nil, err
				}
			}
			if n.cfg.OnProgress != nil && n.cfg.counters == nil && now.Sub(lastProgress) >= n.cfg.ProgressInterval {
				lastProgress = now
				n.cfg.OnProgress(n.progress())
			}
		}
	}
}

// pull fetches inputs into msgs until stop: one fetch at a time, bounded
// in bytes and time, so a fetch parked on a broker that went away expires
// and the next one reaches the new server.
func (n *node) pull(cons jetstream.Consumer, msgs chan<- jetstream.Msg, errs chan<- error, stop <-chan struct{}) {
	fails := 0
	lw := broker.NewLeaderWatch(cons, 2*time.Second)
	lw.Changed(context.Background())
	for {
		select {
		case <-stop:
			return
		default:
		}
		// Fetch with a message bound, not FetchBytes: FetchBytes asks for a
		// million messages and the client allocates channels of that many
		// slots (32 MB) for every fetch.
		b, err := cons.Fetch(min(n.cfg.MaxAckPending, 4096), jetstream.FetchMaxBytes(n.cfg.PullBytes), jetstream.FetchMaxWait(2*time.Second))
		got := 0
		if err == nil {
			for m := range b.Messages() {
				got++
				select {
				case msgs <- m:
				case <-stop:
					return
				}
			}
			err = b.Error()
		}
		// Idle on a cluster: if a node failed, the new consumer leader
		// counts what the old one was sending as delivered.
		if got == 0 && lw.Changed(context.Background()) {
			err = broker.ErrConsumerLeaderChanged
		}
		if err == nil || errors.Is(err, nats.ErrTimeout) {
			fails = 0
			continue
		}
		select {
		case errs <- err:
		case <-stop:
			return
		}
		t := time.NewTimer(n.cfg.Retry.Delay(fails))
		fails++
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		}
	}
}

// interval between partials while inputs run: PartialInterval, stretched
// so that a partial (an inner node's merge, encoding and storing) takes at
// most a tenth of the node's time. Many nodes share a machine's cores (a
// leaf of 8 realistic ranks spends about 0.2 s per partial, and a 1024-rank
// tree has 128 leaves): at a quarter, republishing growing states took
// every core and the merging starved. Partials while inputs run only bound
// what a restart replays; a node's last one goes out at once.
func (n *node) interval() time.Duration {
	return max(n.cfg.PartialInterval, 9*n.publishCost)
}

// deferAck acknowledges m once the node's state is durable: at once if
// nothing changed since the last publish, else after the next one.
func (n *node) deferAck(m jetstream.Msg, rank int32, seq uint64) {
	if !n.dirty {
		n.ack(m, rank, seq)
		return
	}
	n.deferred = append(n.deferred, deferredAck{m, rank, seq})
}

func (n *node) ack(m jetstream.Msg, rank int32, seq uint64) {
	// A lost acknowledgement only means a redelivery, which merging
	// ignores, so acks need not wait for the broker's confirmation.
	if err := m.Ack(); err != nil {
		n.log.Debug("reducer: ack failed (the input will be redelivered and ignored)", "stream_seq", seq, "err", err)
	}
	if rank >= 0 && n.ackedUpTo != nil {
		n.ackedUpTo[rank] = max(n.ackedUpTo[rank], seq)
		n.ackedBytes[rank] += len(m.Data())
	}
}

func (n *node) startClock(t time.Time, why string) {
	if t.IsZero() || (!n.clock.IsZero() && !t.Before(n.clock)) {
		return
	}
	if n.clock.IsZero() {
		n.log.Debug("reducer: rank-timeout clock started", "why", why, "deadline", t.Add(n.timeout()))
	}
	n.clock = t
	n.dirty = true // the clock is part of the durable state
}

func (n *node) timeout() time.Duration {
	return n.cfg.RankTimeout + time.Duration(n.spec.Name.Level)*n.cfg.ChildGrace
}

// deadlinePassed: the clock started, the timeout passed, and no input is
// waiting, so a backlog (a replay, a slow reducer) is never mistaken for a
// missing rank. An inner node gives up on an unfinished child only when
// the child's own deadline (from the clock its partials carry) is past by
// ChildGrace and it has been silent for ChildGrace: a child working
// through a backlog publishes every PartialInterval and is waited for.
func (n *node) deadlinePassed(now time.Time) bool {
	if n.pending != 0 {
		return false
	}
	if n.spec.Leaf() {
		return !n.clock.IsZero() && now.Sub(n.clock) > n.timeout()
	}
	for i, c := range n.latest {
		if c != nil && c.h.finished() {
			continue
		}
		clock := n.clock
		if c != nil && c.h.Clock != 0 {
			clock = time.Unix(0, c.h.Clock)
		}
		if clock.IsZero() || now.Sub(clock) <= n.timeout() {
			return false
		}
		// A child not heard from yet gets ChildGrace from this node's start.
		heard := n.heard[i]
		if heard.IsZero() {
			heard = n.stats.Start
		}
		if now.Sub(heard) <= n.cfg.ChildGrace {
			return false
		}
	}
	return true
}

func (n *node) reject(m jetstream.Msg, seq uint64, rank int32, bseq int64, why string) {
	n.stats.Rejected++
	attrs := []any{"stream_seq", seq, "subject", m.Subject()}
	if rank >= 0 {
		attrs = append(attrs, "rank", rank)
	}
	if bseq >= 0 {
		attrs = append(attrs, "seq", bseq)
	}
	n.log.Warn("reducer: input rejected: "+why, attrs...)
	n.deferAck(m, -1, seq)
}

// intake reads a delivered message's metadata and data and counts it; a
// message without JetStream metadata is logged and ignored.
func (n *node) intake(m jetstream.Msg) (md *jetstream.MsgMetadata, data []byte, ok bool) {
	md, err := m.Metadata()
	if err != nil {
		n.log.Warn("reducer: message without JetStream metadata ignored", "subject", m.Subject(), "err", err)
		return nil, nil, false
	}
	n.pending = md.NumPending
	data = m.Data()
	n.stats.MsgsIn++
	n.stats.BytesIn += uint64(len(data))
	return md, data, true
}

// handleBatch merges one batch chunk into a leaf's state.
func (n *node) handleBatch(m jetstream.Msg) {
	md, data, ok := n.intake(m)
	if !ok {
		return
	}
	seq := md.Sequence.Stream
	n.bytesIn += uint64(len(data))
	n.count(func(c *counters) { c.bytesIn.Add(uint64(len(data))); c.msgs.Add(1) })
	subj, err := broker.ParseSubject(m.Subject())
	if err != nil || subj.Job != n.cfg.Job {
		n.reject(m, seq, -1, -1, fmt.Sprintf("not an input of this node (%v)", err))
		return
	}
	if subj.Kind == broker.SubjectEnd {
		n.startClock(endClock(md.Timestamp, data, n.cfg.RankTimeout), "end signal")
		n.deferAck(m, -1, seq)
		return
	}
	r := subj.Rank
	if (subj.Kind != broker.SubjectBatch && subj.Kind != broker.SubjectDone) || !n.mine[r] {
		n.reject(m, seq, r, -1, "not an input of this node")
		return
	}
	h, err := profile.ParseHeader(data)
	if err != nil {
		n.reject(m, seq, r, -1, err.Error())
		return
	}
	done := h.Flags&profile.FlagDone != 0
	switch {
	case h.Job != n.cfg.Job:
		n.reject(m, seq, h.Rank, int64(h.Seq), fmt.Sprintf("batch of job %q", h.Job))
		return
	case h.Rank != r:
		n.reject(m, seq, h.Rank, int64(h.Seq), fmt.Sprintf("header names rank %d on the subject of rank %d", h.Rank, r))
		return
	case done != (subj.Kind == broker.SubjectDone):
		n.reject(m, seq, r, int64(h.Seq), "done flag does not match the subject")
		return
	}
	if b := n.state.Items[r]; b != nil && b.Contains(h.Seq) {
		n.stats.Duplicates++
		n.log.Debug("reducer: batch already merged; ignored (redelivered or replayed)", "rank", r, "seq", h.Seq, "stream_seq", seq)
		n.deferAck(m, r, seq)
		return
	}
	if n.finished[r] {
		n.stats.Duplicates++
		n.log.Warn("reducer: batch of a rank already sealed ignored (late)", "rank", r, "seq", h.Seq, "stream_seq", seq)
		n.deferAck(m, r, seq)
		return
	}
	if ri := n.state.Ranks[r]; ri != nil && ri.Batches >= 0 {
		if !done && int64(h.Seq) >= ri.Batches {
			n.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("sequence beyond the rank's %d batches", ri.Batches))
			return
		}
		if done {
			n.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("second done item (the first said %d batches)", ri.Batches))
			return
		}
	}
	if done {
		if b := n.state.Items[r]; b != nil && !b.IsEmpty() && int64(b.Maximum()) >= int64(h.Seq) {
			n.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("done item says %d batches but batch %d was merged", h.Seq, b.Maximum()))
			return
		}
	}
	var item *profile.Profile
	msgs := []jetstream.Msg{m}
	if h.Chunks == 1 {
		item, _, err = profile.DecodeBatch(data)
	} else {
		k := itemKey{r, h.Seq}
		pi := n.asm[k]
		if pi == nil {
			pi = &pendingItem{chunks: map[uint16]bool{}, h0: h}
			n.asm[k] = pi
		}
		if h.Sum != pi.h0.Sum || h.Chunks != pi.h0.Chunks || h.BodyLen != pi.h0.BodyLen {
			n.reject(m, seq, r, int64(h.Seq), fmt.Sprintf("chunk %d/%d does not fit the item being assembled (checksum or size differs)", h.Chunk+1, h.Chunks))
			return
		}
		if pi.chunks[h.Chunk] {
			// The same chunk again (a redelivery): keep it with the item.
			pi.msgs = append(pi.msgs, m)
			return
		}
		item, _, err = pi.asm.Add(data)
		if errors.Is(err, profile.ErrIncomplete) {
			pi.chunks[h.Chunk] = true
			pi.msgs = append(pi.msgs, m)
			return
		}
		delete(n.asm, k)
		msgs = append(pi.msgs, m)
	}
	if err != nil {
		n.stats.Rejected++
		n.log.Warn("reducer: batch rejected", "rank", r, "seq", h.Seq, "stream_seq", seq, "err", err)
		for _, mm := range msgs {
			n.deferAck(mm, r, seq)
		}
		return
	}
	t0 := time.Now()
	err = n.state.Merge(item)
	n.stats.MergeTime += time.Since(t0)
	if err != nil {
		n.stats.Rejected++
		n.log.Warn("reducer: batch not merged", "rank", r, "seq", h.Seq, "stream_seq", seq, "err", err)
		for _, mm := range msgs {
			n.deferAck(mm, r, seq)
		}
		return
	}
	n.dirty = true
	for _, mm := range msgs {
		mmd, _ := mm.Metadata()
		s := seq
		if mmd != nil {
			s = mmd.Sequence.Stream
		}
		n.deferAck(mm, r, s)
	}
	n.stats.ItemsMerged++
	n.batches++
	n.count(func(c *counters) { c.batches.Add(1) })
	if done {
		if md.Timestamp.After(n.lastDone) {
			n.lastDone = md.Timestamp
		}
		n.startClock(md.Timestamp, fmt.Sprintf("done item of rank %d", r))
	}
	if n.state.Sealed(r) {
		n.finished[r] = true
		n.count(func(c *counters) { c.ranksDone.Add(1) })
	}
}

// handlePartial records a child's partial chunk; a complete version
// replaces the child's previous one.
func (n *node) handlePartial(m jetstream.Msg) {
	md, data, ok := n.intake(m)
	if !ok {
		return
	}
	seq := md.Sequence.Stream
	subj, err := broker.ParseSubject(m.Subject())
	if err != nil || subj.Job != n.cfg.Job {
		n.reject(m, seq, -1, -1, fmt.Sprintf("not an input of this node (%v)", err))
		return
	}
	if subj.Kind == broker.SubjectEnd {
		n.startClock(endClock(md.Timestamp, data, n.cfg.RankTimeout), "end signal")
		n.deferAck(m, -1, seq)
		return
	}
	ci, ok := n.child[NodeName{subj.Level, subj.Node}]
	if subj.Kind != broker.SubjectPartial || !ok {
		n.reject(m, seq, -1, -1, "not an input of this node")
		return
	}
	h, err := parsePartialHeader(data)
	if err != nil {
		n.reject(m, seq, -1, -1, err.Error())
		return
	}
	if h.Job != n.cfg.Job || int(h.Level) != subj.Level || int(h.Node) != subj.Node || h.Flags&flagFinal != 0 {
		n.reject(m, seq, -1, -1, fmt.Sprintf("partial header (job %q, node %d.%d) does not match its subject", h.Job, h.Level, h.Node))
		return
	}
	if cur := n.latest[ci]; cur != nil && (h.PVer < cur.h.PVer || h.PVer == cur.h.PVer && h.Sum == cur.h.Sum) {
		n.stats.Duplicates++
		n.ack(m, -1, seq) // superseded: the child's later version is held
		return
	}
	a := n.building[ci]
	if a != nil && (a.h.PVer != h.PVer || a.h.Sum != h.Sum) {
		if h.PVer < a.h.PVer {
			n.stats.Duplicates++
			n.ack(m, -1, seq)
			return
		}
		// A newer version started: the one being assembled is superseded
		// (the child deletes it once the newer one is stored).
		for _, mm := range n.buildMsgs[ci] {
			n.ack(mm, -1, 0)
		}
		a = nil
	}
	if a == nil {
		a = newPartialAsm(h)
		n.building[ci], n.buildMsgs[ci] = a, nil
	}
	complete, err := a.add(h, data, seq)
	if err != nil {
		n.reject(m, seq, -1, -1, err.Error())
		return
	}
	n.buildMsgs[ci] = append(n.buildMsgs[ci], m)
	if !complete {
		return
	}
	msgs := n.buildMsgs[ci]
	n.building[ci], n.buildMsgs[ci] = nil, nil
	body, err := a.body()
	if err != nil {
		n.stats.Rejected++
		n.log.Warn("reducer: partial rejected", "child", n.spec.Children[ci].String(), "version", h.PVer, "err", err)
		for _, mm := range msgs {
			n.ack(mm, -1, 0)
		}
		return
	}
	if old := n.latest[ci]; old != nil {
		for _, mm := range old.msgs {
			n.ack(mm, -1, 0)
		}
	}
	n.latest[ci] = &childPartial{h: a.h, body: body, msgs: msgs}
	n.heard[ci] = time.Now()
	if a.h.finished() {
		// A child's last partial: decode it now, beside the loop, while
		// other children still work, rather than on the critical path at
		// the end; children finishing together decode in parallel.
		c := n.latest[ci]
		c.decoding = make(chan struct{})
		go func() {
			defer close(c.decoding)
			t0 := time.Now()
			c.early, c.earlyErr = decodePartial(c.h, c.body)
			c.earlyTime = time.Since(t0)
		}()
	}
	n.dirty = true
	if a.h.Clock != 0 {
		n.startClock(time.Unix(0, a.h.Clock), "child "+n.spec.Children[ci].String())
	}
	if t := unixTime(a.h.LastDone); t.After(n.lastDone) {
		n.lastDone = t
	}
}

// done reports whether every rank below the node is finished.
func (n *node) done() bool {
	if n.spec.Leaf() {
		return len(n.finished) == len(n.spec.Ranks)
	}
	for _, c := range n.latest {
		if c == nil || !c.h.finished() {
			return false
		}
	}
	return true
}

// expire handles the deadline: a leaf seals its unfinished ranks as
// incomplete; an inner node gives up on unfinished children.
func (n *node) expire() {
	if n.spec.Leaf() {
		var open []int32
		for _, r := range n.spec.Ranks {
			if !n.finished[r] {
				open = append(open, r)
			}
		}
		sealed := n.state.SealRanks(open, n.leafReason)
		for _, r := range sealed {
			n.finished[r] = true
			n.log.Warn("reducer: rank sealed as incomplete", "rank", r, "reason", n.state.Ranks[r].Incomplete)
		}
		n.stats.Incomplete = append(n.stats.Incomplete, sealed...)
		n.count(func(c *counters) { c.ranksDone.Add(int64(len(sealed))); c.incomplete.Add(int64(len(sealed))) })
		// Chunks of items that never completed: nothing to merge.
		keys := make([]itemKey, 0, len(n.asm))
		for k := range n.asm {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return keys[i].rank < keys[j].rank || keys[i].rank == keys[j].rank && keys[i].seq < keys[j].seq
		})
		for _, k := range keys {
			pi := n.asm[k]
			n.log.Warn("reducer: batch incomplete at the rank timeout; not merged", "rank", k.rank, "seq", k.seq, "chunks", len(pi.chunks), "of", pi.h0.Chunks)
			for _, m := range pi.msgs {
				n.deferAck(m, -1, 0)
			}
			delete(n.asm, k)
		}
	} else {
		n.timedOut = true
	}
	n.dirty = true
}

// leafReason says why rank r is incomplete at the deadline.
func (n *node) leafReason(r int32) string {
	b := n.state.Items[r]
	ri := n.state.Ranks[r]
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

// merged is an inner node's current state: the merge of its children's
// latest partials, with the ranks of unfinished children sealed as
// incomplete after the deadline.
func (n *node) merged() *profile.Profile {
	for i := range n.latest {
		n.decodeChild(i)
	}
	t0 := time.Now()
	defer func() { n.stats.MergeTime += time.Since(t0) }()
	parts := make([]*profile.Profile, len(n.latest))
	for i, c := range n.latest {
		if c != nil {
			parts[i] = c.decoded
		}
	}
	// MergeAll: as merging the children one by one, with the tables merged
	// in parallel (this merge is on the tail's critical path).
	p := profile.NewSized(n.cfg.Job, parts...)
	errs := p.MergeAll(parts)
	for i, c := range n.latest {
		if c == nil {
			continue
		}
		if err := errs[i]; err != nil {
			n.log.Error("reducer: child partial not merged", "child", n.spec.Children[i].String(), "version", c.h.PVer, "err", err)
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
	if n.timedOut {
		var open []int32
		for i, c := range n.latest {
			if c != nil && c.h.finished() {
				continue
			}
			ch, _ := n.cfg.Tree.Node(n.spec.Children[i])
			open = append(open, ch.Ranks...)
		}
		sealed := p.SealRanks(open, func(r int32) string {
			return fmt.Sprintf("reducer node %v did not finish", n.childOf(r))
		})
		if len(sealed) > 0 && len(n.stats.Incomplete) == 0 {
			n.log.Warn("reducer: ranks of unfinished children sealed as incomplete", "ranks", fmt.Sprint(sealed))
			n.stats.Incomplete = sealed
			n.count(func(c *counters) { c.ranksDone.Add(int64(len(sealed))); c.incomplete.Add(int64(len(sealed))) })
		}
	}
	return p
}

// decodeChild decodes child i's latest partial once; an unreadable one is
// dropped (the child's ranks then count as missing unless a later version
// comes).
func (n *node) decodeChild(i int) {
	c := n.latest[i]
	if c == nil || c.decoded != nil {
		return
	}
	var q *profile.Profile
	var err error
	if c.decoding != nil {
		<-c.decoding
		q, err = c.early, c.earlyErr
		n.stats.DecodeTime += c.earlyTime
	} else {
		t0 := time.Now()
		q, err = decodePartial(c.h, c.body)
		n.stats.DecodeTime += time.Since(t0)
	}
	if err == nil {
		err = n.checkChildRanks(i, q)
	}
	if err != nil {
		n.stats.Rejected++
		n.log.Error("reducer: child partial unreadable; its ranks count as missing", "child", n.spec.Children[i].String(), "version", c.h.PVer, "err", err)
		n.latest[i] = nil
		return
	}
	c.decoded, c.body = q, nil
}

func (n *node) childOf(r int32) NodeName {
	for _, c := range n.spec.Children {
		ch, _ := n.cfg.Tree.Node(c)
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
func (n *node) checkChildRanks(i int, p *profile.Profile) error {
	ch, err := n.cfg.Tree.Node(n.spec.Children[i])
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

// current is the node's state to publish.
func (n *node) current() *profile.Profile {
	if n.spec.Leaf() {
		return n.state
	}
	return n.merged()
}

// publish makes the node's state durable as its next partial version, then
// acknowledges the inputs it covers, deletes the superseded version and
// (leaves) purges merged batches.
func (n *node) publish(ctx context.Context, finished bool) error {
	t0 := time.Now()
	p := n.current()
	merge := time.Since(t0)
	_, err := n.publishProfile(ctx, p, finished, false)
	n.publishCost += merge // an inner node's merge is part of a partial's cost
	return err
}

func (n *node) header(p *profile.Profile, finished, final bool) partialHeader {
	h := partialHeader{Level: uint16(n.spec.Name.Level), Node: uint32(n.spec.Name.Index), PVer: n.pver,
		Clock: unixNano(n.clock), LastDone: unixNano(n.lastDone), Ranks: uint32(len(n.spec.Ranks)), Job: n.cfg.Job}
	if finished {
		h.Flags |= flagFinished
	}
	if final {
		h.Flags |= flagFinal
	}
	for _, r := range n.spec.Ranks {
		if p.RankFinished(r) {
			h.Sealed++
		}
	}
	h.Batches, h.BytesIn = n.batches, n.bytesIn
	if !n.spec.Leaf() {
		h.Batches, h.BytesIn = 0, 0
		for _, c := range n.latest {
			if c != nil {
				h.Batches += c.h.Batches
				h.BytesIn += c.h.BytesIn
			}
		}
	}
	return h
}

func (n *node) publishProfile(ctx context.Context, p *profile.Profile, finished, final bool) (partialHeader, error) {
	subj := broker.PartialSubject(n.cfg.Job, n.spec.Name.Level, n.spec.Name.Index)
	if final {
		subj = broker.FinalSubject(n.cfg.Job)
	}
	t0 := time.Now()
	chunks, h, err := encodePartial(n.header(p, finished, final), p, n.cfg.Conn.ChunkPayload())
	n.stats.EncodeTime += time.Since(t0)
	if err != nil {
		return h, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
	}
	t1 := time.Now()
	seqs := make([]uint64, len(chunks))
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for i, c := range chunks {
		hh := h
		hh.Chunk = uint16(i)
		id := hh.msgID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ack, _, err := broker.PublishRetry(ctx, n.js, &nats.Msg{Subject: subj, Data: c, Header: nats.Header{}}, id, broker.TreeStreamName(n.cfg.Job), n.cfg.Retry, nil)
			if err == nil {
				seqs[i] = ack.Sequence
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	n.stats.PublishTime += time.Since(t1)
	for i, err := range errs {
		if err != nil {
			return h, fmt.Errorf("reducer: node %v: publishing version %d chunk %d/%d on %s: %w", n.spec.Name, h.PVer, i+1, len(chunks), subj, err)
		}
	}
	n.pver++
	n.stats.PartialsOut++
	for _, c := range chunks {
		n.stats.BytesOut += uint64(len(c))
	}
	// The new version is stored: the inputs it covers can go.
	for _, d := range n.deferred {
		n.ack(d.m, d.rank, d.seq)
	}
	n.deferred = n.deferred[:0]
	for _, c := range n.latest {
		if c != nil {
			for _, m := range c.msgs {
				n.ack(m, -1, 0)
			}
			c.msgs = nil
		}
	}
	n.dirty = false
	n.lastPublish = time.Now()
	n.publishCost = n.lastPublish.Sub(t0)
	if !final {
		// Every older version of this node's partial was stored before any
		// chunk of this one: drop them, so the stream holds one version
		// per node.
		lowest := slices.Min(seqs)
		n.housekeep(func(ctx context.Context) {
			if err := n.tree.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(lowest)); err != nil {
				n.log.Debug("reducer: could not drop superseded partials (a restart cleans them)", "subject", subj, "err", err)
			}
		})
	}
	if n.spec.Leaf() && !n.cfg.KeepInputs {
		n.purge()
	}
	return h, nil
}

// housekeep queues a deletion. Deletions only reclaim space, so they run
// beside the merge, and one that cannot be queued or fails leaves garbage,
// never a loss.
func (n *node) housekeep(f func(context.Context)) {
	select {
	case n.hk <- f:
	default:
		n.log.Debug("reducer: housekeeping queue full; a deletion is skipped")
	}
}

// startHousekeeping runs queued deletions until stop; stop(wait) lets the
// queue drain for up to wait.
func (n *node) startHousekeeping() (stop func(wait time.Duration)) {
	n.hk = make(chan func(context.Context), 256)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range n.hk {
			if ctx.Err() != nil {
				continue
			}
			c, cl := context.WithTimeout(ctx, 5*time.Second)
			f(c)
			cl()
		}
	}()
	return func(wait time.Duration) {
		close(n.hk)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cancel()
			<-done
		}
		cancel()
	}
}

// purgeEvery: a running rank's merged batches are purged once this many
// bytes of them are acknowledged (a finished rank's at once), which keeps
// purge requests few while bounding what a full stream holds. A small
// input stream lowers it (purgeBytes), or ranks whose merged batches wait
// below it could fill the stream and hold their publishers forever.
const purgeEvery = 8 << 20

// purgeBytes is a leaf's purge threshold: purgeEvery, or an eighth of the
// input stream's share per rank if that is less.
func (n *node) purgeBytes() int {
	lim := purgeEvery
	if info := n.stream.CachedInfo(); info != nil && info.Config.MaxBytes > 0 && n.cfg.Tree != nil && len(n.cfg.Tree.Ranks) > 0 {
		lim = min(lim, int(max(info.Config.MaxBytes/int64(8*len(n.cfg.Tree.Ranks)), 1)))
	}
	return lim
}

// purge drops a leaf's merged batches from the stream: for each rank, every
// message below the lowest one still unacknowledged (held by an item being
// assembled) is in a stored partial.
func (n *node) purge() {
	hold := map[int32]uint64{}
	for _, pi := range n.asm {
		for _, m := range pi.msgs {
			if md, err := m.Metadata(); err == nil {
				r := itemRank(m)
				if h, ok := hold[r]; !ok || md.Sequence.Stream < h {
					hold[r] = md.Sequence.Stream
				}
			}
		}
	}
	for _, r := range n.spec.Ranks {
		upTo := n.ackedUpTo[r] + 1
		if h, ok := hold[r]; ok && h < upTo {
			upTo = h
		}
		due := n.finished[r] && !n.purgedDone[r] || n.ackedBytes[r] >= n.purgeAt
		if !due || upTo <= n.purgedUpTo[r]+1 || upTo <= 1 {
			continue
		}
		n.ackedBytes[r] = 0
		n.purgedDone[r] = n.finished[r]
		subjects := []string{broker.BatchSubject(n.cfg.Job, r)}
		if n.finished[r] {
			subjects = append(subjects, broker.DoneSubject(n.cfg.Job, r))
		}
		for _, s := range subjects {
			n.housekeep(func(ctx context.Context) {
				if err := n.stream.Purge(ctx, jetstream.WithPurgeSubject(s), jetstream.WithPurgeSequence(upTo)); err != nil {
					n.log.Debug("reducer: purge of merged batches failed (they stay in the stream)", "subject", s, "err", err)
				}
			})
		}
		n.purgedUpTo[r] = upTo - 1
	}
}

func itemRank(m jetstream.Msg) int32 {
	s, err := broker.ParseSubject(m.Subject())
	if err != nil {
		return -1
	}
	return s.Rank
}

// finish publishes the node's last partial (the root: the final profile)
// and returns.
func (n *node) finish(ctx context.Context) (*NodeResult, error) {
	if n.spec.Root {
		p, err := n.finishRoot(ctx, n.current())
		if err != nil {
			return nil, err
		}
		return &NodeResult{Stats: n.stats, Profile: p}, nil
	}
	if err := n.publish(ctx, true); err != nil {
		return nil, err
	}
	n.stats.Finish = time.Now()
	n.stats.LastDone = n.lastDone
	n.log.Debug("reducer: node finished", "partials", n.stats.PartialsOut, "items", n.stats.ItemsMerged)
	return &NodeResult{Stats: n.stats}, nil
}

// finishRoot publishes p as the final profile (p nil: the restored state).
func (n *node) finishRoot(ctx context.Context, p *profile.Profile) (*profile.Profile, error) {
	if p == nil {
		p = n.current()
	}
	if _, err := n.publishProfile(ctx, p, true, true); err != nil {
		return nil, err
	}
	n.stats.Finish = time.Now()
	n.stats.LastDone = n.lastDone
	if inc := p.IncompleteRanks(); len(inc) > 0 {
		n.log.Warn("reducer: final profile has incomplete ranks", "ranks", fmt.Sprint(inc))
	}
	return p, n.write(p)
}

func (n *node) write(p *profile.Profile) error {
	if n.cfg.Output == "" {
		return nil
	}
	path := n.cfg.Output
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, profile.FileName)
	}
	if err := profile.WriteFile(path, p); err != nil {
		return fmt.Errorf("reducer: writing the final profile: %w", err)
	}
	return nil
}

// progress is the node's own view (RunNode).
func (n *node) progress() Progress {
	pr := Progress{RanksTotal: len(n.spec.Ranks), Elapsed: time.Since(n.stats.Start)}
	if n.spec.Leaf() {
		pr.RanksDone = len(n.finished)
		pr.BatchesMerged, pr.BytesIn = n.batches, n.bytesIn
		pr.RanksIncomplete = len(n.stats.Incomplete)
		return pr
	}
	for _, c := range n.latest {
		if c != nil {
			pr.RanksDone += int(c.h.Sealed)
			pr.BatchesMerged += c.h.Batches
			pr.BytesIn += c.h.BytesIn
		}
	}
	return pr
}
