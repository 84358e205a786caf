package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpuprof/collector/online"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/symbolize"
)

// Reading one raw stream: the decoder runs ahead of the analysis within a
// byte budget, items are published as the analysis fills them, and a
// stream that ends early or is corrupt is named with its offset.

// tee writes the stream to the record file. A failing write (a full disk)
// stops the recording, not the collection.
type tee struct {
	f    *os.File
	c    *Collector
	what string // the stream, for errors
	err  error
}

func (t *tee) Write(p []byte) (int, error) {
	if t.err == nil {
		if _, err := t.f.Write(p); err != nil {
			t.err = err
			t.c.recordFailed(fmt.Errorf("%s: recording the stream to %s: %w (the recording is cut; the analysis went on)", t.what, t.f.Name(), err))
		}
	}
	return len(p), nil
}

func (t *tee) close() {
	if err := t.f.Close(); err != nil && t.err == nil {
		t.c.recordFailed(fmt.Errorf("%s: recording the stream to %s: %w", t.what, t.f.Name(), err))
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
func (rs *rankState) logAnalysis(a *online.Analyzer, source string, recs uint64, wall, readerWait, endAt time.Duration) {
	c := rs.c
	if c.o.Logf == nil {
		return
	}
	b := a.Busy()
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
	if b.Sampled > 0 {
		msg += fmt.Sprintf("; spatial values sampled by hash in %d (launch, object, access kind), level up to %d", b.Sampled, b.MaxLevel)
	}
	if endAt > 0 {
		// The analysis' tail: what the run waited for after the application's END.
		msg += fmt.Sprintf("; END read at %v, the analysis finished %v after it", endAt.Round(time.Millisecond), (wall - endAt).Round(time.Millisecond))
	}
	if s, ok := c.o.Analysis.Structures.(*online.SASS); ok {
		st := s.Stats()
		msg += fmt.Sprintf("; structure: %d functions disassembled in %d nvdisasm runs (%d modules whole), %d from the disk cache, %d shared by other ranks, %d fallbacks",
			st.Functions, st.Disassembled, st.Whole, st.CacheHits, st.Shared, st.Fallbacks)
	}
	if miss := a.Missing(); len(miss) > 0 {
		msg += fmt.Sprintf("; %d functions without structure (%s)", len(miss), strings.Join(miss[:min(len(miss), 5)], "; "))
	}
	rs.logf("%s", msg)
	if c.o.Replay == "" {
		if h := samplingHint(recs, readerWait, wall, c.o.KernelSampling); h != "" {
			slog.Warn(h, "rank", rs.rank)
		}
	}
}

// samplingHint is what to tell the user of a live stream whose analysis
// held the application back: with every launch traced (kernel sampling
// off), a long-running kernel's records can outrun the analysis many
// times over (miniBUDE's value-tracing run on the H100: 145 million
// records, the application held up 38 s of 65). "" when the wait was
// short, or a small part of the run, or launches were sampled already.
func samplingHint(recs uint64, readerWait, wall time.Duration, kernelSampling int) string {
	if kernelSampling > 1 || readerWait < 5*time.Second || 5*readerWait < wall {
		return ""
	}
	return fmt.Sprintf("value tracing: the application waited %v of %v for the analysis of %d access records, every launch traced; "+
		"--kernel-sampling 10 traces one launch in 10 of each calling context (the first always), about a tenth of the records (docs/overhead.md)",
		readerWait.Round(100*time.Millisecond), wall.Round(100*time.Millisecond), recs)
}

// stream decodes and analyses one raw stream, publishing items as it goes.
// rs is the stream's rank, or nil: claim then gives it at the stream's
// first GPU work (the frames before are kept until then), and a stream
// with none is no rank: stream returns a nil rank and no error. A stream
// that ends early or is corrupt is an error naming the rank and the
// offset; everything before it is published. When the analysis fails,
// the rest of the stream is still read (and recorded) so that the
// application never blocks on a collector that stopped listening.
func (c *Collector) stream(ctx context.Context, rs *rankState, claim func() *rankState, r io.Reader, source, record string) (_ *rankState, err error) {
	raw := io.Reader(counter{r, &c.bytes})
	in, closeRecord := c.recording(raw, source, record)
	defer closeRecord()
	// Host frames: the process's modules, and CPython's perf map for its
	// Python functions (a replay's given one; a live process's own, once
	// HELLO names its pid).
	host := symbolize.New()
	host.Tables = c.tables
	host.SetPerfMap(c.o.PerfMap)
	var a *online.Analyzer
	var pre []decoded // frames before the rank is known
	var hello *rawstream.Hello
	var recs uint64 // this stream's access records
	defer func() {
		if a != nil {
			a.Close()
		}
	}()
	// begin starts the analysis once the rank is known.
	begin := func() {
		ao := c.o.Analysis
		ao.Job, ao.Rank, ao.Host = c.o.Job, rs.rank, host
		a = online.New(ao)
		rs.mu.Lock()
		if rs.hello == nil {
			rs.hello = hello
		}
		rs.mu.Unlock()
	}
	if rs != nil {
		begin()
	}

	ahead := newAheadReader()
	defer func() {
		if rs != nil {
			rs.logAnalysis(a, source, recs, time.Since(ahead.t0), ahead.wait, ahead.endAt)
		}
	}()
	go ahead.run(c, in, raw)
	defer ahead.finish()

	failed := false
	tick := time.NewTicker(c.o.BatchInterval)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			// The reader may be blocked on a stream that never ends (a
			// hung application's socket, a pipe): closing it lets the
			// reader go.
			defer closeReader(r)
			if rs == nil {
				return nil, nil
			}
			rs.interrupted(ctx, a, source, &failed)
			return rs, ctx.Err()
		case <-tick.C:
			if a != nil && a.Pending() > 0 && time.Since(last) >= c.o.BatchInterval*time.Duration(holdFactor(a)) {
				if perr := rs.publish(ctx, a, source, &failed); perr != nil {
					return rs, perr
				}
				last = time.Now()
			}
		case d, ok := <-ahead.frames:
			if !ok {
				return rs, nil
			}
			ahead.budget.release(d.size)
			if d.err != nil || d.f == nil {
				if rs == nil {
					// No GPU work: not a rank, whatever became of the stream.
					c.logf("%s: no kernel launched and no GPU memory allocated: not a rank (%d frames, stream end: %v)", source, len(pre), d.err)
					return nil, nil
				}
				return rs, rs.streamEnded(ctx, a, d, source, &failed)
			}
			if h, ok := d.f.(*rawstream.Hello); ok && hello == nil {
				hello = h
				if c.o.Replay == "" && c.o.PerfMap == "" && h.PID != 0 {
					host.SetPerfMap(perfMapOf(h.PID))
					if c.o.PythonFrames {
						// gpuprof asked for the map: it goes with the stream.
						defer os.Remove(perfMapOf(h.PID))
					}
				}
				if rs != nil {
					rs.mu.Lock()
					if rs.hello == nil {
						rs.hello = h
					}
					rs.mu.Unlock()
				}
			}
			if rs == nil {
				if !gpuWork(d.f) {
					pre = append(pre, d)
					continue
				}
				rs = claim()
				begin()
				for _, p := range pre {
					if !failed {
						rs.analyse(a, p, source, &recs, &failed)
					}
				}
				pre = nil
			}
			if failed {
				continue
			}
			if rs.analyse(a, d, source, &recs, &failed) {
				if perr := rs.publish(ctx, a, source, &failed); perr != nil {
					return rs, perr
				}
				last = time.Now()
			}
		}
	}
}

