package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpuprof/broker"
	"gpuprof/collector"
	"gpuprof/collector/online"
	"gpuprof/collector/proctree"
	"gpuprof/collector/publish"
	"gpuprof/profile"
	"gpuprof/symname"
)

func init() {
	register("collect", "measure the ranks of one command (wraps the application, or replays a recorded stream)", cmdCollect)
}

// natsFlags adds the broker connection flags shared by collect, reduce and
// run, and returns a function that builds the options after parsing.
func natsFlags(fs *flag.FlagSet) func(name string) broker.Options {
	url := fs.String("nats", os.Getenv(NATSEnv), "NATS server URL(s), comma-separated (default $"+NATSEnv+")")
	creds := fs.String("creds", os.Getenv("GPUPROF_CREDS"), "NATS credentials file")
	nkey := fs.String("nkey", "", "NATS nkey seed file (default: the seed in $"+NKeySeedEnv+", which gpuprof run sets for its ranks)")
	user := fs.String("user", "", "NATS user")
	pass := fs.String("password", os.Getenv("GPUPROF_NATS_PASSWORD"), "NATS password (default $GPUPROF_NATS_PASSWORD)")
	ca := fs.String("tls-ca", "", "CA certificate that signed the servers' certificates")
	cert := fs.String("tls-cert", "", "client certificate")
	key := fs.String("tls-key", "", "client key")
	return func(name string) broker.Options {
		o := broker.Options{CredsFile: *creds, NKeySeedFile: *nkey, User: *user, Password: *pass, CAFile: *ca, CertFile: *cert, KeyFile: *key, Name: name}
		if *url != "" {
			o.URLs = []string{*url}
		}
		envCredentials(&o)
		return o
	}
}

