package reducer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
)

func (n *node) run(ctx context.Context) (*NodeResult, error) {
	n.stats = NodeStats{Node: n.spec.Name, Start: time.Now()}
	var err error
	if n.js, err = n.cfg.Conn.NewJetStream(n.cfg.AckTimeout); err != nil {
		return nil, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
	}
	if n.tree, err = n.cfg.Conn.TreeStream(ctx, n.cfg.Job); err != nil {
		return nil, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
	}
	n.stream = n.tree
	if err := n.role.open(ctx); err != nil {
		return nil, fmt.Errorf("reducer: node %v: %w", n.spec.Name, err)
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
// published final (then there is nothing left to do), or its role from the
// node's own latest complete partial.
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
	return n.role.resume(ctx, a)
}

// consumer (re)creates the node's durable consumer. A leaf resumes after
// the consumer's acknowledgement floor: everything at or below it is in the
// partial it restored. An inner node replays its children's subjects from
// the start: they hold only each child's latest partial. Recreating rather
// than reusing also redelivers at once what a killed predecessor held
// unacknowledged, instead of after AckWait.
func (n *node) consumer(ctx context.Context) (jetstream.Consumer, error) {
	name := n.spec.Name.Consumer()
	filters, fromAckFloor := n.role.inputs()
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
	// Each try's requests are bounded (RetryAPI): one lost in a broker
	// restart is tried again, instead of waiting out the caller's deadline.
	err := broker.RetryAPI(ctx, n.cfg.Retry, func(ctx context.Context) error {
		old, err := n.stream.Consumer(ctx, name)
		switch {
		case err == nil:
			info, err := old.Info(ctx)
			if err != nil {
				return err
			}
			if fromAckFloor && info.AckFloor.Stream > 0 {
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
	var info *jetstream.ConsumerInfo
	if err := broker.RetryAPI(ctx, n.cfg.Retry, func(ctx context.Context) (err error) {
		info, err = cons.Info(ctx)
		return err
	}); err == nil {
		n.pending = info.NumPending
	} else {
		n.pending = 1
	}
	return cons, nil
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
	if n.role.complete() {
		return n.finish(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m := <-msgs:
			n.take(m)
			if n.role.complete() {
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
				n.role.expire()
				n.dirty = true
				return n.finish(ctx)
			}
			if n.partials && n.dirty && now.Sub(n.lastPublish) >= n.interval() {
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

// deadlinePassed: no input is waiting, so a backlog (a replay, a slow
// reducer) is never mistaken for a missing rank, and the role's deadline
// passed.
func (n *node) deadlinePassed(now time.Time) bool {
	if n.pending != 0 {
		return false
	}
	return n.role.overdue(now)
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

// take is the intake of one input: counted, checked to be the node's, the
// end signal handled here, anything else handed to the role.
func (n *node) take(m jetstream.Msg) {
	md, data, ok := n.intake(m)
	if !ok {
		return
	}
	n.role.arrived(data)
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
	n.role.accept(m, md, subj, data)
}

// progress is the node's own view (RunNode).
func (n *node) progress() Progress {
	pr := Progress{RanksTotal: len(n.spec.Ranks), Elapsed: time.Since(n.stats.Start)}
	n.role.view(&pr)
	return pr
}
