package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"gpuprof/analysis"
	"gpuprof/broker"
	"gpuprof/collector/proctree"
	"gpuprof/profile"
	"gpuprof/reducer"
	export "gpuprof/viewer-export"
)

func init() {
	register("run", "profile a job: broker, reduction tree, and a collector around every rank", cmdRun)
	register("reduce", "run reduction-tree nodes of a job as a separate process", cmdReduce)
}

// jobConfig is what run and demo share.
type jobConfig struct {
	Out          string
	Job          string
	Broker       broker.Options // URLs empty: start an embedded broker in Out
	Replicas     int
	FanIn        int
	Ranks        int
	RankWait     time.Duration
	AnalysisWait time.Duration // bound on the analysis of the final profile (0: none)
	ExtReduce    bool          // the tree runs elsewhere (gpuprof reduce); only wait for the final profile
	SASS         string        // nvdisasm outputs for the analysis
	Collect      []string      // flags every collector gets (mode, sampling, replay, sass)
	Launcher     []string      // user's launcher command (run), or nil
	Spawn        []string      // demo: per-rank replay files, run as local processes
	RankLabels   map[int32]string
	Stdout       io.Writer // the report's first screen goes here (nil: run, whose stdout is the application's)

	// Collectors' own credentials (an external cluster with per-job
	// permissions, gpuprof nats-config): they replace Broker's for the ranks.
	CollectorNKey, CollectorCreds string
	StreamMaxBytes                int64 // 0: broker.DefaultStreamMaxBytes
	// Env is what the ranks get beyond run's own environment (NAME=value):
	// secrets travel here, never on a command line.
	Env []string
	// StopWait: after an interruption, how long the application and the
	// collectors get before the report is written (lifecycle.go).
	StopWait time.Duration
	// Listen is the embedded broker's address (HOST[:PORT]; default the
	// loopback address, or a routable one when MultiHost).
	Listen string
	// MultiHost: the launcher places ranks on other hosts.
	MultiHost bool
	// RanksElsewhere: some ranks' collectors run outside the launcher
	// (torchrun --nnodes: each node starts its own), so its exit does not
	// end them.
	RanksElsewhere bool
}

