package reducer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// TreeStats is what a whole tree did.
type TreeStats struct {
	Plan        string
	Nodes       []NodeStats // leaves first, as Tree.Nodes lists them
	ItemsMerged uint64      // batch items merged by the leaves
	BytesIn     uint64      // batch bytes the leaves consumed
	Partials    uint64      // partials published (final included)
	PartialMB   float64     // their size
	Elapsed     time.Duration
	// LastDone is the broker time of the last done item; Final when the
	// final profile was stored; Tail = Final - LastDone, the latency the
	// tree adds after the last rank finished.
	LastDone time.Time
	Final    time.Time
	Tail     time.Duration
	// Incomplete ranks, as named in the final profile.
	Incomplete []int32
}

// RunTree runs every node of cfg.Tree as goroutines of this process and
// returns the final profile with the tree's stats. When a node fails the
// others are stopped and its error returned.
func RunTree(ctx context.Context, cfg Config) (*profile.Profile, *TreeStats, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &counters{}
	nodes := cfg.Tree.Nodes()
	results := make([]*NodeResult, len(nodes))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, nd := range nodes {
		nc := cfg
		nc.Node = nd.Name
		nc.counters = c
		nc.OnProgress = nil
		if !nd.Root {
			nc.Output = ""
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := RunNode(ctx, nc)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
			results[i] = res
		}()
	}
	progress := func() Progress {
		return Progress{RanksTotal: len(cfg.Tree.Ranks), RanksDone: int(c.ranksDone.Load()), RanksIncomplete: int(c.incomplete.Load()),
			BatchesMerged: c.batches.Load(), BytesIn: c.bytesIn.Load(), Elapsed: time.Since(start)}
	}
	stopProgress := make(chan struct{})
	var pwg sync.WaitGroup
	if cfg.OnProgress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			t := time.NewTicker(cfg.ProgressInterval)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					cfg.OnProgress(progress())
				}
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	pwg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if cfg.OnProgress != nil {
		cfg.OnProgress(progress())
	}
	root := results[len(results)-1]
	st := &TreeStats{Plan: cfg.Tree.String(), Elapsed: time.Since(start)}
	for i, r := range results {
		s := r.Stats
		st.Nodes = append(st.Nodes, s)
		if nodes[i].Leaf() {
			st.ItemsMerged += s.ItemsMerged
			st.BytesIn += s.BytesIn
		}
		st.Partials += s.PartialsOut
		st.PartialMB += float64(s.BytesOut) / (1 << 20)
		if s.LastDone.After(st.LastDone) {
			st.LastDone = s.LastDone
		}
	}
	st.Final = root.Stats.Finish
	if !st.LastDone.IsZero() {
		st.Tail = st.Final.Sub(st.LastDone)
	}
	st.Incomplete = root.Profile.IncompleteRanks()
	return root.Profile, st, nil
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
	if spec.Leaf() {
		n.role = newLeaf(n)
	} else {
		n.role = newInner(n)
	}
	// The root publishes the final profile at the end; until then an inner
	// root's state is its children's partials, but a leaf that is also
	// the root needs its own partials as its durable state.
	n.partials = !spec.Root || spec.Leaf()
	return n.run(ctx)
}

// SignalEnd tells job's reducers that the application has ended, which
// starts their rank-timeout clocks (the launcher calls it when mpirun
// exits). It is stored in the stream, so reducers started or restarted
// later see it too; signalling twice keeps the first.
func SignalEnd(ctx context.Context, conn *broker.Conn, job string, exitCode int) error {
	return signalEnd(ctx, conn, job, fmt.Sprintf("exit %d", exitCode), "end")
}

// SignalEndWithin tells job's reducers that whatever the ranks have not
// sent within of now will not come: ranks still missing then are sealed
// as incomplete, however long the rank timeout. gpuprof run sends it when
// the job is interrupted (so that the report is written before the batch
// system's kill) and when the launcher, and with it every collector, has
// exited. It is kept beside SignalEnd's message, not instead of it: a node
// takes the earliest deadline.
func SignalEndWithin(ctx context.Context, conn *broker.Conn, job string, exitCode int, within time.Duration) error {
	return signalEnd(ctx, conn, job, fmt.Sprintf("exit %d within %s", exitCode, within), "within/"+within.String())
}

func signalEnd(ctx context.Context, conn *broker.Conn, job, body, id string) error {
	if err := broker.ValidateJob(job); err != nil {
		return err
	}
	js, err := conn.NewJetStream(10 * time.Second)
	if err != nil {
		return err
	}
	// Once in each stream: leaves read the input stream, inner nodes the
	// tree stream.
	for _, t := range []struct{ subj, stream string }{
		{broker.EndSubject(job), broker.StreamName(job)},
		{broker.TreeEndSubject(job), broker.TreeStreamName(job)},
	} {
		m := &nats.Msg{Subject: t.subj, Data: []byte(body), Header: nats.Header{}}
		if _, _, err := broker.PublishRetry(ctx, js, m, job+"/"+id, t.stream, broker.DefaultRetry, nil); err != nil {
			return fmt.Errorf("reducer: end signal of job %s on %s: %w", job, t.subj, err)
		}
	}
	return nil
}

// endClock is the clock an end message starts, for rank timeout timeout:
// the message's time, or, for one that gives the ranks less ("within D"),
// a clock set back so that a leaf's deadline falls D after the message.
// An inner node's deadline is ChildGrace per level later, as always: its
// children seal their ranks first and may be slow to deliver (a cluster's
// election).
func endClock(at time.Time, body []byte, timeout time.Duration) time.Time {
	_, rest, ok := strings.Cut(string(body), " within ")
	if !ok {
		return at
	}
	d, err := time.ParseDuration(strings.TrimSpace(rest))
	if err != nil || d < 0 || d >= timeout {
		return at
	}
	return at.Add(d - timeout)
}

// WaitFinal waits until job's final profile is in the tree stream
// (published by a root running anywhere) and returns it.
func WaitFinal(ctx context.Context, conn *broker.Conn, job string) (*profile.Profile, error) {
	stream, err := conn.TreeStream(ctx, job)
	if err != nil {
		return nil, err
	}
	subj := broker.FinalSubject(job)
	var oc jetstream.Consumer
	err = broker.RetryAPI(ctx, broker.DefaultRetry, func(ctx context.Context) error {
		oc, err = stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}, DeliverPolicy: jetstream.DeliverAllPolicy})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reducer: waiting for the final profile of job %s: %w", job, err)
	}
	var asm *partialAsm
	for {
		m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("reducer: waiting for the final profile of job %s: %w", job, ctx.Err())
			}
			if errors.Is(err, nats.ErrTimeout) || broker.Retryable(err) {
				continue
			}
			return nil, fmt.Errorf("reducer: waiting for the final profile of job %s: %w", job, err)
		}
		h, err := parsePartialHeader(m.Data())
		if err != nil || h.Job != job || h.Flags&flagFinal == 0 {
			continue
		}
		if asm == nil || asm.h.Sum != h.Sum || asm.h.PVer != h.PVer {
			asm = newPartialAsm(h)
		}
		complete, err := asm.add(h, m.Data(), 0)
		if err != nil || !complete {
			continue
		}
		body, err := asm.body()
		if err != nil {
			asm = nil
			continue
		}
		return decodePartial(asm.h, body)
	}
}
