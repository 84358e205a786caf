// Package collector is gpuprof's per-rank stage: it starts the application
// with the injection library (or replays a recorded raw stream), decodes
// the stream, analyses it online (package online) and publishes the
// results as profile items, a batch every N access records or T seconds,
// then the rank's done item. See docs/collector.md.
package collector

import (
	"context"
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

	"gpuprof/collector/launcher"
	"gpuprof/collector/online"
	"gpuprof/collector/proctree"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/symbolize"
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
	// Rank: the collector's own rank; -1 finds it in the environment
	// (launcher.RankVars: RANK with WORLD_SIZE, OMPI_COMM_WORLD_RANK,
	// PMIX_RANK, PMI_RANK, SLURM_PROCID, in that order; 0 if none). A
	// replay is this rank; a process started under the collector is
	// measured as the rank its own launcher environment gives it, else
	// in order of first CUDA use (docs/launchers.md).
	Rank int
	// Ranks is the job's rank count (gpuprof run passes what the launcher
	// asked for); 0: the torch launcher being wrapped says, else the
	// launcher's environment (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE,
	// SLURM_NTASKS), else one. The job's only collector publishes a done
	// item for every expected rank no process claimed.
	Ranks int

	// Replay reads a recorded stream instead of running an application;
	// "{rank}" or "{rank:N}" in the path is replaced (see ExpandRank).
	Replay string
	// Command is the application and its arguments.
	Command []string
	// InjectLib is the injection library; default $GPUPROF_INJECT, else
	// lib/libgpuprof_inject.so next to the running executable.
	InjectLib string
	// Nice lowers the collector's threads to this nice value once the
	// application has started (0: unchanged; Linux only; the command
	// line's default is DefaultNice): the application and the library
	// then come first on a busy host.
	Nice int
	// Mode: redundancy, pcsampling or hybrid ("" leaves the library's
	// default, redundancy).
	Mode string
	// BlockSampling (P) and KernelSampling (K); 0 leaves the library's
	// defaults (P = 50, K = 1).
	BlockSampling, KernelSampling int
	// HybridKernel: in hybrid mode, the SASS metrics are enabled at the
	// first launch of a kernel whose (mangled) name contains it instead of
	// at the first launch of any (GPUPROF_SASS_KERNEL; only the function
	// launched when they are enabled gets instruction counts,
	// docs/inject.md). "" leaves the library's default.
	HybridKernel string
	// Record tees the raw stream to this file (the rank expanded as in
	// Replay; without {rank}, a second stream goes to FILE.1, ...).
	Record string
	// PythonFrames starts the application with CPython's perf trampoline
	// (PYTHONPERFSUPPORT=1), so that Python functions appear in host
	// stacks as perf-map entries; the maps are removed when read.
	PythonFrames bool
	// PerfMap is a CPython perf map (perf-PID.map) for a replayed
	// stream's host frames. A live stream reads /tmp/perf-PID.map of its
	// process when there is one.
	PerfMap string

	Publisher Publisher
	// BatchRecords: publish an item every this many access records
	// (default 1<<20: each item is a barrier of the analysis, a stop of
	// its pipeline, and at 1<<18 those stops were a fifth of
	// loop_reload's analysis on the H100). BatchInterval: and at least
	// this often while data arrives (default 5s).
	BatchRecords  uint64
	BatchInterval time.Duration

	// Analysis configures each rank's online analysis, handed to
	// online.New as it is (one struct, so no option is forgotten on the
	// way): Job, Rank and Host are set per rank by the collector. Its
	// Structures default to an online.SASS with the disk cache
	// (online.DefaultDiskCache), nvdisasm when on PATH and the nvdisasm
	// outputs in SASSFiles; OnModule is called once per module content
	// hash with its cubin; HashValues, when set, keeps no value read from
	// the application's memory (value sketches hold keyed hashes).
	Analysis  online.Options
	SASSFiles []string
	// HostSymbols are symbol tables (files, or directories of *.syms) for
	// host modules that are not on this machine: a replayed capture's
	// binaries (collector/symbolize, gpuprof symtab).
	HostSymbols []string
	// Share, when set, shares nvdisasm listings with the job's other ranks
	// through the broker's module bucket (one rank disassembles each
	// function; docs/sass.md). Used by the default Analysis.Structures only.
	Share ModuleBucket

	// The application's standard streams (default: the collector's).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// DrainTimeout bounds how long streams may stay open after the
	// application exited (default 30s).
	DrainTimeout time.Duration
	// Interrupts delivers the signals the collector gets (gpuprof collect
	// passes SIGINT and SIGTERM). The first is passed on to the
	// application (a replay stops reading); every rank's done item names
	// it, which makes the ranks not done by then incomplete; what was
	// measured is still analysed and published, for at most StopTimeout.
	// A second one kills the application with its children and cuts the
	// analysis at once. Cancelling Run's context is a first interruption
	// by SIGTERM.
	Interrupts <-chan os.Signal
	// StopTimeout bounds the analysis after an interruption (default 5s).
	StopTimeout time.Duration
	// OnRank, when set, is told where each rank this collector publishes
	// stands (gpuprof collect's heartbeats): running (the rank is the
	// collector's: claimed by a process, a replay, or owed by it from the
	// start), its application exited (a replay's END; the command's exit,
	// for every rank of it, done or not: it may start more ranks until
	// then; the analysis may go on), and its done item published. It is
	// called with the collector's locks held and must not call back into
	// it.
	OnRank func(rank int32, state RankState, exit int)
	// Logf receives progress and warnings (nil: silent).
	Logf func(format string, args ...any)
}

