// Package collector is gpuprof's per-rank stage: it starts the application
// with the injection library (or replays a recorded raw stream), decodes
// the stream, analyses it online (package analyze) and publishes the
// results as profile items, a batch every N access records or T seconds,
// then the rank's done item. See docs/collector.md.
package collector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/analyze"
	"gpuprof/collector/proctree"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// Publisher sends items to the reduction tree. Publish blocks while the
// publisher's bounded in-flight window is full: that is the collector's
// backpressure. done marks the rank's last item.
type Publisher interface {
	Publish(ctx context.Context, item *profile.Profile, done bool) error
}

// Options configure one rank's collection.
type Options struct {
	Job string // default: $GPUPROF_JOB
	// Rank: -1 finds it in the environment (OMPI_COMM_WORLD_RANK,
	// PMIX_RANK, PMI_RANK, SLURM_PROCID, in that order; 0 if none).
	Rank int

	// Replay reads a recorded stream instead of running an application;
	// "{rank}" or "{rank:N}" in the path is replaced (see ExpandRank).
	Replay string
	// Command is the application and its arguments.
	Command []string
	// InjectLib is the injection library; default $GPUPROF_INJECT, else
	// lib/libgpuprof_inject.so next to the running executable.
	InjectLib string
	// Mode: redundancy, pcsampling or hybrid ("" leaves the library's
	// default, redundancy).
	Mode string
	// BlockSampling (P) and KernelSampling (K); 0 leaves the library's
	// defaults (P = 50, K = 1).
	BlockSampling, KernelSampling int
	// Record tees the raw stream to this file (the rank expanded as in
	// Replay).
	Record string

	Publisher Publisher
	// BatchRecords: publish an item every this many access records
	// (default 1<<18). BatchInterval: and at least this often while data
	// arrives (default 5s).
	BatchRecords  uint64
	BatchInterval time.Duration

	// Workers analysing records (default GOMAXPROCS); MemWorkers for reuse
	// distances and bank conflicts (default Workers).
	Workers, MemWorkers int
	// ReuseSampling: reuse distances are measured in one traced block in
	// this many of each launch (0: the analysis' default; 1: every block).
	ReuseSampling int
	// ResolveEvery: access records per worker between spatial resolutions
	// (0: the analysis' default).
	ResolveEvery uint64
	// CandidateLimit: spatial candidates a worker may hold before a
	// barrier is brought forward (0: the analysis' default).
	CandidateLimit int64
	// QueueDepth: frames each analysis worker's queue holds (0: default).
	QueueDepth int
	// Structures gives GPU module structure; default: nvdisasm when on
	// PATH, else the nvdisasm outputs in SASSFiles.
	Structures analyze.StructureSource
	SASSFiles  []string
	// Share, when set, shares nvdisasm listings with the job's other ranks
	// through the broker's module bucket (one rank disassembles each
	// module; docs/sass.md). Used by the default Structures only.
	Share *broker.Conn
	// OnModule is called once per module content hash with its cubin.
	OnModule func(hash profile.ModuleHash, cubin []byte)
	// HashValues, when set, keeps no value read from the application's
	// memory: value sketches hold keyed hashes (analyze.Options.HashValues).
	HashValues *analyze.ValueHasher

	// The application's standard streams (default: the collector's).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// DrainTimeout bounds how long streams may stay open after the
	// application exited (default 30s).
	DrainTimeout time.Duration
	// Interrupts delivers the signals the rank gets (gpuprof collect
	// passes SIGINT and SIGTERM). The first is passed on to the
	// application (a replay stops reading); the rank's done item names it,
	// which makes the rank incomplete; what was measured is still analysed
	// and published, for at most StopTimeout. A second one kills the
	// application with its children and cuts the analysis at once.
	// Cancelling Run's context is a first interruption by SIGTERM.
	Interrupts <-chan os.Signal
	// StopTimeout bounds the analysis after an interruption (default 5s).
	StopTimeout time.Duration
	// OnAppExit is called once when the application has exited (for a
	// replay, when its stream's END is analysed) with its status: the
	// collector may go on analysing after it.
	OnAppExit func(code int)
	// Logf receives progress and warnings (nil: silent).
	Logf func(format string, args ...any)
}

