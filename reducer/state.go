package reducer

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// A node runs one intake loop (node.go) whatever its role: it pulls its inputs,
// keeps the rank-timeout clock, publishes its state as versions of its
// partial, acknowledges inputs once a version covering them is durable,
// and resumes from the broker after a restart. Its role is what it
// merges: a leaf its ranks' batches (leaf.go), an inner node its
// children's partials (inner.go); the root is one or the other.
type node struct {
	cfg  Config
	spec *Node
	log  *slog.Logger
	js   jetstream.JetStream
	// stream holds the node's inputs: the input stream for a leaf, the
	// tree stream for an inner node; tree holds its own partials.
	stream, tree jetstream.Stream
	stats        NodeStats
	role         role
	partials     bool // publishes partials while its inputs run (all but an inner root)

	dirty       bool
	deferred    []deferredAck
	pver        uint64
	hk          chan func(context.Context) // housekeeping: deletions off the merge path
	clock       time.Time
	lastDone    time.Time
	lastPublish time.Time
	publishCost time.Duration // of the last partial: merging (inner nodes), encoding and storing
	pending     uint64        // inputs the consumer has not yet delivered
}

// role is what a leaf and an inner node do differently.
type role interface {
	// open opens what the role reads (a leaf: the input stream).
	open(ctx context.Context) error
	// inputs are the subjects of the node's consumer; fromAckFloor: a
	// restarted consumer resumes after its acknowledgement floor (else it
	// replays its subjects from the start).
	inputs() (subjects []string, fromAckFloor bool)
	// resume restores the role from the node's own latest complete
	// partial; a result says the node has nothing left to do.
	resume(ctx context.Context, a *partialAsm) (*NodeResult, error)
	// arrived counts an input's bytes, before anything is checked.
	arrived(data []byte)
	// accept takes an input other than the end signal.
	accept(m jetstream.Msg, md *jetstream.MsgMetadata, subj broker.Subject, data []byte)
	// complete: every rank below the node is finished.
	complete() bool
	// overdue: the node's deadline passed (the node checks first that no
	// input waits).
	overdue(now time.Time) bool
	// expire seals what the deadline leaves unfinished.
	expire()
	// snapshot is the state to publish.
	snapshot() *profile.Profile
	// below: batch items merged and batch bytes consumed below the node.
	below() (batches, bytesIn uint64)
	// view fills the node's own progress.
	view(pr *Progress)
	// published: a new version of the node's partial is stored.
	published()
	// acked: an input of rank r (>= 0) at stream sequence seq was
	// acknowledged.
	acked(m jetstream.Msg, r int32, seq uint64)
}

type deferredAck struct {
	m    jetstream.Msg
	rank int32 // batch inputs: the rank (for purging), else -1
	seq  uint64
}

func (n *node) count(f func(*counters)) {
	if n.cfg.counters != nil {
		f(n.cfg.counters)
	}
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
	if rank >= 0 {
		n.role.acked(m, rank, seq)
	}
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