// RankState is where a rank stands (Options.OnRank).
type RankState int

const (
	RankRunning RankState = iota // its application runs (a replay is read)
	RankExited                   // its application exited; the analysis goes on
	RankDone                     // its done item is published
)

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

// ResolveRank returns explicit if it is >= 0, else the first of
// launcher.RankVars that is set (naming it), else 0 ("default").
func ResolveRank(explicit int, getenv func(string) string) (int32, string, error) {
	if explicit >= 0 {
		if explicit > 1<<30 {
			return 0, "", fmt.Errorf("rank %d out of range", explicit)
		}
		return int32(explicit), "--rank", nil
	}
	r, ok, err := launcher.RankOf(getenv)
	if err != nil {
		return 0, r.Var, err
	}
	if !ok {
		return 0, "default", nil
	}
	return r.Rank, r.Var, nil
}

// Collector collects the ranks of one command: a replayed stream, or
// every CUDA process of the application, each as its own rank
// (ranks.go).
type Collector struct {
	o     Options
	place placement

	bytes, frames, records, items atomic.Uint64

	mu     sync.Mutex
	ranks  map[int32]*rankState
	order  []*rankState // in the order they were claimed
	extras int          // extra rank ids handed out
	exit   int          // the application's exit status (-1: not known)
	recErr error
	// appPID is the application's process; appExited is closed once its
	// exit status is in exit.
	appPID    int
	appExited chan struct{}

	tables *symbolize.Tables // HostSymbols, read once
	// ownSASS: Structures was made here, and is closed after the run.
	ownSASS bool
	// appEnded: the application exited (or never started): ranks claimed
	// from now on are told exited at once (OnRank).
	appEnded bool

	// Interruptions (their own lock: a publisher may ask Interrupted
	// while a rank's item is published under its lock).
	imu  sync.Mutex
	intr os.Signal // the first interruption, nil if none
	proc *os.Process
	// stopRead ends a replay's reading (the first interruption); cut ends
	// the analysis (StopTimeout after it, or a second one).
	stopRead, cut context.CancelFunc
}