// Progress counts what a collector has done so far.
type Progress struct {
	Bytes   uint64 // raw stream bytes read
	Frames  uint64
	Records uint64 // access records analysed
	Items   uint64 // items published (the done item included)
}

// ExitError carries a non-zero exit status of the application.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("application exited with status %d", e.Code) }

// ExitCode is the exit status gpuprof collect should end with: the
// application's, or 1 for any other error, 0 for nil.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}

// StreamError is a raw stream the collector could not read to its end.
// Everything decoded before Offset was analysed and published.
type StreamError struct {
	Rank   int32
	Source string
	Offset int64
	Err    error
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("rank %d: %s: %v", e.Rank, e.Source, e.Err)
}

func (e *StreamError) Unwrap() error { return e.Err }

// RankEnv are the environment variables the rank is taken from, in order.
var RankEnv = []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}

// ResolveRank returns explicit if it is >= 0, else the first of RankEnv
// that is set (naming it), else 0.
func ResolveRank(explicit int, getenv func(string) string) (int32, string, error) {
	if explicit >= 0 {
		if explicit > 1<<30 {
			return 0, "", fmt.Errorf("rank %d out of range", explicit)
		}
		return int32(explicit), "--rank", nil
	}
	for _, v := range RankEnv {
		s := getenv(v)
		if s == "" {
			continue
		}
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r < 0 || r > 1<<30 {
			return 0, v, fmt.Errorf("environment %s=%q is not a rank", v, s)
		}
		return int32(r), v, nil
	}
	return 0, "default", nil
}

// Collector collects one rank.
type Collector struct {
	o    Options
	rank int32

	bytes, frames, records, items atomic.Uint64

	mu     sync.Mutex // publishing: sequence numbers and the done item's inputs
	seq    uint32
	hello  *rawstream.Hello
	end    int32
	issues []string
	exit   int
	recErr error

	// Interruptions (their own lock: a publisher may ask Interrupted
	// while the done item is published under mu).
	imu  sync.Mutex
	intr os.Signal // the first interruption, nil if none
	proc *os.Process
	// stopRead ends a replay's reading (the first interruption); cut ends
	// the analysis (StopTimeout after it, or a second one).
	stopRead, cut context.CancelFunc
	exitOnce      sync.Once
}