func newJobID() string {
	var b [3]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

func cmdRun(args []string) error {
	fs := newFlags("run", "[flags] -- LAUNCHER ARGS... APP ARGS...", `
Profiles a job: starts an embedded NATS server with JetStream in the output
directory (or joins --nats URL), starts the reduction tree, inserts
'gpuprof collect' after the launcher's own options so every rank is wrapped
(mpirun, mpiexec, srun; a plain command is one rank), shows progress, and
when the job ends writes the merged profile, the report and every export to
the output directory.

Before it starts anything, run checks its flags, the injection library, the
launcher and the application (on this host) and the broker, and stops with
one line naming the problem. An output directory that is not empty is
refused unless --force is given (which replaces gpuprof's outputs in it).
Standard output is the application's: run's progress and its summary (the
output directory, ranks measured and incomplete, the top advice) go to
standard error.

SIGINT or SIGTERM (Ctrl-C, a batch system's time limit) is passed to the
application; the report of what was merged is written, marked interrupted,
within --stop-timeout; a second one stops waiting.

Exit status: the application's (the launcher's) when it ran, or 128+n when
signal n ended it; 125 when gpuprof itself failed (a bad flag, nothing to
measure, the broker; or the reduction, when the application succeeded), a
status applications rarely use.

  gpuprof run -o lj -- mpirun -np 64 ./lmp -in in.lj
  gpuprof run --mode all -o lj -- mpirun -np 64 ./lmp -in in.lj`)
	var cfg jobConfig
	fs.StringVar(&cfg.Out, "o", "gpuprof-out", "output directory (must not exist or be empty, unless --force)")
	force := fs.Bool("force", false, "replace gpuprof's outputs in an existing output directory")
	fs.StringVar(&cfg.Job, "job", "", "job id (default: generated)")
	fs.IntVar(&cfg.FanIn, "fan-in", 8, "reduction tree fan-in")
	fs.IntVar(&cfg.Ranks, "ranks", 0, "rank count (default: the launcher's -np)")
	fs.IntVar(&cfg.Replicas, "replicas", 0, "stream replicas (default 1 embedded, 3 with --nats)")
	fs.DurationVar(&cfg.RankWait, "rank-timeout", 60*time.Second, "how long after the application ends missing ranks may still report")
	fs.DurationVar(&cfg.AnalysisWait, "analysis-timeout", 3*time.Minute, "bound on the advisory analysis of the final profile; past it the exports and the report are written without advice ('gpuprof report DIR' runs it again without a bound); 0: no bound")
	fs.BoolVar(&cfg.ExtReduce, "external-reducers", false, "do not run the tree here: 'gpuprof reduce' processes run its nodes")
	fs.DurationVar(&cfg.StopWait, "stop-timeout", 10*time.Second, "after SIGINT or SIGTERM (passed on to the application), how long the application and the collectors get before the report of what was merged is written; keep it well under the batch system's kill delay (Slurm's KillWait: 30s)")
	fs.StringVar(&cfg.Listen, "broker-listen", os.Getenv("GPUPROF_BROKER_LISTEN"), "address the embedded broker listens on, HOST[:PORT] (default: 127.0.0.1, or this host's routable address when the launcher places ranks on other hosts; docs/cluster.md)")
	// What every collector gets, in this order (collectflags.go).
	cf := newCollectorFlags(fs)
	inject := cf.Path("inject", "", "injection library (default $GPUPROF_INJECT, else lib/libgpuprof_inject.so beside gpuprof, where 'make inject' puts it)", absPath)
	hostSyms := cf.Path("host-symbols", "", "symbol tables for host binaries not on the collectors' machines (gpuprof symtab; with --replay)", absList)
	mode := cf.String("mode", "", "redundancy | pcsampling | hybrid | all (default redundancy; all: three runs, pcsampling, hybrid on the kernel with the most GPU time in the pcsampling run, redundancy, merged by calling context)")
	p := cf.Int("block-sampling", 0, "block sampling period P (default 50)")
	k := cf.Int("kernel-sampling", 0, "kernel sampling period K (default 1)")
	cf.String("hybrid-kernel", os.Getenv("GPUPROF_HYBRID_KERNEL"), "hybrid mode (and the hybrid run of --mode all): count the instructions of the kernel whose mangled name contains NAME (its plain name will do) instead of the first kernel launched (hybrid) or the kernel with the most GPU time (all); only one kernel gets counts (default $GPUPROF_HYBRID_KERNEL)")
	reuse := cf.Int("reuse-sampling", 0, "measure reuse distances in one traced block in this many of each launch; 1: every block (default 4)")
	cf.Bool("python-frames", false, "run Python with its perf trampoline (PYTHONPERFSUPPORT=1) so host stacks name Python functions")
	cf.Uint64("batch-records", 0, "collectors publish a batch every this many access records (default 1048576)")
	batchInterval := cf.Duration("batch-interval", 0, "collectors also publish a batch at least this often, however few records (default 5s)")
	replay := cf.Path("replay", "", "collectors replay recorded streams instead of measuring ({rank} or {rank:N} is the rank)", absPath)
	sassFiles := cf.Path("sass", os.Getenv("GPUPROF_SASS"), "nvdisasm outputs (files or directories, comma-separated) for modules when nvdisasm is absent", absList)
	noValues := cf.Bool("no-values", false, "store no value read from the application's memory (value sketches hold them by default): keyed hashes only; counts and redundancy fractions stay")
	nats := natsFlags(fs)
	fs.StringVar(&cfg.CollectorNKey, "collector-nkey", "", "nkey seed the collectors use instead of run's own credentials (gpuprof nats-config writes J.collector.nk)")
	fs.StringVar(&cfg.CollectorCreds, "collector-creds", "", "NATS credentials file the collectors use instead of run's own")
	fs.Int64Var(&cfg.StreamMaxBytes, "stream-max-bytes", 0, "the byte limit of the job's two streams together (a quarter for the reducers' partials; default 8 GiB; a cluster account with less storage needs less)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Launcher = fs.Args()
	cfg.Broker = nats("gpuprof run")
	cfg.SASS = *sassFiles
	if err := checkRun(&cfg, runChecks{mode: *mode, blockSampling: *p, kernelSampling: *k, reuseSampling: *reuse,
		batchInterval: *batchInterval, replay: *replay, force: *force, injectLib: *inject, hostSymbols: *hostSyms}); err != nil {
		return err
	}
	cfg.MultiHost = multiHost(cfg.Launcher, os.Getenv)
	cfg.RanksElsewhere = cfg.MultiHost && launcherName(cfg.Launcher) == "torchrun"
	cfg.Collect = cf.args()
	if *noValues {
		cfg.Env = append(cfg.Env, ValueKeyEnv+"="+newValueKey())
	}
	return runJob(cfg)
}

// absPath makes a file given to run usable by collectors started in
// another directory ("" stays "").
func absPath(f string) string {
	if f == "" {
		return ""
	}
	if a, err := filepath.Abs(f); err == nil {
		return a
	}
	return f
}

func absList(list string) string {
	var out []string
	for _, f := range strings.Split(list, ",") {
		if a, err := filepath.Abs(f); err == nil {
			f = a
		}
		out = append(out, f)
	}
	return strings.Join(out, ",")
}

// runJob runs one profiled job end to end and writes its output directory.
func runJob(cfg jobConfig) error {
	start := time.Now()
	if cfg.Job == "" {
		cfg.Job = newJobID()
	}
	if err := broker.ValidateJob(cfg.Job); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Out, 0o700); err != nil {
		return err
	}
	// An existing directory (--force) is made private too: the broker's
	// credentials go in it. Failing that, it stays as it was.
	if err := os.Chmod(cfg.Out, 0o700); err != nil {
		slog.Warn("output directory permissions", "dir", cfg.Out, "err", err)
	}
	if cfg.StopWait <= 0 {
		cfg.StopWait = 10 * time.Second
	}
	if cfg.RankWait <= 0 {
		cfg.RankWait = 60 * time.Second // the reducers' default (demo sets none)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Signals are handled from here on (signals.go): the first interrupts
	// the job, which still ends with a report.
	sigs, stopSigs := notifyInterrupts()
	defer stopSigs()
	ctx := context.Background()

	// The broker, and what the ranks get to reach it.
	bo, cb, emb, err := jobBroker(&cfg)
	if err != nil {
		return err
	}
	if emb != nil {
		defer emb.Shutdown()
	}
	bo.InboxPrefix = broker.InboxPrefix(cfg.Job, broker.RoleReducer)
	conn, err := broker.Connect(bo)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := prepareJobStreams(ctx, conn, &cfg); err != nil {
		return err
	}
	env, err := rankEnv(cfg.Job, cb)
	if err != nil {
		return err
	}
	env = append(env, cfg.Env...)

	procs, env, err := rankCommands(&cfg, self, cb, env)
	if err != nil {
		return err
	}

	// The reduction tree, merging while the ranks run.
	tree, err := reducer.PlanN(cfg.Ranks, cfg.FanIn)
	if err != nil {
		return err
	}
	slog.Info("job", "id", cfg.Job, "ranks", cfg.Ranks, "tree", tree.String(), "broker", strings.Join(bo.URLs, ","), "out", cfg.Out)
	if cfg.ExtReduce && emb != nil {
		ca := ""
		if len(bo.CAPEM) > 0 {
			ca = " --tls-ca " + filepath.Join(cfg.Out, "broker", "auth", cfg.Job+".ca.pem")
		}
		slog.Info(fmt.Sprintf("the tree's nodes: gpuprof reduce --job %s --ranks %d --fan-in %d --nats %s --nkey %s%s --node NODES", cfg.Job, cfg.Ranks, cfg.FanIn, emb.URL, bo.NKeySeedFile, ca))
	}
	board, err := watchStatus(conn.NC, cfg.Job)
	if err != nil {
		return err
	}
	defer board.close()
	if emb != nil {
		board.connected = emb.ClientNames
	}
	prog := newProgress(cfg.Ranks)
	done := startTree(ctx, &cfg, conn, tree, prog)

	// The application (or the replaying collectors), until the tree's
	// final profile; then whatever still runs is ended.
	rp, err := startRanks(procs, env)
	if err != nil {
		return err
	}
	res, end := superviseJob(ctx, &cfg, conn, rp, board, done, sigs)
	prog.finish()
	go abandonOnSignals(sigs, end)
	if res.err != nil {
		exit := end.wait() // nothing of the job outlives run
		return appStatusOr(exit, fmt.Errorf("reduction: %w (the application exited with %d)", res.err, exit))
	}
	p := res.p
	if err := finishProfile(ctx, &cfg, conn, tree, board, end, p); err != nil {
		return appStatusOr(end.wait(), err)
	}
	saveModules(ctx, conn, cfg.Job, cfg.Out, p)
	adv, werr := writeOutputs(cfg.Out, cfg.SASS, p, cfg.Ranks, cfg.AnalysisWait)
	exit := end.wait()
	if werr != nil {
		return appStatusOr(exit, werr)
	}
	if res.stats != nil {
		slog.Info("reduction", "batches", res.stats.ItemsMerged, "MB", fmt.Sprintf("%.1f", float64(res.stats.BytesIn)/1e6), "ranks", len(p.Items), "tree", tree.String(),
			"application", end.appTime.Round(time.Millisecond), "tail", res.stats.Tail.Round(time.Millisecond), "total", time.Since(start).Round(time.Millisecond))
	}
	if cfg.Stdout != nil {
		if err := printReportHead(cfg.Stdout, cfg.Out, 45); err != nil {
			return err
		}
	}
	writeSummary(os.Stderr, cfg.Out, p, adv, cfg.Ranks, exit)
	fmt.Fprintln(os.Stderr, runCost(res.stats, len(p.Items), emb != nil))
	if exit != 0 {
		return exitError{exit}
	}
	return nil
}

// prepareJobStreams makes the job's streams and its module bucket before
// any rank starts.
func prepareJobStreams(ctx context.Context, conn *broker.Conn, cfg *jobConfig) error {
	conn.Replicas = cfg.Replicas
	if _, err := conn.EnsureStreamWith(ctx, cfg.Job, broker.StreamOptions{Replicas: cfg.Replicas, MaxBytes: cfg.StreamMaxBytes}); err != nil {
		return err
	}
	// Collectors may not create buckets under per-job permissions, and the
	// bucket needs the stream's replicas to survive a node.
	return conn.EnsureModuleBucket(ctx, cfg.Job, cfg.Replicas)
}

// startTree runs the reduction tree (or, with external reducers, waits
// for their final profile) while the ranks run; its result comes on the
// channel returned.
func startTree(ctx context.Context, cfg *jobConfig, conn *broker.Conn, tree *reducer.Tree, prog *progress) <-chan treeResult {
	rcfg := reducer.Config{Job: cfg.Job, Conn: conn, Tree: tree, RankTimeout: cfg.RankWait, Output: cfg.Out, OnProgress: prog.update}
	done := make(chan treeResult, 1)
	go func() {
		var r treeResult
		if cfg.ExtReduce {
			r.p, r.err = reducer.WaitFinal(ctx, conn, cfg.Job)
		} else {
			r.p, r.stats, r.err = reducer.RunTree(ctx, rcfg)
		}
		done <- r
	}()
	return done
}

// finishProfile adds to the tree's final profile what only the end of
// the job tells: the ranks beyond the plan, why ranks are incomplete, the
// interruption, the ranks' labels (the demo's captures); with external
// reducers, it is written here.
func finishProfile(ctx context.Context, cfg *jobConfig, conn *broker.Conn, tree *reducer.Tree, board *statusBoard, end *jobEnd, p *profile.Profile) error {
	// Ranks past the plan (more CUDA processes than the launcher said)
	// were consumed by no leaf: merged here, and named, once their
	// collectors have stored all they publish (they exited).
	if board.unplanned(cfg.Ranks) {
		end.wait()
	}
	if extra, err := reducer.MergeUnplanned(ctx, conn, cfg.Job, tree, p); err != nil {
		slog.Warn("ranks beyond the plan not merged", "err", err)
	} else if len(extra) > 0 {
		slog.Warn("ranks beyond the expected count merged after the tree (more CUDA processes than the launcher said; --ranks sets the count)", "expected", cfg.Ranks, "extra", fmt.Sprint(extra))
	}
	board.explain(p, cfg.Ranks, end.final)
	if end.interrupted != nil {
		p.Interrupted = proctree.SignalName(end.interrupted)
	}
	if cfg.ExtReduce {
		if err := profile.WriteFile(filepath.Join(cfg.Out, profile.FileName), p); err != nil {
			return err
		}
	}
	for r, label := range cfg.RankLabels {
		if ri := p.Ranks[r]; ri != nil {
			ri.Source = label
		}
	}
	return nil
}

// rankCommands are the ranks' command lines, each wrapped in gpuprof
// collect (the broker and its credentials are in env, which it returns
// with what the ranks get beyond it): the demo's replaying collectors, or
// the launcher with the collector inserted. It sets cfg.Ranks when the
// launcher says how many.
func rankCommands(cfg *jobConfig, self string, cb broker.Options, env []string) ([][]string, []string, error) {
	wrap := []string{self, "collect"}
	wrap = append(wrap, brokerArgs(cb)...)
	wrap = append(wrap, "--stop-timeout", (cfg.StopWait / 2).String())
	wrap = append(wrap, cfg.Collect...)
	var procs [][]string
	switch {
	case cfg.Spawn != nil:
		for r, f := range cfg.Spawn {
			procs = append(procs, append(append([]string{}, wrap...), "--rank", fmt.Sprint(r), "--replay", f))
		}
		cfg.Ranks = len(cfg.Spawn)
	default:
		replaying := false
		for _, a := range cfg.Collect {
			replaying = replaying || a == "--replay"
		}
		var cmd []string
		var n int
		var err error
		if replaying {
			// Collectors replay: whatever follows the launcher's options is not run.
			cmd, n, err = wrapLauncher(append(append([]string{}, cfg.Launcher...), "replay"), wrap)
			if err == nil {
				cmd = cmd[:len(cmd)-1]
				if !launchers[filepath.Base(cfg.Launcher[0])] {
					cmd = cmd[:len(wrap)] // a plain command: one rank replays, nothing runs
				}
			}
		} else {
			cmd, n, err = wrapLauncher(cfg.Launcher, append(wrap, "--"))
		}
		if err != nil {
			return nil, nil, err
		}
		if cfg.Ranks == 0 {
			cfg.Ranks = n
		}
		if cfg.Ranks == 0 {
			return nil, nil, errors.New("the launcher does not say how many ranks: give --ranks N")
		}
		// The collectors learn the count too: the one collector of a
		// torchrun or a plain command reports the ranks that never came.
		env = append(env, "GPUPROF_RANKS="+fmt.Sprint(cfg.Ranks))
		procs = [][]string{forwardEnv(cmd, envNames(env))}
		env = append(env, launcherEnv(cmd, cfg.StopWait)...)
	}
	return procs, env, nil
}

// brokerArgs passes the collectors' broker files (paths, which must be
// valid where the ranks run); secrets go in their environment (rankEnv).
func brokerArgs(o broker.Options) []string {
	var a []string
	for _, kv := range [][2]string{{"--creds", absPath(o.CredsFile)}, {"--user", o.User},
		{"--tls-ca", absPath(o.CAFile)}, {"--tls-cert", absPath(o.CertFile)}, {"--tls-key", absPath(o.KeyFile)}} {
		if kv[1] != "" {
			a = append(a, kv[0], kv[1])
		}
	}
	return a
}

// writeOutputs runs the analysis and writes every export and the report;
// it returns the advice. The profile is written first, so nothing merged
// is lost whatever the analysis does; the analysis gets at most bound (0:
// no bound), after which the exports and the report are written without
// advice, saying why: the run ends even on code whose analysis is slow
// (an exponential walk over NCCL's kernels once held DDP runs for minutes).
func writeOutputs(out, sassFiles string, p *profile.Profile, ranks int, bound time.Duration) ([]analysis.Advice, error) {
	if err := profile.WriteFile(filepath.Join(out, profile.FileName), p); err != nil {
		return nil, err
	}
	mods, err := moduleSource(out, sassFiles, p)
	if err != nil {
		return nil, err
	}
	mods.saveBack = true
	type result struct {
		adv []analysis.Advice
		err error
	}
	done := make(chan result, 1)
	go func() {
		adv, err := advise(p, mods, analysis.Options{Static: true})
		mods.Close()
		done <- result{adv, err}
	}()
	var timeout <-chan time.Time
	if bound > 0 {
		t := time.NewTimer(bound)
		defer t.Stop()
		timeout = t.C
	}
	var adv []analysis.Advice
	var note string
	select {
	case r := <-done:
		adv = r.adv
		if r.err != nil {
			// A failed analysis must not read as one that found nothing.
			note = fmt.Sprintf("not computed: the analysis failed (%v); 'gpuprof report %s' runs it again", r.err, out)
			slog.Warn("analysis", "err", r.err)
		} else {
			note = mods.noAdviceNote(adv)
		}
	case <-timeout:
		note = fmt.Sprintf("not computed: the analysis did not finish within --analysis-timeout %v; 'gpuprof report %s' runs it without a bound", bound, out)
		slog.Warn("analysis did not finish in time: exports and report without advice", "bound", bound)
	}
	return adv, export.WriteAllOptions(out, p, adv, export.Options{ExpectedRanks: ranks, AdviceNote: note})
}

// advise is the analysis writeOutputs runs (a test stands in a slow one).
var advise = analysis.Advise

// progress shows ranks done, batches merged and MB in: a bar on a
// terminal, a log line every few seconds otherwise.
type progress struct {
	mu   sync.Mutex
	bar  *progressbar.ProgressBar
	last time.Time
	n    int
}

func newProgress(ranks int) *progress {
	pr := &progress{n: ranks}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		pr.bar = progressbar.NewOptions(ranks, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("ranks done"),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionClearOnFinish())
	}
	return pr
}

func (pr *progress) update(p reducer.Progress) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	desc := fmt.Sprintf("ranks done %d/%d, %d batches merged, %.1f MB in", p.RanksDone, p.RanksTotal, p.BatchesMerged, float64(p.BytesIn)/1e6)
	if pr.bar != nil {
		pr.bar.Describe(desc)
		pr.bar.Set(p.RanksDone)
		return
	}
	if time.Since(pr.last) > 3*time.Second || p.RanksDone == p.RanksTotal {
		pr.last = time.Now()
		slog.Info(desc)
	}
}