// doneTimeout bounds the done items of an interrupted collection.
const doneTimeout = 10 * time.Second

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
		o.BatchRecords = 1 << 20
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
	pl, err := place(o, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	r := pl.base
	own := o.Analysis.Structures == nil
	if own {
		st := &online.SASS{Files: o.SASSFiles, Logf: o.Logf, Cache: online.DefaultDiskCache()}
		if o.Share != nil {
			st.Share = BrokerListings(o.Share, o.Job, r)
		}
		o.Analysis.Structures = st
	}
	o.Replay = ExpandRank(o.Replay, r)
	if o.Replay != "" {
		o.Record = ExpandRank(o.Record, r)
	}
	c := &Collector{o: o, place: pl, ranks: map[int32]*rankState{}, exit: -1, appExited: make(chan struct{}), ownSASS: own}
	if len(o.HostSymbols) > 0 {
		if c.tables, err = symbolize.ReadTables(o.HostSymbols...); err != nil {
			return nil, fmt.Errorf("collector: host symbols: %w", err)
		}
	}
	return c, nil
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

// Rank is the collector's own rank: the rank of a replay, and of a
// process without a launcher rank of its own. Ranks lists every rank
// published.
func (c *Collector) Rank() int32 { return c.place.base }

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
		c.o.Logf("collector of rank %d: "+format, append([]any{c.place.base}, args...)...)
	}
}

// Run collects until the application and its streams are done (or the
// replay ends), publishes each rank's done item and returns: nil, an
// *ExitError with the application's non-zero status, or what went wrong
// (joined with the exit status).
func (c *Collector) Run(ctx context.Context) error {
	if s, ok := c.o.Analysis.Structures.(*online.SASS); ok && c.ownSASS {
		defer s.Close()
	}
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
		c.mu.Lock()
		for _, r := range c.owed() {
			c.note(r, RankRunning, 0)
		}
		c.mu.Unlock()
		err = c.run(cutCtx)
		if err != nil {
			// The application could not be started (or the collector
			// failed): the ranks it owes still report, saying why.
			err = errors.Join(err, c.missing(cutCtx, strings.TrimPrefix(firstLine(err), fmt.Sprintf("rank %d: ", c.place.base))))
		}
	}
	stopWatch()
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
	if code > 0 {
		errs = append(errs, &ExitError{Code: code})
	}
	return errors.Join(errs...)
}

// Interrupted is the signal that interrupted the collector, nil if none did.
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

// Interrupt handles a signal for the collector's ranks: the first is
// passed on to the application (a replay stops reading), named in every
// rank's done item still to come, and bounds what is left of the
// analysis by StopTimeout; a second kills the application and its
// children and cuts the analysis now.
func (c *Collector) Interrupt(sig os.Signal) {
	c.mu.Lock()
	c.imu.Lock()
	first := c.intr == nil
	if first {
		c.intr = sig
	}
	proc, stopRead, cut := c.proc, c.stopRead, c.cut
	c.imu.Unlock()
	if first {
		// Ranks claimed later say so when they are claimed.
		for _, rs := range c.order {
			rs.issue("interrupted by " + proctree.SignalName(sig))
		}
	}
	c.mu.Unlock()
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

// note tells Options.OnRank where rank r stands.
func (c *Collector) note(r int32, st RankState, exit int) {
	if c.o.OnRank != nil {
		c.o.OnRank(r, st, exit)
	}
}

func (c *Collector) replay(ctx context.Context) error {
	c.mu.Lock()
	rs := c.claim(c.place.base, 0, "replay")
	c.mu.Unlock()
	f, err := os.Open(c.o.Replay)
	if err != nil {
		rs.issue("replay: " + err.Error())
		err = fmt.Errorf("rank %d: %w", rs.rank, err)
	} else {
		defer f.Close()
		_, err = c.stream(ctx, rs, nil, f, "replay "+c.o.Replay, c.o.Record)
	}
	rs.mu.Lock()
	end := rs.end
	rs.mu.Unlock()
	c.mu.Lock()
	if end >= 0 {
		c.exit = int(end) // the recorded application's status
	}
	c.mu.Unlock()
	return errors.Join(err, rs.publishDone(ctx))
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
