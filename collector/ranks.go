package collector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"gpuprof/collector/launcher"
	"gpuprof/collector/online"
	"gpuprof/collector/proctree"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// One collector publishes one rank per CUDA process it measures: a
// launcher such as torchrun starts every rank of a node under one
// command, and two processes never share a rank (their process-local ids
// would clash, and the per-rank views would mix two GPUs). docs/launchers.md
// has the rules; this file applies them.

// placement is where a collector sits in its job: its own rank, the
// job's rank count and, for rank ids no launcher gave, its slot among the
// job's collectors, so that two collectors never hand out the same id.
type placement struct {
	base  int32  // the collector's own rank (--rank, its launcher's environment, else 0)
	from  string // where base came from: "--rank", a variable name, "default"
	world int    // ranks the job expects
	// slot of slots: this collector's index among the job's collectors
	// (the launcher's rank and size of the collector itself; 0 of 1 when
	// it is the job's only collector).
	slot, slots int
	// torch: the command is a torch launcher, whose workers carry their
	// own RANK; the collector's own rank names none of them.
	torch bool
}

// sole reports whether this collector is the only one of its job, so
// every expected rank is its to publish.
func (p placement) sole() bool { return p.slots == 1 && p.from == "default" }

func place(o Options, getenv func(string) string) (placement, error) {
	r, from, err := ResolveRank(o.Rank, getenv)
	if err != nil {
		return placement{}, err
	}
	p := placement{base: r, from: from, slot: 0, slots: 1}
	size := 0
	if own, ok, _ := launcher.RankOf(getenv); ok && from == own.Var {
		size = own.Size
	}
	var tw int
	if t, ok := launcher.ParseTorch(o.Command, getenv); ok {
		p.torch, tw = true, t.World
	}
	switch {
	case o.Ranks > 0:
		p.world = o.Ranks
	case tw > 0:
		p.world = tw
	case size > 0:
		p.world = size
	default:
		p.world = max(1, int(r)+1)
	}
	if from != "default" {
		p.slot = int(r)
		p.slots = max(size, p.slot+1)
	}
	return p, nil
}

// rankState is one rank this collector publishes: its item sequence and
// what its done item will say.
type rankState struct {
	c    *Collector
	rank int32
	pid  int    // 0 when not known (a replay)
	how  string // how the rank was found, for the log

	mu     sync.Mutex // publishing: sequence numbers and the done item's inputs
	seq    uint32
	hello  *rawstream.Hello
	end    int32
	issues []string
	done   bool
	// exitNoted: OnRank was told the rank's application exited.
	exitNoted bool
}

func (rs *rankState) logf(format string, args ...any) {
	if rs.c.o.Logf != nil {
		rs.c.o.Logf("rank %d: "+format, append([]any{rs.rank}, args...)...)
	}
}

func (rs *rankState) issue(s string) {
	rs.mu.Lock()
	rs.issues = append(rs.issues, s)
	rs.mu.Unlock()
}

// claim registers rank r as published by this collector. c.mu is held.
// A rank claimed after an interruption says so; one claimed after the
// application ended (a late stream, a rank that never connected) is
// told exited at once.
func (c *Collector) claim(r int32, pid int, how string) *rankState {
	rs := &rankState{c: c, rank: r, pid: pid, how: how, end: -1}
	c.ranks[r] = rs
	c.order = append(c.order, rs)
	if sig := c.Interrupted(); sig != nil {
		rs.issues = append(rs.issues, "interrupted by "+proctree.SignalName(sig))
	}
	if c.appEnded && c.exit >= 0 {
		rs.exitNoted = true
		c.note(r, RankExited, c.exit)
	} else {
		c.note(r, RankRunning, 0)
	}
	return rs
}

// exited tells OnRank, once, that rank rs's application exited.
func (rs *rankState) exited(code int) {
	rs.mu.Lock()
	first := !rs.exitNoted
	rs.exitNoted = true
	rs.mu.Unlock()
	if first {
		rs.c.note(rs.rank, RankExited, code)
	}
}

// procRank is what a connecting process's environment says of its rank,
// read when it connects (the process may be gone by its first launch).
type procRank struct {
	own    launcher.Rank
	ok     bool // own is the process's own launcher rank
	unread bool // the environment could not be read
}