func cmdCollect(args []string) error {
	fs := newFlags("collect", "[flags] [-- APP ARGS...]", `
Measures the ranks of one command. With an application, it starts it with
the injection library (CUDA_INJECTION64_PATH) and reads the raw record
stream of every process that uses CUDA over a Unix socket; with --replay it
reads a recorded stream instead. It analyses each stream online (value
redundancy, stalls, launches, allocations) and publishes profile batches to
the job's NATS stream (--nats), or merges them into one local profile
(--local FILE). The collector's own rank comes from --rank or RANK (with
WORLD_SIZE), OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID. Each
CUDA process is measured as its own rank: the one its own launcher
environment gives it (torchrun's RANK), else in order of first CUDA use
(docs/launchers.md). The exit status is the application's.

'gpuprof run' inserts this command after mpirun's own options, or before a
torchrun; written by hand:
  mpirun -np 64 gpuprof collect --job J --nats URL -- ./app
  gpuprof collect --job J --nats URL -- torchrun --nproc-per-node 8 train.py`)
	var o collector.Options
	fs.StringVar(&o.Job, "job", os.Getenv("GPUPROF_JOB"), "job id (default $GPUPROF_JOB)")
	fs.IntVar(&o.Rank, "rank", -1, "the collector's rank (default: from the launcher's environment)")
	fs.IntVar(&o.Ranks, "ranks", envInt("GPUPROF_RANKS"), "the job's rank count (default $GPUPROF_RANKS, which gpuprof run sets, else what the launcher says)")
	fs.BoolVar(&o.PythonFrames, "python-frames", false, "run Python with its perf trampoline (PYTHONPERFSUPPORT=1) so host stacks show Python functions")
	fs.StringVar(&o.PerfMap, "perf-map", "", "CPython perf map (perf-PID.map) naming the Python frames of a replayed stream")
	fs.StringVar(&o.Replay, "replay", "", "replay recorded raw streams, several (comma-separated) as passes of one rank ({rank} or {rank:N} in a path is replaced)")
	fs.StringVar(&o.Record, "record", "", "also record the raw stream to this file ({rank} replaced)")
	fs.StringVar(&o.Mode, "mode", os.Getenv("GPUPROF_MODE"), "redundancy | pcsampling | hybrid | all (three runs of the application, merged: pcsampling, then hybrid counting the instructions of the kernel with the most GPU time in the pcsampling run, then redundancy)")
	fs.IntVar(&o.BlockSampling, "block-sampling", 0, "block sampling period P (default 50)")
	fs.IntVar(&o.KernelSampling, "kernel-sampling", 0, "kernel sampling period K (default 1)")
	fs.StringVar(&o.HybridKernel, "hybrid-kernel", os.Getenv("GPUPROF_HYBRID_KERNEL"), "hybrid mode (and the hybrid run of --mode all): count the instructions of the kernel whose mangled name contains NAME (its plain name will do) instead of the first kernel launched (hybrid) or the kernel with the most GPU time (all); only one kernel gets counts (GPUPROF_SASS_KERNEL; default $GPUPROF_HYBRID_KERNEL)")
	fs.IntVar(&o.Nice, "nice", envIntOr("GPUPROF_NICE", collector.DefaultNice), "nice value of the collector's threads once the application runs, so that the application and the library come first on a busy host; 0: unchanged (default $GPUPROF_NICE or 10)")
	fs.StringVar(&o.InjectLib, "inject", "", "injection library (default $GPUPROF_INJECT or lib/libgpuprof_inject.so beside gpuprof)")
	sassFiles := fs.String("sass", os.Getenv("GPUPROF_SASS"), "nvdisasm outputs (files or directories, comma-separated) for modules when nvdisasm is absent: the collector's own analysis of value traces; the report's advice reads them again (gpuprof report --sass)")
	hostSyms := fs.String("host-symbols", os.Getenv("GPUPROF_HOST_SYMBOLS"), "symbol tables (files, or directories of *.syms; comma-separated) for host binaries that are not on this machine, as 'gpuprof symtab' writes beside captures")
	fs.Uint64Var(&o.BatchRecords, "batch-records", uint64(max(0, envInt("GPUPROF_BATCH_RECORDS"))), "publish a batch every this many access records (default $GPUPROF_BATCH_RECORDS or 1048576)")
	fs.DurationVar(&o.BatchInterval, "batch-interval", 0, "also publish a batch at least this often, however few records (default 5s)")
	analysisFlags(fs, &o.Analysis)
	window := fs.Int("window", 64, "batches published and not yet acknowledged at most (backpressure)")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 5*time.Second, "after SIGINT or SIGTERM (passed on to the application), how long the analysis may go on before what it has is published")
	local := fs.String("local", "", "no broker: merge this rank's batches into a profile file")
	noValues := fs.Bool("no-values", false, "store no value read from the application's memory: value sketches keep keyed hashes (counts and redundancy fractions stay)")
	nats := natsFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := completeOptions(&o, fs.Args(), *sassFiles, *hostSyms, *noValues); err != nil {
		return err
	}

	ctx := context.Background()
	sigs, stopSigs := notifyInterrupts()
	defer stopSigs()
	intr := make(chan os.Signal, 2)
	o.Interrupts = intr
	var reporter atomic.Pointer[statusReporter] // heartbeats, with a broker
	var firstSig atomic.Pointer[string]
	go func() {
		for sig := range sigs {
			name := proctree.SignalName(sig)
			if rep := reporter.Load(); firstSig.CompareAndSwap(nil, &name) && rep != nil {
				rep.interrupted(name)
			}
			intr <- sig
		}
	}()
	var rep *statusReporter
	var closePub func(context.Context) error
	switch {
	case *local != "":
		lp := &localPublisher{p: profile.New(o.Job)}
		o.Publisher = lp
		closePub = func(context.Context) error {
			t0 := time.Now()
			err := profile.WriteFile(*local, lp.p)
			slog.Debug("profile written", "file", *local, "in", time.Since(t0).Round(time.Millisecond))
			if err == nil && *sassFiles != "" {
				// The profile keeps no listing: advice from PC samples and
				// instruction counts reads them when the report is made.
				slog.Info("the report's advice needs the same listings", "command", "gpuprof report --sass "+*sassFiles+" "+*local)
			}
			return err
		}
	default:
		name, conn, err := dialCollector(o, nats)
		if err != nil {
			return err
		}
		defer conn.Close()
		// Heartbeats of every rank this collector publishes.
		rep = newStatusReporter(conn.NC, o.Job, name)
		reporter.Store(rep)
		if sig := firstSig.Load(); sig != nil {
			rep.interrupted(*sig)
		}
		o.OnRank = rep.note
		if closePub, err = publishThrough(ctx, conn, &o, *window); err != nil {
			return err
		}
	}
	runErr, rank, appRan, sig := collectPasses(ctx, o)
	if rank < 0 && runErr != nil {
		// The collection did not start (bad options): the rank says so,
		// so the reducers need not wait for it until the rank timeout.
		if r, ok := publishFailure(ctx, o, runErr); ok && rep != nil {
			rep.note(r, collector.RankDone, -1)
		}
	}
	// Publishing what is left waits for the broker's acknowledgements:
	// 2 minutes at most, the stop timeout once interrupted.
	wait := 2 * time.Minute
	if sig != nil {
		wait = o.StopTimeout
	}
	cctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := closePub(cctx); err != nil {
		// The application's result stands; the lost batches are named.
		slog.Error("publishing", "rank", rank, "err", err)
		if runErr == nil {
			runErr = err
		}
	}
	return collectExit(rep, runErr, rank, appRan, sig)
}