// recording returns the stream to decode: raw, teed to the file record
// names if any, and the function that closes that file. A file that
// cannot be created stops the recording, not the collection.
func (c *Collector) recording(raw io.Reader, source, record string) (io.Reader, func()) {
	if record == "" {
		return raw, func() {}
	}
	rec, err := os.Create(record)
	if err != nil {
		c.recordFailed(fmt.Errorf("%s: recording the stream: %w", source, err))
		return raw, func() {}
	}
	t := &tee{f: rec, c: c, what: source}
	return io.TeeReader(raw, t), t.close
}

// analyse adds one frame to the rank's analysis, counting its records in
// recs, and reports whether an item is due. When the analysis fails it
// sets failed (what was flushed is kept; the rest of the stream is
// drained) and says so in the rank's issues.
func (rs *rankState) analyse(a *online.Analyzer, d decoded, source string, recs *uint64, failed *bool) bool {
	c := rs.c
	switch f := d.f.(type) {
	case *rawstream.End:
		rs.mu.Lock()
		rs.end = f.ExitCode
		rs.mu.Unlock()
		if c.o.Replay != "" {
			// The recorded application ended; the analysis goes on.
			rs.exited(int(f.ExitCode))
		}
	case *rawstream.Access:
		c.records.Add(uint64(f.Count))
		*recs += uint64(f.Count)
	}
	if aerr := a.Add(d.f, d.off); aerr != nil {
		// Keep what was flushed; drain the rest.
		*failed = true
		rs.issue(fmt.Sprintf("%s: analysis stopped at offset %d: %v", source, d.off, firstLine(aerr)))
		rs.logf("analysis stopped at offset %d: %v", d.off, aerr)
		return false
	}
	return a.Pending() >= c.o.BatchRecords*holdFactor(a)
}

