package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/proctree"
	"gpuprof/profile"
	"gpuprof/reducer"
)

// The life of a job under gpuprof run: the ranks run under their launcher
// while the tree merges; the job ends when the tree's final profile is
// there, which every wait below bounds:
//
//   - the application ends (every rank's collector says so, or the
//     launcher exits): the reducers get the end signal, and ranks not done
//     rank-timeout later are sealed incomplete, whatever their collectors
//     still do (analysing, stalled, dead);
//   - an interruption (SIGINT, SIGTERM) is passed to the launcher, the
//     reducers seal what is missing stop-timeout later, and a launcher
//     still alive then is ended; a second interruption ends it at once;
//   - once the final profile is there, commands that still run (their
//     ranks done, they may start more) and ranks beyond the plan are
//     waited for, bounded alike (waitCommands); then a launcher still
//     running (its collectors cut at the rank timeout) is ended: SIGTERM,
//     then SIGKILL for everything below gpuprof run, so no process of the
//     job is left.

// launcherGone is how long after the launcher's exit ranks still missing
// are sealed: its collectors exited with it, and anything they sent is
// stored by then.
const launcherGone = 3 * time.Second

type treeResult struct {
	p     *profile.Profile
	stats *reducer.TreeStats
	err   error
}

// jobBroker starts the job's embedded broker, unless the job uses a
// cluster (--nats), and returns run's own client options, the collectors'
// and the embedded broker (nil with --nats).
func jobBroker(cfg *jobConfig) (run, col broker.Options, emb *broker.Embedded, err error) {
	bo := cfg.Broker
	if len(bo.URLs) > 0 {
		if cfg.Replicas == 0 {
			cfg.Replicas = 3
		}
		col = bo
		if err := checkCollectorCreds(cfg); err != nil {
			return run, col, nil, err
		}
		if cfg.CollectorNKey != "" || cfg.CollectorCreds != "" {
			col.NKeySeedFile, col.CredsFile, col.NKeySeed, col.User, col.Password, col.Token = absPath(cfg.CollectorNKey), absPath(cfg.CollectorCreds), "", "", "", ""
		}
		return bo, col, nil, nil
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	host, port, tlsHosts, err := brokerAddress(cfg.Listen, cfg.MultiHost)
	if err != nil {
		return run, col, nil, err
	}
	dir := filepath.Join(cfg.Out, "broker")
	os.RemoveAll(dir)
	// The job's own account and keys, beside the broker's storage, both
	// user-only: nothing but the job can connect.
	auth, err := broker.NewJobAuth(filepath.Join(dir, "auth"), cfg.Job, tlsHosts)
	if err != nil {
		return run, col, nil, err
	}
	emb, err = broker.StartEmbeddedWith(broker.EmbeddedOptions{Dir: dir, Host: host, Port: port, Auth: auth})
	if err != nil {
		return run, col, nil, fmt.Errorf("embedded broker: %w", err)
	}
	if len(tlsHosts) > 0 {
		slog.Info("broker listens for other hosts", "url", emb.URL, "tls_names", strings.Join(tlsHosts, ","))
	}
	return emb.Options("gpuprof run"), emb.ClientOptions(broker.RoleCollector, "gpuprof collect"), emb, nil
}

// checkCollectorCreds refuses to hand run's own cluster credentials to the
// collectors: they would get the reducer's rights.
func checkCollectorCreds(cfg *jobConfig) error {
	bo := cfg.Broker
	if len(bo.URLs) > 0 && cfg.CollectorNKey == "" && cfg.CollectorCreds == "" && (bo.NKeySeedFile != "" || bo.CredsFile != "" || bo.NKeySeed != "") {
		return errors.New("--nats with run's own nkey or credentials: give the collectors theirs (--collector-nkey or --collector-creds; gpuprof nats-config writes them), which may only publish: they must not get the reducer's rights")
	}
	return nil
}

// rankProcs are the launcher processes of a job (one launcher, or the
// demo's replaying collectors).
type rankProcs struct {
	cmds    []*exec.Cmd
	started time.Time
	exited  chan struct{} // closed once every process exited
	code    int           // the first non-zero status (128+n for a signal), valid after exited
	appTime time.Duration
	mu      sync.Mutex
	ended   bool // gpuprof run ended them (they did not exit by themselves)
}

// startRanks starts the launcher processes with env added to run's own
// environment.
func startRanks(procs [][]string, env []string) (*rankProcs, error) {
	// Orphans (a launcher's ranks when it dies first) become run's
	// children, so ending the job finds them.
	if err := proctree.BecomeSubreaper(); err != nil {
		slog.Debug("no subreaper", "err", err)
	}
	rp := &rankProcs{exited: make(chan struct{}), started: time.Now()}
	codes := make([]int, len(procs))
	var wg sync.WaitGroup
	for i, argv := range procs {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		if len(procs) == 1 {
			cmd.Stdin = os.Stdin
		}
		if err := cmd.Start(); err != nil {
			rp.end(0)
			return nil, fmt.Errorf("starting %s: %w", argv[0], err)
		}
		rp.cmds = append(rp.cmds, cmd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = waitStatus(cmd.Wait(), cmd)
		}()
	}
	go func() {
		wg.Wait()
		for _, c := range codes {
			if c != 0 {
				rp.code = c
				break
			}
		}
		rp.appTime = time.Since(rp.started)
		close(rp.exited)
	}()
	return rp, nil
}

// waitStatus is a process's status as a shell reports it: its exit code,
// or 128+n when signal n ended it.
func waitStatus(err error, cmd *exec.Cmd) int {
	if cmd.ProcessState != nil {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return cmd.ProcessState.ExitCode()
	}
	if err != nil {
		slog.Error("waiting for the launcher", "err", err)
	}
	return 127
}

func (rp *rankProcs) done() bool {
	select {
	case <-rp.exited:
		return true
	default:
		return false
	}
}

// signal passes sig to the launcher processes (a launcher passes it on to
// its ranks: mpirun and srun do) and straight to the collectors on this
// host (gpuprof processes below run): Open MPI's mpirun, for one, passes
// it on only after its kill delay.
func (rp *rankProcs) signal(sig os.Signal) {
	sent := map[int]bool{}
	for _, c := range rp.cmds {
		s := sig
		if launcherName(c.Args) == "srun" && sig == os.Interrupt {
			// srun answers one SIGINT with its tasks' status; it passes
			// SIGTERM on to them.
			s = syscall.SIGTERM
		}
		c.Process.Signal(s)
		sent[c.Process.Pid] = true
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	for _, pid := range proctree.Descendants(os.Getpid()) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == self && !sent[pid] {
			syscall.Kill(pid, sig.(syscall.Signal))
		}
	}
}

// end ends the launchers and everything below gpuprof run: SIGTERM to the
// launchers first (only they reach ranks on other hosts), then to every
// local descendant, SIGKILL after grace.
func (rp *rankProcs) end(grace time.Duration) {
	rp.mu.Lock()
	rp.ended = rp.ended || !rp.done() // one that exited by itself keeps its status
	rp.mu.Unlock()
	if !rp.done() {
		rp.signal(syscall.SIGTERM)
		select {
		case <-rp.exited:
		case <-time.After(grace / 2):
		}
	}
	below := proctree.Descendants(os.Getpid())
	proctree.Signal(below, syscall.SIGTERM)
	deadline := time.Now().Add(grace / 2)
	for len(proctree.Alive(below)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := proctree.Alive(proctree.Descendants(os.Getpid())); len(left) > 0 {
		slog.Warn("killing what is left of the job", "processes", len(left))
		proctree.Signal(left, syscall.SIGKILL)
	}
}

// endedByRun reports whether run had to end the launcher.
func (rp *rankProcs) endedByRun() bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.ended
}

// jobEnd is how the job ended.
type jobEnd struct {
	rp          *rankProcs
	board       *statusBoard
	ranks       int
	interrupted os.Signal
	final       time.Time // when the final profile came (the reducers' verdict)
	appTime     time.Duration
	exit        int
	stopped     chan struct{} // closed once nothing of the job runs
}

// wait waits (bounded by the ending under way) until no process of the job
// is left and returns the job's exit status: the application's as its
// launcher reports it, or as its collectors report it when run had to end
// the launcher; 128+n when the interruption by signal n ended it.
func (e *jobEnd) wait() int {
	<-e.stopped
	// Orphans that died on their own are reaped here.
	proctree.End(os.Getpid(), time.Second)
	code, known := e.board.exitCode(e.ranks) // the applications', from their collectors
	switch {
	case e.interrupted != nil:
		// Ended by the signal, as a shell reports it, unless every
		// application exited by itself (and said how).
		e.exit = 128 + signalNumber(e.interrupted)
		if !e.rp.endedByRun() && known {
			e.exit = code
		} else if !e.rp.endedByRun() && e.rp.code == 0 {
			e.exit = 0
		}
	case !e.rp.endedByRun():
		e.exit = e.rp.code // the launcher's own report
	default:
		// The launcher's status is of run's SIGTERM.
		e.exit = code
	}
	return e.exit
}

// abandonOnSignals follows the signals while the report is written: the
// first says what is going on, the next abandons the report, ending what
// is left of the job first.
func abandonOnSignals(sigs <-chan os.Signal, e *jobEnd) {
	warned := false
	for sig := range sigs {
		if !warned {
			warned = true
			slog.Warn(fmt.Sprintf("%s: the report of what was merged is being written; another signal abandons it", proctree.SignalName(sig)))
			continue
		}
		slog.Error(fmt.Sprintf("%s: the report is abandoned", proctree.SignalName(sig)))
		e.rp.end(0)
		os.Exit(128 + signalNumber(sig))
	}
}

// superviseJob follows the ranks, their collectors' heartbeats and the
// signals until the tree's final profile is there (done), and starts
// ending whatever still runs.
func superviseJob(ctx context.Context, cfg *jobConfig, conn *broker.Conn, rp *rankProcs, board *statusBoard, done <-chan treeResult, sigs <-chan os.Signal) (treeResult, *jobEnd) {
	e := &jobEnd{rp: rp, board: board, ranks: cfg.Ranks, stopped: make(chan struct{})}
	exited := rp.exited
	signalled := false
	endJob := func(code int, why string) {
		if signalled {
			return
		}
		signalled = true
		slog.Info(why+"; the collectors have the rank timeout to finish", "rank_timeout", cfg.RankWait)
		if err := reducer.SignalEnd(ctx, conn, cfg.Job, code); err != nil {
			slog.Warn("signalling the end of the application", "err", err)
		}
	}
	var firstEnd, stopTimer <-chan time.Time
	var res treeResult
loop:
	for {
		select {
		case res = <-done:
			break loop
		case <-exited:
			exited = nil
			e.appTime = rp.appTime
			endJob(rp.code, fmt.Sprintf("the launcher exited with status %d", rp.code))
			if !cfg.RanksElsewhere {
				// Its collectors exited with it: what they sent is in the
				// stream (the reducers drain it first), nothing more comes.
				if err := reducer.SignalEndWithin(ctx, conn, cfg.Job, rp.code, launcherGone); err != nil {
					slog.Warn("signalling the end of the application", "err", err)
				}
			}
		case <-board.changed:
			all, first := board.appsEnded(cfg.Ranks)
			switch {
			case all:
				code, _ := board.exitCode(cfg.Ranks)
				if e.appTime == 0 {
					e.appTime = time.Since(rp.started)
				}
				endJob(code, "every rank's application ended")
			case !first.IsZero() && firstEnd == nil && !signalled:
				// Ranks that never say so must not hold the job for ever.
				firstEnd = time.After(time.Until(first.Add(cfg.RankWait)))
			}
		case <-firstEnd:
			code, _ := board.exitCode(cfg.Ranks)
			endJob(code, "some ranks' applications did not end within the rank timeout of the first")
		case sig := <-sigs:
			code := 128 + signalNumber(sig)
			if e.interrupted == nil {
				e.interrupted = sig
				slog.Warn(fmt.Sprintf("interrupted by %s: passing it to the application; the report of what was merged follows within %v (a second one stops waiting)", proctree.SignalName(sig), cfg.StopWait))
				rp.signal(sig)
				if err := reducer.SignalEndWithin(ctx, conn, cfg.Job, code, cfg.StopWait); err != nil {
					slog.Warn("signalling the interruption", "err", err)
				}
				// The collectors cut their analysis at half the stop
				// timeout (collect --stop-timeout); a launcher still alive
				// at two thirds is ended, so that the collectors' last
				// items are in before the reducers seal what is missing.
				stopTimer = time.After(cfg.StopWait * 2 / 3)
				continue
			}
			slog.Warn(fmt.Sprintf("interrupted again by %s: ending the application now and writing the report", proctree.SignalName(sig)))
			// A second each for the collectors to publish their last.
			go rp.end(time.Second)
			if err := reducer.SignalEndWithin(ctx, conn, cfg.Job, code, 2*time.Second); err != nil {
				slog.Warn("signalling the interruption", "err", err)
			}
		case <-stopTimer:
			stopTimer = nil
			if !rp.done() {
				slog.Warn(fmt.Sprintf("the application did not end within %v of the interruption: ending it", cfg.StopWait*2/3))
				go rp.end(cfg.StopWait / 6)
			}
		}
	}
	e.final = time.Now()
	if e.appTime == 0 {
		e.appTime = time.Since(rp.started)
	}
	if res.err == nil {
		waitCommands(cfg, rp, board, sigs, e)
	}
	board.freeze() // the reasons for incomplete ranks are as of now
	// What still runs is cut: collectors past the rank timeout, or a
	// launcher that outlived its ranks. A launcher about to exit by
	// itself (every rank done) gets a moment to report its status.
	go func() {
		defer close(e.stopped)
		if rp.done() {
			return // it exited by itself: its status stands
		}
		var grace time.Duration
		if res.p != nil && len(res.p.IncompleteRanks()) == 0 {
			grace = 5 * time.Second
		}
		select {
		case <-rp.exited:
		case <-time.After(grace):
			slog.Info("ending the launcher: the final profile is written without what its collectors still do")
			rp.end(time.Second)
			<-rp.exited
		}
	}()
	return res, e
}

// waitCommands waits, once the tree's final profile is there, for what
// the tree did not wait for: a collector's command that still runs (its
// ranks done, it may start more: a program's next CUDA process) and ranks
// beyond the plan (more CUDA processes than the launcher said, merged
// after the tree) whose collectors are still at work. The wait ends when
// nothing is left (done, failed, silent or gone), when the launcher
// exits, or at the bounds of the planned ranks: once a command exited,
// twice the rank timeout after it (the rank timeout for the others to
// end, one more for their collectors); after an interruption, two thirds
// of the stop timeout; a second one ends the job at once. Without any
// command's end a running command is waited for, as any application.
func waitCommands(cfg *jobConfig, rp *rankProcs, board *statusBoard, sigs <-chan os.Signal, e *jobEnd) {
	if e.interrupted != nil || rp.done() || !board.atWork(cfg.Ranks, time.Now()) {
		return
	}
	slog.Info("the tree's ranks are done; waiting for the commands that still run and the ranks beyond the expected count (--ranks sets the count)")
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	var stopTimer <-chan time.Time
	for {
		select {
		case <-rp.exited:
			e.appTime = rp.appTime
			return
		case <-board.changed:
		case <-tick.C:
		case <-stopTimer:
			return
		case sig := <-sigs:
			if e.interrupted == nil {
				e.interrupted = sig
				slog.Warn(fmt.Sprintf("interrupted by %s: passing it to the application; the report follows within %v (a second one stops waiting)", proctree.SignalName(sig), cfg.StopWait))
				rp.signal(sig)
				stopTimer = time.After(cfg.StopWait * 2 / 3)
				continue
			}
			slog.Warn(fmt.Sprintf("interrupted again by %s: ending the application now and writing the report", proctree.SignalName(sig)))
			go rp.end(time.Second)
			return
		}
		now := time.Now()
		if first := board.firstAppEnd(); !first.IsZero() && now.After(first.Add(2*cfg.RankWait)) {
			slog.Warn("commands or ranks beyond the expected count still at work twice the rank timeout after the first application's end: not waited for")
			return
		}
		if !board.atWork(cfg.Ranks, now) {
			return
		}
	}
}