// analysisFlags defines collect's flags of the online analysis, each
// with its environment variable as the default.
func analysisFlags(fs *flag.FlagSet, a *online.Options) {
	fs.IntVar(&a.Workers, "workers", envInt("GPUPROF_WORKERS"), "goroutines analysing access records (default $GPUPROF_WORKERS or the number of cores)")
	fs.IntVar(&a.MemWorkers, "mem-workers", envInt("GPUPROF_MEM_WORKERS"), "goroutines for reuse distances and bank conflicts (default $GPUPROF_MEM_WORKERS or --workers)")
	fs.IntVar(&a.ReuseSampling, "reuse-sampling", envInt("GPUPROF_REUSE_SAMPLING"), "measure reuse distances in one traced block in this many of each launch; 1: every block (default $GPUPROF_REUSE_SAMPLING or 4)")
	fs.Int64Var(&a.CandidateLimit, "candidate-limit", int64(max(0, envInt("GPUPROF_CANDIDATE_LIMIT"))), "spatial candidates a worker holds before a resolution is brought forward (default $GPUPROF_CANDIDATE_LIMIT or 32768)")
	fs.Uint64Var(&a.ResolveEvery, "resolve-every", uint64(max(0, envInt("GPUPROF_RESOLVE_EVERY"))), "access records per worker between resolutions of spatial candidates (default $GPUPROF_RESOLVE_EVERY or 65536)")
	fs.Int64Var(&a.SpatialKeep, "spatial-keep", int64(envInt("GPUPROF_SPATIAL_KEEP")), "distinct values of one launch, object and access kind (and a quarter of its accesses) followed exactly before spatial redundancy samples the values by hash; negative: all, exact (default $GPUPROF_SPATIAL_KEEP or 65536)")
	fs.IntVar(&a.PrefetchBytes, "prefetch-structure", envIntOr("GPUPROF_PREFETCH_STRUCTURE", 1<<20), "modules of at most this many bytes have all their kernels disassembled when they load, in one nvdisasm run, rather than each at its first launch; 0: none (default $GPUPROF_PREFETCH_STRUCTURE or 1048576)")
	fs.IntVar(&a.QueueDepth, "queue-depth", envInt("GPUPROF_QUEUE_DEPTH"), "frames each analysis worker's queue holds (default $GPUPROF_QUEUE_DEPTH or 4)")
	sw := time.Duration(0)
	if v, err := time.ParseDuration(os.Getenv("GPUPROF_STRUCTURE_WAIT")); err == nil {
		sw = v
	}
	fs.DurationVar(&a.StructureWait, "structure-wait", sw, "longest wait for GPU functions' structure (nvdisasm), during the run and after the application's end (default $GPUPROF_STRUCTURE_WAIT or 30s)")
}

