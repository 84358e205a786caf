package reducer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// A node's state is durable as versions of its partial in the tree
// stream: publishing one, finding the latest at a restart, and deleting
// what a stored version supersedes.

// publish makes the node's state durable as its next partial version, then
// acknowledges the inputs it covers, deletes the superseded version and
// (leaves) purges merged batches.
func (n *node) publish(ctx context.Context, finished bool) error {
	t0 := time.Now()
	p := n.role.snapshot()
	merge := time.Since(t0)
	_, err := n.publishProfile(ctx, p, finished, false)
	n.publishCost += merge // an inner node's merge is part of a partial's cost
	return err
}

func (n *node) header(p *profile.Profile, finished, final bool) partialHeader {
	h := partialHeader{Level: uint16(n.spec.Name.Level), Node: uint32(n.spec.Name.Index), PVer: n.pver,
		Clock: unixNano(n.clock), LastDone: unixNano(n.lastDone), Ranks: uint32(len(n.spec.Ranks))}
	h.Job = n.cfg.Job
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
	h.Batches, h.BytesIn = n.role.below()
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
	// Every chunk is stored: a restart resumes from this version.
	n.log.Debug("reducer: partial stored", "version", h.PVer, "chunks", len(chunks), "final", final)
	// The new version is stored: the inputs it covers can go.
	for _, d := range n.deferred {
		n.ack(d.m, d.rank, d.seq)
	}
	n.deferred = n.deferred[:0]
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
	n.role.published()
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

// finish publishes the node's last partial (the root: the final profile)
// and returns.
func (n *node) finish(ctx context.Context) (*NodeResult, error) {
	if n.spec.Root {
		p, err := n.finishRoot(ctx, n.role.snapshot())
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
		p = n.role.snapshot()
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
	// RetryAPI: a request lost in a broker restart costs one try, not the
	// node's whole deadline.
	err := broker.RetryAPI(ctx, n.cfg.Retry, func(ctx context.Context) error {
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
	err = broker.RetryAPI(ctx, n.cfg.Retry, func(ctx context.Context) error {
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
		if a.Complete() && (best == nil || a.h.PVer > best.h.PVer) {
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