func (pr *progress) finish() {
	if pr.bar != nil {
		pr.bar.Finish()
	}
}

func cmdReduce(args []string) error {
	fs := newFlags("reduce", "--job J --ranks N --node L.I [flags]", `
Runs reduction-tree nodes of a job in this process, for trees spread over
machines: every process must use the same --ranks and --fan-in. A node
consumes its inputs from the job's stream (batches of its ranks, or its
children's partials), merges them, and publishes its partial upward; the
root writes the final profile (-o). A restarted node replays its inputs
from the stream; merging is idempotent, so the result is the same.`)
	job := fs.String("job", os.Getenv("GPUPROF_JOB"), "job id")
	ranks := fs.Int("ranks", 0, "rank count of the job")
	fanIn := fs.Int("fan-in", 8, "tree fan-in")
	nodes := fs.String("node", "", "nodes to run, comma-separated (level.index; 'all' runs the whole tree)")
	out := fs.String("o", "", "where the root writes the final profile (file or directory)")
	wait := fs.Duration("rank-timeout", 60*time.Second, "how long missing ranks may still report")
	nats := natsFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *job == "" || *ranks <= 0 || *nodes == "" {
		printUsage(fs)
		return errors.New("--job, --ranks and --node are required")
	}
	bo := nats(fmt.Sprintf("gpuprof reduce %s", *nodes))
	if len(bo.URLs) == 0 {
		return errors.New("--nats is required")
	}
	bo.InboxPrefix = broker.InboxPrefix(*job, broker.RoleReducer)
	conn, err := broker.Connect(bo)
	if err != nil {
		return err
	}
	defer conn.Close()
	tree, err := reducer.PlanN(*ranks, *fanIn)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := reducer.Config{Job: *job, Conn: conn, Tree: tree, RankTimeout: *wait, Output: *out}
	if *nodes == "all" {
		_, st, err := reducer.RunTree(ctx, cfg)
		if err == nil {
			slog.Info("tree done", "items", st.ItemsMerged, "tail", st.Tail)
		}
		return err
	}
	names, err := parseNodes(*nodes)
	if err != nil {
		return err
	}
	return runNodes(ctx, cfg, names)
}