// completeOptions fills in what the flags give as text (the command, the
// file lists, the value hashing) and checks the job id.
func completeOptions(o *collector.Options, command []string, sassFiles, hostSyms string, noValues bool) error {
	o.Command = command
	if o.Replay == "" && len(o.Command) == 0 {
		return errors.New("nothing to measure: give an application after -- or --replay FILE")
	}
	if sassFiles != "" {
		o.SASSFiles = strings.Split(sassFiles, ",")
	}
	if hostSyms != "" {
		o.HostSymbols = strings.Split(hostSyms, ",")
	}
	o.Logf = func(format string, a ...any) { slog.Debug(fmt.Sprintf(format, a...)) }
	if noValues {
		h, err := valueHasher()
		if err != nil {
			return err
		}
		o.Analysis.HashValues = h
	}
	if o.Job == "" {
		o.Job = "local"
	}
	if err := broker.ValidateJob(o.Job); err != nil {
		return err
	}
	return nil
}

// dialCollector connects to the job's broker as a collector (the
// connection's name says which rank and process).
func dialCollector(o collector.Options, nats func(name string) broker.Options) (string, *broker.Conn, error) {
	name := "gpuprof collect"
	if rank, _, err := collector.ResolveRank(o.Rank, os.Getenv); err == nil {
		name = collectorConnName(rank, os.Getpid())
	}
	bo := nats(name)
	if len(bo.URLs) == 0 {
		return "", nil, errors.New("no broker: give --nats URL (gpuprof run sets it) or --local FILE")
	}
	bo.InboxPrefix = broker.InboxPrefix(o.Job, broker.RoleCollector) // what per-job permissions allow
	conn, err := broker.Connect(bo)
	return name, conn, err
}

// publishThrough makes conn where the collection goes: its items, the
// nvdisasm listings shared with the other ranks, the cubins uploaded. It
// returns what closes the publisher.
func publishThrough(ctx context.Context, conn *broker.Conn, o *collector.Options, window int) (func(context.Context) error, error) {
	pub, err := publish.New(conn, publish.Config{Job: o.Job, Window: window})
	if err != nil {
		return nil, err
	}
	o.Publisher = pub
	o.Share = conn // one rank disassembles each function
	job := o.Job
	o.Analysis.OnModule = func(h profile.ModuleHash, cubin []byte) {
		// The first rank that sees a module uploads it; the others
		// skip. A framework's big modules stay here: the listings of
		// their functions that ran go through the bucket instead.
		if len(cubin) > CubinKeepMax {
			return
		}
		if _, err := conn.PutModule(ctx, job, h, broker.ModuleCubin, cubin); err != nil {
			slog.Warn("module upload", "module", h, "err", err)
		}
	}
	return pub.Close, nil
}

// collectExit ends the rank's heartbeats (rep, nil without a broker) and
// gives collect's result: the exit status is the application's when it
// ran; what went wrong with the collection is named here and in the
// rank's provenance.
func collectExit(rep *statusReporter, runErr error, rank int32, appRan bool, sig os.Signal) error {
	var ee *collector.ExitError
	if rep != nil {
		if runErr != nil && !errors.As(runErr, &ee) && sig == nil {
			rep.close(stateFailed, oneLineErr(runErr))
		} else {
			rep.close(stateDone, "")
		}
	}
	switch {
	case errors.As(runErr, &ee):
		if runErr.Error() != ee.Error() {
			slog.Error("collection incomplete", "rank", rank, "err", oneLineErr(runErr))
		}
		return exitError{ee.Code}
	case sig != nil:
		// Interrupted with no application status of its own to report (a
		// replay, or an application that never started): as a shell
		// reports a command ended by the signal.
		slog.Info("collector interrupted", "rank", rank, "signal", proctree.SignalName(sig), "err", runErr)
		return exitError{128 + signalNumber(sig)}
	case runErr != nil && appRan:
		slog.Error("collection incomplete", "rank", rank, "err", oneLineErr(runErr))
		return nil
	case runErr != nil:
		return fmt.Errorf("rank %d: %w", rank, runErr)
	}
	return nil
}