// aheadReader decodes a stream on a goroutine of its own, up to readAhead
// bytes of decoded frames ahead of the analysis: the library's bursts (a
// drained device buffer at each kernel end) and the analysis' pauses
// (barriers, items, a module's disassembly) are absorbed here rather than
// in the library's host queue, which drops records when full.
type aheadReader struct {
	frames chan decoded
	budget *byteBudget
	stop   chan struct{}
	t0     time.Time
	// Written by the goroutine, read once it ended (after finish).
	wait  time.Duration // the reader waiting for budget: the socket not drained
	endAt time.Duration // when END was read: the application's end
}

func newAheadReader() *aheadReader {
	return &aheadReader{
		frames: make(chan decoded, 1<<14),
		budget: newByteBudget(readAhead),
		stop:   make(chan struct{}),
		t0:     time.Now(),
	}
}

// run decodes in until the stream ends, fails or finish stops it, then
// closes frames. The stream's end goes out as a frame without one: the
// error, or none after END. raw is in before any recording: what comes
// after the end or the stop is read from it and discarded.
func (ar *aheadReader) run(c *Collector, in, raw io.Reader) {
	defer close(ar.frames)
	d := rawstream.NewDecoder(in)
	for {
		prev := d.Bytes()
		f, err := d.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			select {
			case ar.frames <- decoded{err: err, off: d.Bytes()}:
			case <-ar.stop:
			}
			// After an error keep reading, so that a writer on a socket
			// never blocks; discard what comes.
			io.Copy(io.Discard, raw)
			return
		}
		c.frames.Add(1)
		if _, ok := f.(*rawstream.End); ok {
			ar.endAt = time.Since(ar.t0)
		}
		// The bytes this frame took (a chunked module's chunks
		// included): Offset would give the previous frame's size.
		size := d.Bytes() - prev
		if w := ar.budget.acquire(size); w > 0 {
			ar.wait += w // read by the deferred log after the goroutine ended
		}
		select {
		case ar.frames <- decoded{f: f, off: d.Offset(), size: size}:
		case <-ar.stop:
			io.Copy(io.Discard, raw)
			return
		}
	}
}

// finish stops the reader and waits for its goroutine to end.
func (ar *aheadReader) finish() {
	close(ar.stop)
	ar.budget.close()
	for range ar.frames { // let the decoder goroutine finish
	}
}

// interrupted publishes, within a bound, what the rank's analysis holds
// when the collection is interrupted.
func (rs *rankState) interrupted(ctx context.Context, a *online.Analyzer, source string, failed *bool) {
	if rs.c.Interrupted() == nil {
		rs.issue("interrupted: " + ctx.Err().Error())
	} else {
		rs.issue(source + ": stopped by the interruption; what was analysed by then is published")
	}
	a.FinalWithin(0) // what waits for structure goes out flat
	// What was analysed still goes out, within a bound.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), doneTimeout)
	rs.publish(pctx, a, source, failed)
	cancel()
}

// streamEnded publishes the rest of the rank's analysis once its stream is
// over: d is the reader's last, with the error of a stream cut or corrupt
// (returned as a StreamError, along with any publishing error) or none
// after END.
func (rs *rankState) streamEnded(ctx context.Context, a *online.Analyzer, d decoded, source string, failed *bool) error {
	var streamErr error
	if d.err != nil {
		var re *rawstream.Error
		off := d.off
		if errors.As(d.err, &re) {
			off = re.Offset
		}
		streamErr = &StreamError{Rank: rs.rank, Source: source, Offset: off, Err: d.err}
		rs.issue(streamErr.Error())
	}
	// The stream is over: what is measured goes out now; the
	// instructions whose function's structure is still on its
	// way follow within the bound (online's placement.go). A
	// replay has no application waiting on it: it publishes once,
	// so that its items do not depend on how fast structure came.
	if rs.c.o.Replay == "" {
		if perr := rs.publishWith(ctx, a.FlushReady, source, failed); perr != nil {
			return errors.Join(streamErr, perr)
		}
	}
	a.Final()
	if perr := rs.publish(ctx, a, source, failed); perr != nil {
		return errors.Join(streamErr, perr)
	}
	if n, first := a.Anomalies(); n > 0 {
		rs.issue(fmt.Sprintf("%s: %d inconsistent frames skipped (first at %s)", source, n, first))
	}
	return streamErr
}

// closeReader closes r if it can be closed.
func closeReader(r io.Reader) {
	if cl, ok := r.(io.Closer); ok {
		cl.Close()
	}
}

// holdFactor stretches the batch bounds while a launch of a kernel
// reported before its module waits for the module (online's Holding): an
// item published then would split the kernel's first launch from the rest
// for good, so it may grow to twice its records or age first
// (docs/collector.md, "Functions before their module").
func holdFactor(a *online.Analyzer) uint64 {
	if a.Holding() {
		return 2
	}
	return 1
}