// New checks the options and finds the rank.
func New(o Options) (*Collector, error) {
	if o.Publisher == nil {
		return nil, errors.New("collector: no publisher")
	}
	if (o.Replay == "") == (len(o.Command) == 0) {
		return nil, errors.New("collector: give either a recorded stream to replay or a command to run")
	}
	if o.Job == "" {
		o.Job = os.Getenv("GPUPROF_JOB")
	}
	if o.Job == "" {
		return nil, errors.New("collector: no job id (--job or GPUPROF_JOB)")
	}
	if o.Mode != "" {
		if _, err := rawstream.ParseMode(o.Mode); err != nil {
			return nil, fmt.Errorf("collector: %w", err)
		}
	}
	if o.BatchRecords == 0 {
		o.BatchRecords = 1 << 18
	}
	if o.BatchInterval <= 0 {
		o.BatchInterval = 5 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 5 * time.Second
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	r, _, err := ResolveRank(o.Rank, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	if o.Structures == nil {
		st := &analyze.SASS{Files: o.SASSFiles, Logf: o.Logf}
		if o.Share != nil {
			st.Share = BrokerListings(o.Share, o.Job, r)
		}
		o.Structures = st
	}
	o.Replay = ExpandRank(o.Replay, r)
	o.Record = ExpandRank(o.Record, r)
	return &Collector{o: o, rank: r, end: -1, exit: -1}, nil
}

var rankPattern = regexp.MustCompile(`\{rank(?::([0-9]))?\}`)

// ExpandRank replaces "{rank}" in path by the rank and "{rank:N}" by the
// rank zero-padded to N digits (synth.FileName uses "rank{rank:4}.gpraw").
func ExpandRank(path string, rank int32) string {
	return rankPattern.ReplaceAllStringFunc(path, func(m string) string {
		w := 0
		if sub := rankPattern.FindStringSubmatch(m); sub[1] != "" {
			w, _ = strconv.Atoi(sub[1])
		}
		return fmt.Sprintf("%0*d", w, rank)
	})
}

// Collect runs one rank's collection: New, then Run.
func Collect(ctx context.Context, o Options) error {
	c, err := New(o)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Rank is the rank being collected.
func (c *Collector) Rank() int32 { return c.rank }

// Progress returns the counters so far; safe to call at any time.
func (c *Collector) Progress() Progress {
	return Progress{Bytes: c.bytes.Load(), Frames: c.frames.Load(), Records: c.records.Load(), Items: c.items.Load()}
}

// ExitCode is the application's exit status once Run returned (-1 if it
// is not known).
func (c *Collector) ExitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exit
}

func (c *Collector) logf(format string, args ...any) {
	if c.o.Logf != nil {
		c.o.Logf("rank %d: "+format, append([]any{c.rank}, args...)...)
	}
}

func (c *Collector) issue(s string) {
	c.mu.Lock()
	c.issues = append(c.issues, s)
	c.mu.Unlock()
}

// Run collects until the application and its streams are done (or the
// replay ends), publishes the done item and returns: nil, an *ExitError
// with the application's non-zero status, or what went wrong (joined with
// the exit status).
func (c *Collector) Run(ctx context.Context) error {
	// Interruptions end the reading (a replay) and, later, the analysis,
	// not the publishing of what was measured: those contexts are the
	// collector's own.
	readCtx, stopRead := context.WithCancel(context.WithoutCancel(ctx))
	cutCtx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRead()
	defer cut()
	c.imu.Lock()
	c.stopRead, c.cut = stopRead, cut
	c.imu.Unlock()
	stopWatch := c.watchInterrupts(ctx)
	var err error
	if c.o.Replay != "" {
		err = c.replay(readCtx)
	} else {
		err = c.run(cutCtx)
	}
	stopWatch()
	dctx := ctx
	if ctx.Err() != nil || c.Interrupted() != nil {
		// Interrupted: the done item still goes out, within a bound, so
		// that the reducers know this rank's count of items.
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	derr := c.publishDone(dctx)
	c.mu.Lock()
	code := c.exit
	recErr := c.recErr
	c.mu.Unlock()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if recErr != nil {
		errs = append(errs, recErr)
	}
	if derr != nil {
		errs = append(errs, derr)
	}
	if code > 0 {
		errs = append(errs, &ExitError{Code: code})
	}
	return errors.Join(errs...)
}

// Interrupted is the signal that interrupted the rank, nil if none did.
func (c *Collector) Interrupted() os.Signal {
	c.imu.Lock()
	defer c.imu.Unlock()
	return c.intr
}

// watchInterrupts follows Options.Interrupts and Run's context until the
// returned function is called.
func (c *Collector) watchInterrupts(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctxDone := ctx.Done()
		for {
			select {
			case <-done:
				return
			case <-ctxDone:
				ctxDone = nil
				c.Interrupt(syscall.SIGTERM)
			case sig := <-c.o.Interrupts:
				c.Interrupt(sig)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// Interrupt handles a signal for the rank: the first is passed on to the
// application (a replay stops reading) and bounds what is left of the
// analysis by StopTimeout; a second kills the application and its
// children and cuts the analysis now.
func (c *Collector) Interrupt(sig os.Signal) {
	c.imu.Lock()
	first := c.intr == nil
	if first {
		c.intr = sig
	}
	proc, stopRead, cut := c.proc, c.stopRead, c.cut
	c.imu.Unlock()
	if first {
		c.issue("interrupted by " + proctree.SignalName(sig))
	}
	if !first {
		c.logf("second interruption (%s): killing the application, cutting the analysis", proctree.SignalName(sig))
		if proc != nil {
			proctree.Signal(proctree.Descendants(proc.Pid), syscall.SIGKILL)
			proc.Kill()
		}
		if cut != nil {
			cut()
		}
		return
	}
	c.logf("interrupted by %s: passing it on; the analysis gets %v", proctree.SignalName(sig), c.o.StopTimeout)
	if proc != nil {
		proc.Signal(sig)
	}
	if stopRead != nil {
		stopRead()
	}
	if cut != nil {
		time.AfterFunc(c.o.StopTimeout, cut)
	}
}

// appExited reports the application's end once.
func (c *Collector) appExited(code int) {
	c.exitOnce.Do(func() {
		if c.o.OnAppExit != nil {
			c.o.OnAppExit(code)
		}
	})
}

func (c *Collector) replay(ctx context.Context) error {
	f, err := os.Open(c.o.Replay)
	if err != nil {
		c.issue("replay: " + err.Error())
		return fmt.Errorf("rank %d: %w", c.rank, err)
	}
	defer f.Close()
	err = c.stream(ctx, f, "replay "+c.o.Replay, c.o.Record)
	c.mu.Lock()
	if c.end >= 0 {
		c.exit = int(c.end) // the recorded application's status
	}
	c.mu.Unlock()
	return err
}

// publish sends one item with the next sequence number. An analysis that
// fails while building the item sets *failed (the stream is then only
// drained) and is recorded for the done item; only a publishing error is
// returned.
func (c *Collector) publish(ctx context.Context, a *analyze.Analyzer, source string, failed *bool) error {
	if *failed {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := a.Flush(c.seq)
	if err != nil {
		*failed = true
		c.issues = append(c.issues, fmt.Sprintf("%s: analysis stopped: %s", source, firstLine(err)))
		if c.o.Logf != nil {
			c.o.Logf("rank %d: %s: analysis stopped: %v", c.rank, source, err)
		}
		return nil
	}
	if p == nil {
		return nil
	}
	if err := c.o.Publisher.Publish(ctx, p, false); err != nil {
		return fmt.Errorf("rank %d: publishing item %d: %w", c.rank, c.seq, err)
	}
	c.seq++
	c.items.Add(1)
	return nil
}

func (c *Collector) publishDone(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	exit := int32(c.exit)
	if c.o.Replay != "" || c.exit < 0 {
		exit = c.end
	}
	done, err := analyze.DoneItem(c.o.Job, c.rank, c.seq, c.hello, exit, strings.Join(c.issues, "; "))
	if err != nil {
		return err
	}
	if err := c.o.Publisher.Publish(ctx, done, true); err != nil {
		return fmt.Errorf("rank %d: publishing the done item (%d items before it): %w", c.rank, c.seq, err)
	}
	c.items.Add(1)
	return nil
}

// tee writes the stream to the record file. A failing write (a full disk)
// stops the recording, not the collection.
type tee struct {
	f   *os.File
	c   *Collector
	err error
}

func (t *tee) Write(p []byte) (int, error) {
	if t.err == nil {
		if _, err := t.f.Write(p); err != nil {
			t.err = err
			t.c.recordFailed(fmt.Errorf("rank %d: recording the stream to %s: %w (the recording is cut; the analysis went on)", t.c.rank, t.f.Name(), err))
		}
	}
	return len(p), nil
}

func (t *tee) close() {
	if err := t.f.Close(); err != nil && t.err == nil {
		t.c.recordFailed(fmt.Errorf("rank %d: recording the stream to %s: %w", t.c.rank, t.f.Name(), err))
	}
}

// recordFailed keeps the first recording error: it is returned by Run but
// does not make the profile incomplete.
func (c *Collector) recordFailed(err error) {
	c.logf("%v", err)
	c.mu.Lock()
	if c.recErr == nil {
		c.recErr = err
	}
	c.mu.Unlock()
}

// counter counts the bytes read through it.
type counter struct {
	r io.Reader
	n *atomic.Uint64
}

func (c counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

type decoded struct {
	f    rawstream.Frame
	off  int64
	size int64
	err  error
}

// readAhead bounds the decoded frames the stream reader holds ahead of the
// analysis (bytes of stream).
const readAhead = 256 << 20

// byteBudget is a counting semaphore of bytes. One acquisition larger than
// the whole budget is let through when nothing is held, so a huge frame
// cannot deadlock the reader.
type byteBudget struct {
	mu     sync.Mutex
	cond   *sync.Cond
	used   int64
	max    int64
	closed bool
}

func newByteBudget(max int64) *byteBudget {
	b := &byteBudget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire takes n bytes, waiting while the budget is spent, and returns how
// long it waited (0 after close).
func (b *byteBudget) acquire(n int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var t0 time.Time
	for !b.closed && b.used > 0 && b.used+n > b.max {
		if t0.IsZero() {
			t0 = time.Now()
		}
		b.cond.Wait()
	}
	b.used += n
	if t0.IsZero() {
		return 0
	}
	return time.Since(t0)
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

func (b *byteBudget) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
}

// logAnalysis writes the stream's final account of the analysis: records,
// the workers' busy time against the wall time, how long the reader had
// to wait (the analysis was the bottleneck), and how long the analysis ran
// on after the stream's END, for the overhead table's accounts.
func (c *Collector) logAnalysis(a *analyze.Analyzer, source string, wall, readerWait, endAt time.Duration) {
	if c.o.Logf == nil {
		return
	}
	b := a.Busy()
	recs := c.records.Load()
	rate := 0.0
	if b.WorkerBusy > 0 {
		rate = float64(recs) / b.WorkerBusy.Seconds()
	}
	msg := fmt.Sprintf("%s: analysed %d access records in %v: workers busy %v (%d workers, %.0f records/s per busy core), "+
		"analysis loop waited %v (full worker queues %v, full memory worker queues %v, barriers %v of which resolving %v, items %v), socket reader held up %v; %d barriers, %d early; memory workers busy %v",
		source, recs, wall.Round(time.Millisecond), b.WorkerBusy.Round(time.Millisecond), b.Workers, rate,
		(b.Blocked + b.MemBlocked + b.BarrierWait + b.Resolve + b.Build).Round(time.Millisecond), b.Blocked.Round(time.Millisecond), b.MemBlocked.Round(time.Millisecond),
		(b.BarrierWait + b.Resolve).Round(time.Millisecond), b.Resolve.Round(time.Millisecond), b.Build.Round(time.Millisecond), readerWait.Round(time.Millisecond),
		b.Barriers, b.EarlyBarriers, b.MemBusy.Round(time.Millisecond))
	if endAt > 0 {
		// The analysis' tail: what the run waited for after the application's END.
		msg += fmt.Sprintf("; END read at %v, the analysis finished %v after it", endAt.Round(time.Millisecond), (wall - endAt).Round(time.Millisecond))
	}
	if s, ok := c.o.Structures.(*analyze.SASS); ok {
		st := s.Stats()
		msg += fmt.Sprintf("; modules: %d disassembled, %d shared by other ranks, %d fallbacks", st.Disassembled, st.Shared, st.Fallbacks)
	}
	c.logf("%s", msg)
}

// stream decodes and analyses one raw stream, publishing items as it goes.
// A stream that ends early or is corrupt is an error naming the rank and
// the offset; everything before it is published. When the analysis fails,
// the rest of the stream is still read (and recorded) so that the
// application never blocks on a collector that stopped listening.
func (c *Collector) stream(ctx context.Context, r io.Reader, source, record string) (err error) {
	raw := io.Reader(counter{r, &c.bytes})
	in := raw
	if record != "" {
		rec, err := os.Create(record)
		if err != nil {
			c.recordFailed(fmt.Errorf("rank %d: recording the stream: %w", c.rank, err))
		} else {
			t := &tee{f: rec, c: c}
			defer t.close()
			in = io.TeeReader(raw, t)
		}
	}
	a := analyze.New(analyze.Options{Job: c.o.Job, Rank: c.rank, Workers: c.o.Workers, MemWorkers: c.o.MemWorkers, ReuseSampling: c.o.ReuseSampling, ResolveEvery: c.o.ResolveEvery, CandidateLimit: c.o.CandidateLimit, QueueDepth: c.o.QueueDepth, Structures: c.o.Structures, OnModule: c.o.OnModule, HashValues: c.o.HashValues})
	defer a.Close()

	// The reader runs ahead of the analysis by up to readAhead bytes of
	// decoded frames: the library's bursts (a drained device buffer at each
	// kernel end) and the analysis' pauses (barriers, items, a module's
	// disassembly) are absorbed here rather than in the library's host
	// queue, which drops records when full.
	frames := make(chan decoded, 1<<14)
	budget := newByteBudget(readAhead)
	var readerWait time.Duration // the reader waiting for budget: the socket not drained
	var endAt time.Duration      // when END was read: the application's end
	stop := make(chan struct{})
	t0 := time.Now()
	defer func() { c.logAnalysis(a, source, time.Since(t0), readerWait, endAt) }()
	go func() {
		defer close(frames)
		d := rawstream.NewDecoder(in)
		for {
			prev := d.Offset()
			f, err := d.Next()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				select {
				case frames <- decoded{err: err, off: d.Bytes()}:
				case <-stop:
				}
				// After an error keep reading, so that a writer on a socket
				// never blocks; discard what comes.
				io.Copy(io.Discard, raw)
				return
			}
			c.frames.Add(1)
			if _, ok := f.(*rawstream.End); ok {
				endAt = time.Since(t0)
			}
			size := d.Offset() - prev
			if w := budget.acquire(size); w > 0 {
				readerWait += w // read by the deferred log after the goroutine ended
			}
			select {
			case frames <- decoded{f: f, off: d.Offset(), size: size}:
			case <-stop:
				io.Copy(io.Discard, raw)
				return
			}
		}
	}()
	defer func() {
		close(stop)
		budget.close()
		for range frames { // let the decoder goroutine finish
		}
	}()

	tick := time.NewTicker(c.o.BatchInterval)
	defer tick.Stop()
	last := time.Now()
	failed := false
	var streamErr error
	for {
		select {
		case <-ctx.Done():
			if c.Interrupted() == nil {
				c.issue("interrupted: " + ctx.Err().Error())
			} else {
				c.issue(source + ": stopped by the interruption; what was analysed by then is published")
			}
			// What was analysed still goes out, within a bound.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			c.publish(pctx, a, source, &failed)
			cancel()
			// The reader may be blocked on a stream that never ends (a
			// hung application's socket, a pipe): closing it lets the
			// reader go.
			if cl, ok := r.(io.Closer); ok {
				cl.Close()
			}
			return ctx.Err()
		case <-tick.C:
			if a.Pending() > 0 && time.Since(last) >= c.o.BatchInterval {
				if perr := c.publish(ctx, a, source, &failed); perr != nil {
					return perr
				}
				last = time.Now()
			}
		case d, ok := <-frames:
			if !ok {
				return streamErr
			}
			budget.release(d.size)
			if d.err != nil || d.f == nil {
				if d.err != nil {
					var re *rawstream.Error
					off := d.off
					if errors.As(d.err, &re) {
						off = re.Offset
					}
					streamErr = &StreamError{Rank: c.rank, Source: source, Offset: off, Err: d.err}
					c.issue(streamErr.Error())
				}
				if perr := c.publish(ctx, a, source, &failed); perr != nil {
					return errors.Join(streamErr, perr)
				}
				if n, first := a.Anomalies(); n > 0 {
					c.issue(fmt.Sprintf("%s: %d inconsistent frames skipped (first at %s)", source, n, first))
				}
				return streamErr
			}
			if failed {
				continue
			}
			switch f := d.f.(type) {
			case *rawstream.Hello:
				c.mu.Lock()
				if c.hello == nil {
					c.hello = f
				}
				c.mu.Unlock()
			case *rawstream.End:
				c.mu.Lock()
				c.end = f.ExitCode
				c.mu.Unlock()
				if c.o.Replay != "" {
					c.appExited(int(f.ExitCode))
				}
			case *rawstream.Access:
				c.records.Add(uint64(f.Count))
			}
			if aerr := a.Add(d.f, d.off); aerr != nil {
				// Keep what was flushed; drain the rest.
				failed = true
				c.issue(fmt.Sprintf("%s: analysis stopped at offset %d: %v", source, d.off, firstLine(aerr)))
				c.logf("analysis stopped at offset %d: %v", d.off, aerr)
				continue
			}
			if a.Pending() >= c.o.BatchRecords {
				if perr := c.publish(ctx, a, source, &failed); perr != nil {
					return perr
				}
				last = time.Now()
			}
		}
	}
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// DefaultInjectLib is where the injection library is looked for: the
// GPUPROF_INJECT environment variable, else lib/libgpuprof_inject.so in the
// directory of the running executable.
func DefaultInjectLib() string {
	if p := os.Getenv("GPUPROF_INJECT"); p != "" {
		return p
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return filepath.Join(filepath.Dir(exe), "lib", "libgpuprof_inject.so")
}

// brokerListings shares nvdisasm listings through a job's module bucket
// (analyze.ListingShare).
type brokerListings struct {
	conn       *broker.Conn
	job, owner string
}

// BrokerListings shares the nvdisasm listings of job's modules through
// conn, as rank.
func BrokerListings(conn *broker.Conn, job string, rank int32) analyze.ListingShare {
	host, _ := os.Hostname()
	var nonce [4]byte
	rand.Read(nonce[:])
	// Unique per process: a claim retried after a lost acknowledgement
	// recognises itself by it.
	owner := fmt.Sprintf("rank %d pid %d on %s #%x", rank, os.Getpid(), host, nonce)
	return &brokerListings{conn: conn, job: job, owner: owner}
}

func (b *brokerListings) Claim(ctx context.Context, h profile.ModuleHash) (bool, error) {
	return b.conn.ClaimModule(ctx, b.job, h, broker.ModuleSASS, b.owner)
}

func (b *brokerListings) Store(ctx context.Context, h profile.ModuleHash, listing []byte, failure string) error {
	var perr error
	if failure == "" {
		if _, perr = b.conn.PutModule(ctx, b.job, h, broker.ModuleSASS, listing); perr != nil {
			failure = "storing the listing: " + perr.Error()
		}
	}
	return errors.Join(perr, b.conn.SettleModule(ctx, b.job, h, broker.ModuleSASS, failure))
}

func (b *brokerListings) Await(ctx context.Context, h profile.ModuleHash) ([]byte, bool, error) {
	data, err := b.conn.AwaitModule(ctx, b.job, h, broker.ModuleSASS)
	if errors.Is(err, broker.ErrModuleNotClaimed) {
		return nil, false, nil
	}
	return data, true, err
}