// oneLineErr is err's message on one line.
func oneLineErr(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// publishFailure publishes the done item of a rank whose collection could
// not start, naming why, so that the rank is incomplete in every output;
// it returns the rank and whether its done item went out.
func publishFailure(ctx context.Context, o collector.Options, cause error) (int32, bool) {
	r, _, err := collector.ResolveRank(o.Rank, os.Getenv)
	if err != nil || o.Publisher == nil {
		return r, false
	}
	done, err := online.DoneItem(o.Job, r, 0, nil, -1, "collector did not start: "+strings.TrimPrefix(cause.Error(), "collector: "))
	if err == nil {
		err = o.Publisher.Publish(ctx, done, true)
	}
	if err != nil {
		slog.Warn("publishing the failed rank's done item", "rank", r, "err", err)
		return r, false
	}
	return r, true
}

// localPublisher merges a rank's items into one profile in memory, for runs
// without a broker (a single process measured on its own).
type localPublisher struct {
	mu sync.Mutex
	p  *profile.Profile
}

func (l *localPublisher) Publish(_ context.Context, item *profile.Profile, _ bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p.Merge(item)
}

// collectPasses runs one collection per pass (each replayed stream, or each
// measurement kind of --mode all) through one passPublisher, so the rank
// publishes one sequence of items. It returns the last pass's result, the
// rank (-1 if the collection did not start), whether the application ran
// (its exit status is then the rank's), and the signal that interrupted
// it (no pass follows one).
//
// --mode all runs the application three times: PC sampling (kernel times
// and stalls), hybrid (instruction counts), value tracing. The hybrid pass
// counts one kernel function per process (docs/inject.md): unless
// --hybrid-kernel names one, it is the one with the most GPU time in this
// collector's PC-sampling pass (kernelTimes).
func collectPasses(ctx context.Context, o collector.Options) (runErr error, rank int32, appRan bool, sig os.Signal) {
	type pass struct {
		replay, mode string
		tally        bool // tally the pass's kernel times (kernelTimes)
		hotKernel    bool // a hybrid pass of the tallied pass's hottest kernel
	}
	var passes []pass
	switch {
	case strings.Contains(o.Replay, ","):
		for _, f := range strings.Split(o.Replay, ",") {
			passes = append(passes, pass{replay: f})
		}
	case o.Mode == "all" && o.Replay == "":
		// CUPTI first: its kernel times are the ones kept, and they choose
		// the kernel whose instructions the hybrid pass counts.
		auto := o.HybridKernel == ""
		passes = []pass{{mode: "pcsampling", tally: auto}, {mode: "hybrid", hotKernel: auto}, {mode: "redundancy"}}
	default:
		c, err := collector.New(o)
		if err != nil {
			return err, -1, false, nil
		}
		err = c.Run(ctx)
		logRanks(c)
		return err, c.Rank(), o.Replay == "" && c.ExitCode() >= 0, c.Interrupted()
	}
	rank, _, err := collector.ResolveRank(o.Rank, os.Getenv)
	if err != nil {
		return err, -1, false, nil
	}
	modes := make([]string, len(passes))
	for i, ps := range passes {
		modes[i] = ps.mode
		if ps.replay != "" {
			m, err := streamMode(collector.ExpandRank(ps.replay, rank))
			if err != nil {
				return err, -1, false, nil
			}
			modes[i] = m.String()
		}
	}
	drop := dropTimes(modes)
	pp := &passPublisher{next: o.Publisher}
	var times *kernelTimes
	for i, ps := range passes {
		po := o // the rank is resolved again by each pass: the same
		po.Publisher = pp
		po.Replay = ps.replay
		if ps.mode != "" {
			po.Mode = ps.mode
		}
		if ps.tally {
			times = &kernelTimes{next: pp}
			po.Publisher = times
		}
		if ps.hotKernel && times != nil {
			name, t := times.hottest()
			po.HybridKernel = hybridKernelName(name)
			if po.HybridKernel != "" {
				slog.Info("hybrid pass: counting the instructions of the kernel with the most GPU time in the PC-sampling pass",
					"rank", rank, "kernel", symname.Short(name), "gpu_time", time.Duration(t), "match", po.HybridKernel)
			} else {
				slog.Info("hybrid pass: the PC-sampling pass timed no kernel launched directly; counting the first kernel launched", "rank", rank)
			}
		}
		last := i == len(passes)-1
		var c *collector.Collector
		if !last && o.OnRank != nil {
			// The ranks' applications end with the last pass (or an
			// interrupted one): before, they only run.
			po.OnRank = func(r int32, st collector.RankState, exit int) {
				if st == collector.RankRunning || c.Interrupted() != nil {
					o.OnRank(r, st, exit)
				}
			}
		}
		pp.startPass(last, drop[i])
		c, err = collector.New(po)
		if err != nil {
			if i == 0 {
				return err, -1, false, nil
			}
			return err, rank, appRan, nil
		}
		// An interrupted pass is the last: its done item ends the rank.
		pp.interrupted = func() bool { return c.Interrupted() != nil }
		slog.Debug("collection pass", "rank", rank, "pass", i+1, "of", len(passes), "mode", modes[i], "replay", ps.replay)
		runErr = c.Run(ctx)
		logRanks(c)
		appRan = appRan || (ps.replay == "" && c.ExitCode() >= 0)
		if sig := c.Interrupted(); sig != nil {
			return runErr, rank, appRan, sig
		}
		var ee *collector.ExitError
		if runErr != nil && !errors.As(runErr, &ee) {
			return runErr, rank, appRan, nil
		}
	}
	return runErr, rank, appRan, nil
}

// dropTimes says, for passes of the given modes, which passes' kernel
// times are dropped when they are merged. A PC-sampling pass's are the
// ones kept (CUPTI's activity records around unmodified code); a hybrid
// pass times (GPUPROF_KERNEL_ACTIVITY=1) the kernel whose code is patched
// to count instructions, and a value-tracing pass times kernels on the host
// around patched code: theirs are dropped when a pass of a better kind
// measured the same kernels (hybrid's then only under a PC-sampling pass).
func dropTimes(modes []string) []bool {
	pcs, cupti := false, false
	for _, m := range modes {
		pcs = pcs || m == "pcsampling"
		cupti = cupti || m != "redundancy"
	}
	drop := make([]bool, len(modes))
	for i, m := range modes {
		drop[i] = m == "redundancy" && cupti || m == "hybrid" && pcs
	}
	return drop
}

// logRanks says which ranks a collector published when they are more
// than its own (a torch launcher's workers, several CUDA processes).
func logRanks(c *collector.Collector) {
	if rs := c.Ranks(); len(rs) > 1 || (len(rs) == 1 && rs[0] != c.Rank()) {
		slog.Info("collector published ranks", "ranks", fmt.Sprint(rs))
	}
}

// envIntOr is envInt with a default for an unset or malformed variable.
func envIntOr(name string, def int) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return def
	}
	return n
}

// envInt is the integer in the environment variable name, 0 when unset or
// not a number (the flag's default then applies).
func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		return 0
	}
	return n
}
