package reducer

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

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
