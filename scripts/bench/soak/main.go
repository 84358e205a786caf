// Command soak runs the pipeline for a long time and watches its memory and
// goroutines: an embedded JetStream broker, N simulated ranks each
// publishing small batches at a steady rate through its own connection and
// Publisher, and the reduction tree merging them, all in this process. Every
// few seconds it samples the live heap (after a forced GC), the heap in
// use, RSS, goroutines and the stream's size into a TSV; at the end the
// ranks send their done items, the tree finishes, and the final profile
// must hold every item exactly once and equal a merge of the same items
// done here without broker or tree. The verdict compares the slope of the
// live heap and of the goroutine count over the second half of the run with
// the first: a leak grows in both halves, a warm-up only in the first.
//
//	go run ./scripts/bench/soak -duration 10m -ranks 8 -rate 5 -o soak-out
//
// Not part of CI: it runs for the given duration (10 minutes by default).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/publish"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
	"gpuprof/reducer"

	"github.com/nats-io/nats.go/jetstream"
)

var shapes = map[string]proftest.Shape{
	"small":  proftest.Small,
	"medium": {Kernels: 6, HostDepth: 4, Lines: 20, InstPer: 6, Pairs: 300, Objects: 20, RankUnique: 10, Sketches: true},
}

type options struct {
	duration, sample time.Duration
	ranks, fanIn     int
	rate             float64
	window           int
	shape            string
	out              string
	heapTol          float64 // allowed growth of the live heap over the second half, fraction of its mean
	heapTolMB        float64 // ... or this many MB, whichever is larger
	gorTol           float64 // allowed goroutine growth over the second half
	check            bool
	heapProfile      string
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the ranks publish")
	flag.DurationVar(&o.sample, "sample", 5*time.Second, "sampling interval")
	flag.IntVar(&o.ranks, "ranks", 8, "simulated ranks")
	flag.IntVar(&o.fanIn, "fanin", 4, "reduction tree fan-in")
	flag.Float64Var(&o.rate, "rate", 5, "batches per second per rank")
	flag.IntVar(&o.window, "window", 64, "publisher window (chunks in flight per rank)")
	flag.StringVar(&o.shape, "shape", "small", "batch shape: small or medium")
	flag.StringVar(&o.out, "o", "soak-out", "output directory (broker storage, samples.tsv)")
	flag.Float64Var(&o.heapTol, "heap-tol", 0.05, "live heap growth allowed over the second half, as a fraction of its mean")
	flag.Float64Var(&o.heapTolMB, "heap-tol-mb", 2, "or this many MB, whichever is larger")
	flag.Float64Var(&o.gorTol, "goroutine-tol", 5, "goroutine growth allowed over the second half (fitted)")
	flag.StringVar(&o.heapProfile, "heapprofiles", "", "write heap profiles PREFIX-<seconds>.pb.gz at a quarter and at 95% of the steady phase, and PREFIX-end.pb.gz once the tree finished")
	flag.BoolVar(&o.check, "check", true, "compare the final profile with a merge of the same items done here")
	flag.Parse()
	ok, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(2)
	}
}

// sample is one row of samples.tsv.
type sample struct {
	t                        time.Duration
	heapLive, heapInuse, rss uint64
	goroutines               int
	published, merged        uint64
	streamMsgs, streamBytes  uint64
	publishBlocked           time.Duration
	retries                  uint64
}

type rankSim struct {
	rank    int32
	pub     *publish.Publisher
	conn    *broker.Conn
	batches atomic.Uint64
}

const job = "soak"

// soak is one run: the broker, the tree running over it, the ranks.
type soak struct {
	o       options
	shape   proftest.Shape
	stream  jetstream.Stream
	tree    *reducer.Tree
	merged  atomic.Uint64
	result  chan treeRes
	sims    []*rankSim
	start   time.Time
	closers []func()
}

type treeRes struct {
	p   *profile.Profile
	st  *reducer.TreeStats
	err error
}

