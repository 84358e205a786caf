// Package publish sends a rank's profile items to the broker: each item is
// encoded as batch chunks no larger than the server's max payload and
// published asynchronously to the job's stream with a message id, so a
// retried publish is stored once. A bounded window of unacknowledged chunks
// makes a slow or full broker slow the collector down; nothing is dropped
// silently: a chunk that cannot be stored is an error from Publish or Close
// naming its rank, sequence and subject.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

// Config configures a Publisher.
type Config struct {
	// Job whose stream the items go to (the stream must exist).
	Job string
	// Window is the most chunks published and not yet acknowledged by the
	// stream (default 64). Publish blocks while it is full.
	Window int
	// AckTimeout bounds the wait for one acknowledgement before the chunk
	// is published again (default 10s).
	AckTimeout time.Duration
	// Retry is the backoff for transient failures (default
	// broker.DefaultRetry); its horizon must stay below the stream's
	// duplicate window.
	Retry broker.RetryPolicy
	// MaxPayload caps a chunk message (default: the server's max payload
	// less room for headers).
	MaxPayload int
	// Logger receives retry and failure lines (default slog.Default()).
	Logger *slog.Logger
}

// Stats are the publisher's counters.
type Stats struct {
	Items      uint64        // items handed to Publish and encoded
	Chunks     uint64        // chunk messages published
	Bytes      uint64        // chunk bytes published
	Acked      uint64        // chunks the stream acknowledged
	Duplicates uint64        // acknowledgements saying the stream had the chunk already
	Retries    uint64        // publishes repeated after a transient failure
	Full       uint64        // of them, refused by a full stream (pushback)
	Failed     uint64        // chunks given up on
	InFlight   int           // chunks awaiting acknowledgement now
	Blocked    time.Duration // time Publish spent waiting for the window
	// What the window bounds: chunk bytes held awaiting acknowledgement,
	// now and at most so far (at most Window chunks of MaxPayload bytes).
	InFlightBytes, PeakInFlight, PeakInFlightBytes int
}

// Publisher publishes items of one job. It is safe for concurrent use.
type Publisher struct {
	cfg    Config
	conn   Conn
	js     jetstream.JetStream
	stream string
	log    *slog.Logger
	window chan struct{}
	abort  chan struct{} // closed when Close gives up waiting

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed while inflight == 0
	err      error         // first unrecoverable error
	closed   bool
	// Bytes held by chunks in flight, and the high-water marks, so that
	// bounded memory can be checked rather than assumed.
	inflightBytes, peak, peakBytes int

	items, chunks, bytes, acked, dups, retries, full, failed atomic.Uint64
	blocked                                                  atomic.Int64
}

// Conn is what a publisher needs of a broker connection (a *broker.Conn):
// its chunk size, a JetStream context, and the server's last error to
// name beside a failed chunk.
type Conn interface {
	ChunkPayload() int
	NewJetStream(ackTimeout time.Duration) (jetstream.JetStream, error)
	AsyncErr() error
}

// New returns a publisher of cfg.Job's items on conn.
func New(conn Conn, cfg Config) (*Publisher, error) {
	if err := broker.ValidateJob(cfg.Job); err != nil {
		return nil, err
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 10 * time.Second
	}
	if cfg.Retry == (broker.RetryPolicy{}) {
		cfg.Retry = broker.DefaultRetry
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = conn.ChunkPayload()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := conn.NewJetStream(cfg.AckTimeout)
	if err != nil {
		return nil, fmt.Errorf("publish: job %s: %w", cfg.Job, err)
	}
	idle := make(chan struct{})
	close(idle)
	return &Publisher{cfg: cfg, conn: conn, js: js, stream: broker.StreamName(cfg.Job),
		log: cfg.Logger.With("job", cfg.Job), window: make(chan struct{}, cfg.Window),
		abort: make(chan struct{}), idle: idle}, nil
}

// Publish encodes item (one (rank, seq) item; done marks the rank's done
// item) and publishes its chunks asynchronously. It returns once every
// chunk is handed to the connection, blocking while the window of
// unacknowledged chunks is full. It returns the first unrecoverable error
// of any earlier chunk, so a collector stops feeding a broker that refuses
// its data.
func (p *Publisher) Publish(ctx context.Context, item *profile.Profile, done bool) error {
	if err := p.state(); err != nil {
		return err
	}
	if item.Job != p.cfg.Job {
		return fmt.Errorf("publish: item of job %q given to the publisher of job %q", item.Job, p.cfg.Job)
	}
	chunks, err := profile.EncodeBatch(item, done, p.cfg.MaxPayload)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return p.PublishChunks(ctx, chunks)
}

// PublishChunks publishes one item already encoded by profile.EncodeBatch
// (with a max payload no larger than the publisher's), for a collector that
// encodes on other goroutines or replays recorded batches. The chunks'
// headers give job, rank, sequence and the done flag.
func (p *Publisher) PublishChunks(ctx context.Context, chunks [][]byte) error {
	if err := p.state(); err != nil {
		return err
	}
	hs := make([]*profile.Header, len(chunks))
	for i, c := range chunks {
		h, err := profile.ParseHeader(c)
		if err != nil {
			return fmt.Errorf("publish: chunk %d: %w", i, err)
		}
		if h.Job != p.cfg.Job {
			return fmt.Errorf("publish: rank %d seq %d: chunk of job %q given to the publisher of job %q", h.Rank, h.Seq, h.Job, p.cfg.Job)
		}
		if len(c) > p.cfg.MaxPayload {
			return fmt.Errorf("publish: rank %d seq %d: chunk of %d bytes exceeds the max payload %d", h.Rank, h.Seq, len(c), p.cfg.MaxPayload)
		}
		hs[i] = h
	}
	p.items.Add(1)
	for i, c := range chunks {
		h := hs[i]
		subj := broker.BatchSubject(p.cfg.Job, h.Rank)
		if h.Flags&profile.FlagDone != 0 {
			subj = broker.DoneSubject(p.cfg.Job, h.Rank)
		}
		if err := p.acquire(ctx, h, subj, len(c)); err != nil {
			return err
		}
		p.chunks.Add(1)
		p.bytes.Add(uint64(len(c)))
		go p.send(h, subj, c)
	}
	return nil
}

func (p *Publisher) state() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.closed {
		return errors.New("publish: publisher closed")
	}
	return nil
}