// readRank reads the launcher rank of process pid (0: unknown): a
// variable it inherited from the collector's own launcher (the same value
// in getenv) is not its own.
func (c *Collector) readRank(pid int, getenv func(string) string) procRank {
	if pid <= 0 {
		return procRank{unread: true}
	}
	env, err := launcher.ProcessEnv(pid)
	var pr procRank
	if err == nil {
		pr.own, pr.ok, err = launcher.OwnRankOf(env, getenv)
	}
	if err != nil {
		// A process that ended moments after connecting: numbered in
		// order of use instead.
		c.logf("pid %d: launcher rank not read (%v): numbered in order of first CUDA use", pid, err)
		return procRank{unread: true}
	}
	return pr
}

// assign gives the process pid the rank it is measured as:
//  1. its own launcher variable (RANK with WORLD_SIZE, OMPI_COMM_WORLD_RANK,
//     PMIX_RANK, PMI_RANK, SLURM_PROCID; one it inherited from the
//     collector's launcher is not its own), claimed when it connects;
//  2. else, in order of first CUDA use (assign is then called at the
//     stream's first launch or allocation, so a process that only
//     initialised CUDA takes no rank): the job's only collector numbers
//     ranks 0, 1, ... up to the expected count; one of several collectors
//     takes its own rank;
//  3. else (a rank already taken, or beyond the expected count) an extra
//     id past the expected ranks, in this collector's slot.
func (c *Collector) assign(pid int, pr procRank) *rankState {
	c.mu.Lock()
	defer c.mu.Unlock()
	var why string
	if pr.ok {
		prev := c.ranks[pr.own.Rank]
		if prev == nil {
			return c.claim(pr.own.Rank, pid, fmt.Sprintf("%s=%d", pr.own.Var, pr.own.Rank))
		}
		why = fmt.Sprintf("%s=%d of pid %d is already pid %d's rank", pr.own.Var, pr.own.Rank, pid, prev.pid)
	} else {
		p := c.place
		switch {
		case p.torch && !(pr.unread && p.sole()):
			// A torch launcher's workers carry RANK; a process without one
			// is not a worker of its own. (The job's only collector numbers
			// a worker whose environment it could not read in order, as
			// torchrun starts them; one of several cannot know the ids.)
		case p.sole():
			for r := int32(0); int(r) < p.world; r++ {
				if c.ranks[r] == nil {
					return c.claim(r, pid, "order of first CUDA use")
				}
			}
		case c.ranks[p.base] == nil:
			return c.claim(p.base, pid, "the collector's rank ("+p.from+")")
		}
		why = fmt.Sprintf("pid %d has no rank of its own", pid)
	}
	for {
		r := int32(c.place.world + c.extras*c.place.slots + c.place.slot)
		c.extras++
		if c.ranks[r] == nil {
			// Complete data, so not marked incomplete: gpuprof run merges
			// it after the tree and names it (reducer.MergeUnplanned).
			return c.claim(r, pid, fmt.Sprintf("extra rank beyond the %d expected: %s", c.place.world, why))
		}
	}
}

// free reports whether no process has claimed rank r yet.
func (c *Collector) free(r int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ranks[r] == nil
}

// gpuWork reports whether a frame is the process using the GPU: a launch
// or an allocation (what a module load alone, or a CUDA initialisation to
// count devices, is not).
func gpuWork(f rawstream.Frame) bool {
	switch f.(type) {
	case *rawstream.Launch, *rawstream.Alloc:
		return true
	}
	return false
}

// exitCodeFor is the exit status a rank's done item carries: the one the
// stream's END recorded, else the application's when the stream was the
// application's own process (it died without END: wait for its status)
// or the rank never connected, else unknown.
func (c *Collector) exitCodeFor(rs *rankState) int32 {
	rs.mu.Lock()
	end, pid := rs.end, rs.pid
	rs.mu.Unlock()
	if end >= 0 || c.o.Replay != "" {
		return end
	}
	c.mu.Lock()
	app := c.appPID
	c.mu.Unlock()
	if app != 0 && (pid == app || pid == 0) {
		<-c.appExited
		c.mu.Lock()
		defer c.mu.Unlock()
		return int32(c.exit)
	}
	return -1
}