func run(o options) (bool, error) {
	s := &soak{o: o}
	defer s.close()
	if err := s.setUp(); err != nil {
		return false, err
	}
	s.start = time.Now()
	ranksDone, errs := s.publish()
	samples, err := s.sampleSteadyPhase(ranksDone, errs)
	if err != nil {
		return false, err
	}
	res := <-s.result
	if res.err != nil {
		return false, fmt.Errorf("reduction tree: %w", res.err)
	}
	after := s.take(nil)
	if o.heapProfile != "" {
		if err := writeHeapProfile(o.heapProfile + "-end.pb.gz"); err != nil {
			return false, err
		}
	}
	v := &verdict{ok: true}
	if err := s.checkMerged(v, res); err != nil {
		return false, err
	}
	fmt.Printf("after the tree finished: live heap %.1f MB, RSS %.1f MB, goroutines %d\n", mb(after.heapLive), mb(after.rss), after.goroutines)
	s.checkGrowth(v, samples)
	return v.ok, nil
}

func (s *soak) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// setUp starts the embedded broker, the job's stream, the reduction tree
// and one connection and Publisher per simulated rank.
func (s *soak) setUp() error {
	o := s.o
	shape, ok := shapes[o.shape]
	if !ok {
		return fmt.Errorf("unknown shape %q", o.shape)
	}
	s.shape = shape
	if err := os.MkdirAll(o.out, 0o700); err != nil {
		return err
	}
	bdir := filepath.Join(o.out, "broker")
	os.RemoveAll(bdir)
	emb, err := broker.StartEmbedded(bdir)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, emb.Shutdown)
	conn, err := broker.Connect(emb.Options("soak reducer"))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, conn.Close)
	ctx := context.Background()
	if s.stream, err = conn.EnsureStream(ctx, job, 1); err != nil {
		return err
	}
	if s.tree, err = reducer.PlanN(o.ranks, o.fanIn); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(o.out, "reducer.log"))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() { logf.Close() })
	// The rank timeout is a safety net only: every rank finishes.
	cfg := reducer.Config{Job: job, Conn: conn, Tree: s.tree, RankTimeout: 10 * time.Minute, ChildGrace: time.Minute,
		Logger:     slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnProgress: func(p reducer.Progress) { s.merged.Store(p.BatchesMerged) }}
	s.result = make(chan treeRes, 1)
	tctx, tcancel := context.WithTimeout(ctx, o.duration+15*time.Minute)
	s.closers = append(s.closers, tcancel)
	go func() {
		p, st, err := reducer.RunTree(tctx, cfg)
		s.result <- treeRes{p, st, err}
	}()
	s.sims = make([]*rankSim, o.ranks)
	for r := range s.sims {
		c, err := broker.Connect(emb.Options(fmt.Sprintf("soak rank %d", r)))
		if err != nil {
			return err
		}
		s.closers = append(s.closers, c.Close)
		p, err := publish.New(c, publish.Config{Job: job, Window: o.window})
		if err != nil {
			return err
		}
		s.sims[r] = &rankSim{rank: int32(r), pub: p, conn: c}
	}
	return nil
}

// publish starts the ranks: a steady rate each, staggered so the broker
// sees a flow rather than bursts, then each rank's done item.
func (s *soak) publish() (ranksDone chan struct{}, errs chan error) {
	ctx := context.Background()
	stop := s.start.Add(s.o.duration)
	var wg sync.WaitGroup
	errs = make(chan error, s.o.ranks)
	period := time.Duration(float64(time.Second) / s.o.rate)
	for i, sim := range s.sims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(period * time.Duration(i) / time.Duration(s.o.ranks))
			tick := time.NewTicker(period)
			defer tick.Stop()
			var seq uint32
			for time.Now().Before(stop) {
				it := proftest.Item(job, 1, s.shape, sim.rank, seq, false, 0)
				if err := sim.pub.Publish(ctx, it, false); err != nil {
					errs <- err
					return
				}
				seq++
				sim.batches.Add(1)
				<-tick.C
			}
			done := proftest.Item(job, 1, s.shape, sim.rank, seq, true, int64(seq))
			if err := sim.pub.Publish(ctx, done, true); err != nil {
				errs <- err
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := sim.pub.Close(cctx); err != nil {
				errs <- err
			}
		}()
	}
	ranksDone = make(chan struct{})
	go func() { wg.Wait(); close(ranksDone) }()
	return ranksDone, errs
}