// acquire takes a window slot, waiting while the window is full.
func (p *Publisher) acquire(ctx context.Context, h *profile.Header, subj string, size int) error {
	select {
	case p.window <- struct{}{}:
	default:
		t0 := time.Now()
		select {
		case p.window <- struct{}{}:
			p.blocked.Add(int64(time.Since(t0)))
		case <-ctx.Done():
			return fmt.Errorf("publish: rank %d seq %d chunk %d/%d on %s: waiting for the window: %w", h.Rank, h.Seq, h.Chunk+1, h.Chunks, subj, ctx.Err())
		}
	}
	p.mu.Lock()
	if p.inflight == 0 {
		p.idle = make(chan struct{})
	}
	p.inflight++
	p.inflightBytes += size
	p.peak = max(p.peak, p.inflight)
	p.peakBytes = max(p.peakBytes, p.inflightBytes)
	p.mu.Unlock()
	return nil
}

func (p *Publisher) release(size int) {
	<-p.window
	p.mu.Lock()
	p.inflight--
	p.inflightBytes -= size
	if p.inflight == 0 {
		close(p.idle)
	}
	p.mu.Unlock()
}

// send publishes one chunk until the stream acknowledges it, the retry
// horizon passes, or Close gives up.
func (p *Publisher) send(h *profile.Header, subj string, data []byte) {
	defer p.release(len(data))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	m := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
	ack, tries, err := broker.PublishRetry(ctx, p.js, m, h.ID(), p.stream, p.cfg.Retry, func(err error) {
		p.retries.Add(1)
		if broker.Full(err) {
			p.full.Add(1)
		}
	})
	if tries > 1 && err == nil {
		p.log.Debug("publish: stored after retries", "rank", h.Rank, "seq", h.Seq, "chunk", h.Chunk, "subject", subj, "tries", tries)
	}
	if err == nil {
		p.acked.Add(1)
		if ack.Duplicate {
			p.dups.Add(1)
		}
		return
	}
	p.failed.Add(1)
	if ae := p.conn.AsyncErr(); ae != nil {
		err = fmt.Errorf("%w (last server error: %v)", err, ae)
	}
	err = fmt.Errorf("publish: rank %d seq %d chunk %d/%d on %s: %w", h.Rank, h.Seq, h.Chunk+1, h.Chunks, subj, err)
	p.log.Error("publish: chunk not stored", "rank", h.Rank, "seq", h.Seq, "chunk", h.Chunk, "subject", subj, "err", err)
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// Flush waits until every chunk published so far is acknowledged (or given
// up on) and returns the first unrecoverable error.
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	idle, n := p.idle, p.inflight
	p.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		return fmt.Errorf("publish: job %s: %d chunks still unacknowledged: %w", p.cfg.Job, n, ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close waits for every acknowledgement and returns the first
// unrecoverable error. If ctx ends first, the chunks still in flight are
// abandoned and the error says how many.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(ctx)
	if ctx.Err() != nil && !already {
		close(p.abort)
	}
	return err
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	inflight, inflightBytes, peak, peakBytes := p.inflight, p.inflightBytes, p.peak, p.peakBytes
	p.mu.Unlock()
	return Stats{Items: p.items.Load(), Chunks: p.chunks.Load(), Bytes: p.bytes.Load(), Acked: p.acked.Load(),
		Duplicates: p.dups.Load(), Retries: p.retries.Load(), Full: p.full.Load(), Failed: p.failed.Load(), InFlight: inflight,
		Blocked: time.Duration(p.blocked.Load()), InFlightBytes: inflightBytes, PeakInFlight: peak, PeakInFlightBytes: peakBytes}
}