// publishDone sends rank rs's done item, once. An interrupted collector
// still sends it, within a bound, so the reducers know the rank's count
// of items.
func (rs *rankState) publishDone(ctx context.Context) error {
	exit := rs.c.exitCodeFor(rs)
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), doneTimeout)
		defer cancel()
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.done {
		return nil
	}
	rs.done = true
	done, err := online.DoneItem(rs.c.o.Job, rs.rank, rs.seq, rs.hello, exit, strings.Join(rs.issues, "; "))
	if err != nil {
		return err
	}
	if err := rs.c.o.Publisher.Publish(ctx, done, true); err != nil {
		return fmt.Errorf("rank %d: publishing the done item (%d items before it): %w", rs.rank, rs.seq, err)
	}
	rs.c.items.Add(1)
	rs.c.note(rs.rank, RankDone, int(exit))
	return nil
}

// publish sends one item with the rank's next sequence number. An
// analysis that fails while building the item sets *failed (the stream is
// then only drained) and is recorded for the done item; only a publishing
// error is returned.
func (rs *rankState) publish(ctx context.Context, a *online.Analyzer, source string, failed *bool) error {
	return rs.publishWith(ctx, a.Flush, source, failed)
}

// publishWith is publish with a flush of its own (Analyzer.FlushReady:
// what needs no waiting for structure).
func (rs *rankState) publishWith(ctx context.Context, flush func(uint32) (*profile.Profile, error), source string, failed *bool) error {
	if *failed {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	p, err := flush(rs.seq)
	if err != nil {
		*failed = true
		rs.issues = append(rs.issues, fmt.Sprintf("%s: analysis stopped: %s", source, firstLine(err)))
		rs.logf("%s: analysis stopped: %v", source, err)
		return nil
	}
	if p == nil {
		return nil
	}
	if err := rs.c.o.Publisher.Publish(ctx, p, false); err != nil {
		return fmt.Errorf("rank %d: publishing item %d: %w", rs.rank, rs.seq, err)
	}
	rs.seq++
	rs.c.items.Add(1)
	return nil
}

// missing publishes a done item for every rank this collector owes and
// no process claimed: the job's only collector owes every expected rank;
// one of several owes its own rank, unless it wraps a torch launcher
// (whose workers' ranks are their own). reason says why they are empty.
func (c *Collector) missing(ctx context.Context, reason string) error {
	c.mu.Lock()
	var states []*rankState
	for _, r := range c.owed() {
		rs := c.claim(r, 0, "never connected")
		rs.issues = append(rs.issues, reason)
		states = append(states, rs)
	}
	c.mu.Unlock()
	var errs []error
	for _, rs := range states {
		if err := rs.publishDone(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// owed lists the ranks this collector owes and no process claimed (yet):
// the job's only collector owes every expected rank; one of several owes
// its own rank, unless it wraps a torch launcher (whose workers' ranks
// are their own) or a process claimed a rank already. c.mu is held.
func (c *Collector) owed() []int32 {
	var owed []int32
	p := c.place
	switch {
	case p.sole():
		for r := int32(0); int(r) < p.world; r++ {
			if c.ranks[r] == nil {
				owed = append(owed, r)
			}
		}
	case !p.torch && len(c.ranks) == 0:
		owed = append(owed, p.base)
	}
	return owed
}

// Ranks lists the ranks this collector published (or is publishing),
// ascending.
func (c *Collector) Ranks() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := make([]int32, 0, len(c.ranks))
	for r := range c.ranks {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// recordPath is where stream i (1-based) of rank r is recorded: {rank} in
// the --record path is r; without it, the second and later streams get
// ".1", ".2", ... appended.
func recordPath(tmpl string, r int32, i int) string {
	if tmpl == "" {
		return ""
	}
	if rankPattern.MatchString(tmpl) {
		return ExpandRank(tmpl, r)
	}
	if i > 1 {
		return fmt.Sprintf("%s.%d", tmpl, i-1)
	}
	return tmpl
}

// perfMapOf is CPython's perf map of process pid (python -X perf,
// PYTHONPERFSUPPORT=1): always under /tmp, whatever TMPDIR says.
func perfMapOf(pid uint32) string {
	return fmt.Sprintf("/tmp/perf-%d.map", pid)
}