// take samples the process and the stream now (a row of samples.tsv when
// w is not nil).
func (s *soak) take(w *bufio.Writer) sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	inuse := ms.HeapInuse
	// The live heap: what survives a collection, not what the GC has
	// yet to reclaim.
	runtime.GC()
	runtime.ReadMemStats(&ms)
	sm := sample{t: time.Since(s.start), heapLive: ms.HeapAlloc, heapInuse: inuse, rss: rss(), goroutines: runtime.NumGoroutine(), merged: s.merged.Load()}
	for _, sim := range s.sims {
		sm.published += sim.batches.Load()
		st := sim.pub.Stats()
		sm.publishBlocked += st.Blocked
		sm.retries += st.Retries
	}
	ictx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if info, err := s.stream.Info(ictx); err == nil {
		sm.streamMsgs, sm.streamBytes = info.State.Msgs, info.State.Bytes
	}
	cancel()
	if w != nil {
		fmt.Fprintf(w, "%.1f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%d\n", sm.t.Seconds(), mb(sm.heapLive), mb(sm.heapInuse), mb(sm.rss),
			sm.goroutines, sm.published, sm.merged, sm.streamMsgs, mb(sm.streamBytes), sm.publishBlocked.Seconds(), sm.retries)
		w.Flush()
	}
	return sm
}

// sampleSteadyPhase samples until the ranks are done, writing
// samples.tsv and the heap profiles; it returns the steady phase's
// samples, the only ones the verdict reads.
func (s *soak) sampleSteadyPhase(ranksDone chan struct{}, errs chan error) ([]sample, error) {
	o := s.o
	var profiled [2]bool
	tsv, err := os.Create(filepath.Join(o.out, "samples.tsv"))
	if err != nil {
		return nil, err
	}
	defer tsv.Close()
	w := bufio.NewWriter(tsv)
	fmt.Fprintln(w, "t_s\theap_live_mb\theap_inuse_mb\trss_mb\tgoroutines\tbatches_published\tbatches_merged\tstream_msgs\tstream_mb\tpublish_blocked_s\tretries")
	var samples []sample
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	lastLog := time.Now()
	fmt.Printf("soak: %d ranks at %.1f batches/s each for %v, tree %s, samples every %v in %s\n", o.ranks, o.rate, o.duration, s.tree.String(), o.sample, tsv.Name())
	for {
		select {
		case <-ranksDone:
			select {
			case err := <-errs:
				return nil, err
			default:
			}
			return samples, nil
		case err := <-errs:
			return nil, err
		case <-tick.C:
			sm := s.take(w)
			// Heap profiles early and late in the steady phase: what
			// grew between them is what to look at
			// (go tool pprof -base early late).
			for i, at := range []time.Duration{o.duration / 4, o.duration * 19 / 20} {
				if o.heapProfile != "" && !profiled[i] && sm.t >= at {
					profiled[i] = true
					if err := writeHeapProfile(fmt.Sprintf("%s-%d.pb.gz", o.heapProfile, int(sm.t.Seconds()))); err != nil {
						return nil, err
					}
				}
			}
			// Only the steady phase counts for the verdict.
			if sm.t <= o.duration {
				samples = append(samples, sm)
			}
			if time.Since(lastLog) >= time.Minute {
				lastLog = time.Now()
				fmt.Printf("  %5.0fs  live heap %6.1f MB  RSS %6.1f MB  goroutines %4d  published %7d  merged %7d  stream %5d msgs %6.1f MB\n",
					sm.t.Seconds(), mb(sm.heapLive), mb(sm.rss), sm.goroutines, sm.published, sm.merged, sm.streamMsgs, mb(sm.streamBytes))
			}
		}
	}
}

// verdict collects the failures of a run.
type verdict struct{ ok bool }

func (v *verdict) fail(format string, a ...any) {
	v.ok = false
	fmt.Printf("FAIL: "+format+"\n", a...)
}

// checkMerged: every item published is merged exactly once, every rank
// sealed, and (with -check) the final profile equals the merge of the same
// items in one process.
func (s *soak) checkMerged(v *verdict, res treeRes) error {
	var published uint64
	for _, sim := range s.sims {
		published += sim.batches.Load() + 1 // the done item
	}
	fmt.Printf("\n%d batches published (%d per rank on average, done items included), %d merged, final profile %d items, %d ranks sealed, incomplete %v\n",
		published, published/uint64(s.o.ranks), res.st.ItemsMerged, res.p.MergedItems(), res.p.SealedRanks(), res.p.IncompleteRanks())
	if res.st.ItemsMerged != published || uint64(res.p.MergedItems()) != published {
		v.fail("%d items published, %d merged by the leaves, %d in the final profile: each must be merged exactly once", published, res.st.ItemsMerged, res.p.MergedItems())
	}
	if res.p.SealedRanks() != uint64(s.o.ranks) || len(res.p.IncompleteRanks()) != 0 {
		v.fail("%d of %d ranks sealed, incomplete %v", res.p.SealedRanks(), s.o.ranks, res.p.IncompleteRanks())
	}
	if !s.o.check {
		return nil
	}
	want := profile.New(job)
	for _, sim := range s.sims {
		n := uint32(sim.batches.Load())
		for q := uint32(0); q <= n; q++ {
			if err := want.Merge(proftest.Item(job, 1, s.shape, sim.rank, q, q == n, int64(n))); err != nil {
				return err
			}
		}
	}
	if !bytes.Equal(res.p.Encode(), want.Encode()) {
		v.fail("the final profile differs from the merge of the same items in one process")
	} else {
		fmt.Println("final profile byte-identical to the merge of the same items in one process")
	}
	return nil
}

// checkGrowth compares the slopes of the live heap, RSS and goroutines
// over the second half of the steady phase with the first: a leak grows
// in both halves, a warm-up only in the first.
func (s *soak) checkGrowth(v *verdict, samples []sample) {
	o := s.o
	if len(samples) < 8 {
		v.fail("only %d samples in the steady phase: run longer or sample more often", len(samples))
		return
	}
	h := len(samples) / 2
	first, second := samples[:h], samples[h:]
	fit := func(ss []sample, f func(sample) float64) (slopePerMin, mean float64) {
		var xs, ys []float64
		for _, s := range ss {
			xs = append(xs, s.t.Minutes())
			ys = append(ys, f(s))
		}
		return slope(xs, ys), avg(ys)
	}
	heapOf := func(s sample) float64 { return mb(s.heapLive) }
	rssOf := func(s sample) float64 { return mb(s.rss) }
	gorOf := func(s sample) float64 { return float64(s.goroutines) }
	span2 := (second[len(second)-1].t - second[0].t).Minutes()
	h1, _ := fit(first, heapOf)
	h2, hm := fit(second, heapOf)
	r1, _ := fit(first, rssOf)
	r2, rm := fit(second, rssOf)
	g1, _ := fit(first, gorOf)
	g2, gm := fit(second, gorOf)
	fmt.Printf("\n%-22s %14s %14s %14s %16s\n", "", "1st half /min", "2nd half /min", "2nd half mean", "2nd half growth")
	fmt.Printf("%-22s %14.3f %14.3f %14.2f %16.2f\n", "live heap (MB)", h1, h2, hm, h2*span2)
	fmt.Printf("%-22s %14.3f %14.3f %14.2f %16.2f\n", "RSS (MB)", r1, r2, rm, r2*span2)
	fmt.Printf("%-22s %14.3f %14.3f %14.2f %16.2f\n", "goroutines", g1, g2, gm, g2*span2)
	heapLim := math.Max(o.heapTol*hm, o.heapTolMB)
	if h2*span2 > heapLim {
		v.fail("live heap grew %.2f MB over the second half (limit %.2f MB)", h2*span2, heapLim)
	}
	if g2*span2 > o.gorTol {
		v.fail("goroutines grew %.1f over the second half (limit %.1f)", g2*span2, o.gorTol)
	}
	if v.ok {
		fmt.Printf("VERDICT: flat (live heap growth over the second half %.2f MB, limit %.2f MB; goroutines %+.1f, limit %.0f)\n", h2*span2, heapLim, g2*span2, o.gorTol)
	} else {
		fmt.Println("VERDICT: FAIL")
	}
}

// rss is this process's resident set size, from /proc (0 where absent).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func avg(ys []float64) float64 {
	var s float64
	for _, y := range ys {
		s += y
	}
	return s / float64(len(ys))
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	mx, my := avg(xs), avg(ys)
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}
