// Command scale runs the reduction tree at simulated scale: N rank
// simulators and the tree's reducer nodes as separate processes against a
// real (embedded) JetStream broker, for several sizes and fan-ins, and
// prints per size the bytes on the wire, merge throughput, peak memory per
// reducer process and the tail latency from the last done item to the final
// profile. A flat merge (one node for all ranks) can be run beside the tree
// for comparison. Results accumulate in OUT/results.{json,md,tsv} across
// invocations, so each size can be its own command.
//
// One command per size (realistic shape; times and memory for a 16-core,
// 128 GiB host are in docs/scale.md):
//
//	scripts/bench/scale/run.sh -sizes 64 -fanin 8,16 -flat 64 -o scale-out
//	scripts/bench/scale/run.sh -sizes 256 -fanin 8,16 -flat 256 -o scale-out
//	scripts/bench/scale/run.sh -sizes 1024 -fanin 8,16 -flat 0 -o scale-out
//	GOGC=50 scripts/bench/scale/run.sh -sizes 4096 -fanin 16 -flat 0 -variants 64 -o scale-out
//
// Ranks publish in two phases, as ranks of a real job do: their data
// batches first (the tree merges them while the ranks "run"), then, once
// the leaves have merged them, their done items; the tail is measured from
// the last done item stored to the final profile stored. Each simulator
// process generates one template rank and derives its ranks from it (see
// gen.go). The same binary plays the roles it spawns (-role ranks, -role
// reduce).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/publish"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
	"gpuprof/reducer"

	"github.com/nats-io/nats.go/jetstream"
)

var shapes = map[string]proftest.Shape{
	"realistic": proftest.Realistic,
	"medium":    {Kernels: 12, HostDepth: 5, Lines: 30, InstPer: 6, Pairs: 800, Objects: 60, RankUnique: 5, Sketches: true},
	"small":     proftest.Small,
}

// shapeOf is the named shape with RankUnique overridden (unique >= 0).
func shapeOf(name string, unique int) (proftest.Shape, error) {
	s, ok := shapes[name]
	if !ok {
		return s, fmt.Errorf("unknown shape %q (realistic, medium, small)", name)
	}
	if unique >= 0 {
		s.RankUnique = unique
	}
	return s, nil
}

func main() {
	role := flag.String("role", "driver", "driver, ranks or reduce (the last two are spawned by the driver)")
	sizes := flag.String("sizes", "64,256", "rank counts")
	fanins := flag.String("fanin", "8,16", "fan-ins")
	flat := flag.String("flat", "64", "rank counts to also merge flat (one node), for comparison; 0: none")
	shape := flag.String("shape", "realistic", "rank profile shape: realistic (~22k contexts, ~100k pairs per rank), medium, small")
	unique := flag.Int("unique", -1, "percent of kernels launched from rank-specific host paths (default: the shape's; realistic: 5)")
	variants := flag.Int("variants", 0, "0: rank-specific paths are each rank's own; V: ranks share them by class (rank mod V)")
	rankProcs := flag.Int("rankprocs", runtime.NumCPU(), "rank simulator processes")
	leafProcs := flag.Int("leafprocs", max(runtime.NumCPU()/2, 1), "processes sharing the leaves (inner nodes get one process each)")
	out := flag.String("o", "scale-out", "output directory (broker storage, results)")
	// Roles.
	url := flag.String("url", "", "broker URL (roles)")
	job := flag.String("job", "", "job (roles)")
	from := flag.Int("from", 0, "first rank (ranks role)")
	to := flag.Int("to", 0, "last rank + 1 (ranks role)")
	phase := flag.String("phase", "data", "data or done (ranks role)")
	ranks := flag.Int("ranks", 0, "ranks in the job (reduce role)")
	fanin := flag.Int("k", 8, "fan-in (reduce role)")
	nodes := flag.String("nodes", "", "nodes to run, L.N,... (reduce role)")
	flag.Parse()
	var err error
	switch *role {
	case "ranks":
		err = runRanks(*url, *job, *shape, *unique, *variants, *from, *to, *phase)
	case "reduce":
		// SCALE_CPUPROFILE=DIR: each reducer process writes a CPU profile
		// there, named after its first node (where its time goes).
		if dir := os.Getenv("SCALE_CPUPROFILE"); dir != "" {
			f, ferr := os.Create(filepath.Join(dir, "cpu-"+strings.Split(*nodes, ",")[0]+".prof"))
			if ferr == nil {
				if pprof.StartCPUProfile(f) == nil {
					defer pprof.StopCPUProfile()
				}
			}
		}
		err = runReduce(*url, *job, *ranks, *fanin, *nodes)
	case "driver":
		err = drive(config{sizes: *sizes, fanins: *fanins, flat: *flat, shape: *shape, unique: *unique, variants: *variants,
			rankProcs: *rankProcs, leafProcs: *leafProcs, out: *out})
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// rankReport is what a rank simulator process prints.
type rankReport struct {
	Ranks   int
	Items   uint64
	Chunks  uint64
	Bytes   uint64
	RawB    uint64
	GenS    float64
	PubS    float64
	Retries uint64
}

func runRanks(url, job, shape string, unique, variants, from, to int, phase string) error {
	s, err := shapeOf(shape, unique)
	if err != nil {
		return err
	}
	c, err := broker.Connect(broker.Options{URLs: []string{url}, Name: fmt.Sprintf("ranks %d-%d", from, to-1)})
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := publish.New(c, publish.Config{Job: job})
	if err != nil {
		return err
	}
	ctx := context.Background()
	var rep rankReport
	t0 := time.Now()
	var g *rankGen
	if phase == "data" {
		g = newRankGen(job, s, variants)
	}
	rep.GenS += time.Since(t0).Seconds()
	for r := from; r < to; r++ {
		t0 := time.Now()
		var it *profile.Profile
		done := phase == "done"
		if done {
			it = proftest.Item(job, 1, s, int32(r), 1, true, 1)
		} else {
			it = g.item(int32(r))
		}
		chunks, err := profile.EncodeBatch(it, done, c.ChunkPayload())
		if err != nil {
			return err
		}
		h, err := profile.ParseHeader(chunks[0])
		if err != nil {
			return err
		}
		rep.RawB += uint64(h.RawLen)
		t1 := time.Now()
		rep.GenS += t1.Sub(t0).Seconds()
		if err := p.PublishChunks(ctx, chunks); err != nil {
			return err
		}
		rep.PubS += time.Since(t1).Seconds()
		rep.Ranks++
	}
	t1 := time.Now()
	if err := p.Close(ctx); err != nil {
		return err
	}
	rep.PubS += time.Since(t1).Seconds()
	st := p.Stats()
	rep.Items, rep.Chunks, rep.Bytes, rep.Retries = st.Items, st.Chunks, st.Bytes, st.Retries
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// nodeReport is what a reducer process prints per node.
type nodeReport struct {
	Node                                  string
	Level                                 int
	WallS, MergeS, DecodeS, EncodeS, PubS float64
	ItemsMerged, BytesIn, BytesOut        uint64
	Partials                              uint64
	LastDoneNs, FinishNs                  int64
	Incomplete                            int
	FinalRawMB                            float64 // root: the final profile's canonical encoding
}

func runReduce(url, job string, ranks, k int, list string) error {
	tree, err := reducer.PlanN(ranks, k)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		reps []nodeReport
		errs []error
	)
	for _, name := range strings.Split(list, ",") {
		nn, err := reducer.ParseNodeName(name)
		if err != nil {
			return err
		}
		// A connection per node: nodes sharing one share the server's
		// per-client pending limit, which many leaves fetching at once
		// can pass (the server then cuts the connection).
		c, err := broker.Connect(broker.Options{URLs: []string{url}, Name: "reduce " + name})
		if err != nil {
			return err
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := reducer.RunNode(context.Background(), reducer.Config{Job: job, Conn: c, Tree: tree, Node: nn, Logger: log,
				RankTimeout: 10 * time.Minute, ChildGrace: time.Minute})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			s := res.Stats
			rep := nodeReport{Node: nn.String(), Level: nn.Level, WallS: s.Finish.Sub(s.Start).Seconds(), MergeS: s.MergeTime.Seconds(),
				DecodeS: s.DecodeTime.Seconds(), EncodeS: s.EncodeTime.Seconds(), PubS: s.PublishTime.Seconds(),
				ItemsMerged: s.ItemsMerged, BytesIn: s.BytesIn, BytesOut: s.BytesOut, Partials: s.PartialsOut,
				FinishNs: s.Finish.UnixNano(), Incomplete: len(s.Incomplete)}
			if !s.LastDone.IsZero() {
				rep.LastDoneNs = s.LastDone.UnixNano()
			}
			if res.Profile != nil {
				rep.Incomplete = len(res.Profile.IncompleteRanks())
				rep.FinalRawMB = float64(len(res.Profile.Encode())) / (1 << 20)
			}
			mu.Lock()
			reps = append(reps, rep)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return json.NewEncoder(os.Stdout).Encode(reps)
}

// proc is a spawned role process.
type proc struct {
	cmd  *exec.Cmd
	out  strings.Builder
	desc string
}

func spawn(desc string, args ...string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: exec.Command(self, args...), desc: desc}
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = os.Stderr
	return p, p.cmd.Start()
}

func (p *proc) wait() (rss float64, cpu float64, err error) {
	err = p.cmd.Wait()
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = float64(ru.Maxrss) / 1024 // KiB -> MiB
	}
	cpu = (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
	if err != nil {
		err = fmt.Errorf("%s: %w", p.desc, err)
	}
	return rss, cpu, err
}

// result is one row of the output.
type result struct {
	Ranks, FanIn, Levels, Nodes int
	Shape                       string
	Cores                       int
	WireMB, RawMB               float64
	GenS                        float64 // rank simulators: generating and encoding (not the tree's work)
	DataWallS                   float64 // from the first data batch to the leaves having merged them all
	TailS                       float64 // last done item stored -> final stored
	WallS                       float64 // the whole run, processes started to final
	ReduceCPUS                  float64 // CPU seconds of every reducer process
	MBps, RawMBps, ProfPerS     float64 // per core: over reducer CPU seconds
	LeafRSSMB                   float64 // largest leaf process (it runs several leaves)
	LeavesPerProc               int
	InnerRSSMB                  []float64 // per level above the leaves: largest process (one node each)
	MaxNodeWorkS                []float64 // per level: largest node's merge+decode+encode seconds
	FinishAfterDoneS            []float64 // per level: latest node finish after the last done item
	PartialMB                   []float64 // per level: largest node's mean partial, compressed MB (bytes out / partials)
	FinalRawMB                  float64
	Incomplete                  int
	NodeReports                 []nodeReport // every node's own figures (JSON only)
}

type config struct {
	sizes, fanins, flat, shape string
	unique, variants           int
	rankProcs, leafProcs       int
	out                        string
}

func drive(cfg config) error {
	s, err := shapeOf(cfg.shape, cfg.unique)
	if err != nil {
		return err
	}
	shapeName := fmt.Sprintf("%s (unique %d%%", cfg.shape, s.RankUnique)
	if cfg.variants > 0 {
		shapeName += fmt.Sprintf(", %d classes", cfg.variants)
	}
	shapeName += ")"
	sizes, err := ints(cfg.sizes)
	if err != nil {
		return err
	}
	fanins, err := ints(cfg.fanins)
	if err != nil {
		return err
	}
	flats, err := ints(cfg.flat)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.out, 0o700); err != nil {
		return err
	}
	// Broker storage is per invocation; results accumulate.
	dir := filepath.Join(cfg.out, "broker")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	e, err := broker.StartEmbeddedWith(broker.EmbeddedOptions{Dir: dir, MaxPayload: 8 << 20})
	if err != nil {
		return err
	}
	defer e.Shutdown()
	c, err := broker.Connect(e.Options("scale driver"))
	if err != nil {
		return err
	}
	defer c.Close()
	var results []result
	if b, err := os.ReadFile(filepath.Join(cfg.out, "results.json")); err == nil {
		if err := json.Unmarshal(b, &results); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(cfg.out, "results.json"), err)
		}
	}
	type run struct{ n, k int }
	var runs []run
	for _, n := range sizes {
		for _, k := range fanins {
			runs = append(runs, run{n, k})
		}
	}
	for _, n := range flats {
		runs = append(runs, run{n, max(n, 2)})
	}
	for _, r := range runs {
		fmt.Fprintf(os.Stderr, "scale: %d ranks, fan-in %d, shape %s\n", r.n, r.k, shapeName)
		res, err := one(e, c, r.n, r.k, cfg)
		if err != nil {
			return fmt.Errorf("%d ranks, fan-in %d: %w", r.n, r.k, err)
		}
		res.Shape = shapeName
		results = append(results, *res)
		if err := save(cfg.out, results); err != nil {
			return err
		}
		fmt.Println(row(res))
	}
	fmt.Println()
	fmt.Println(header())
	for i := range results {
		fmt.Println(row(&results[i]))
	}
	return nil
}

// save writes every result so far as JSON, a markdown table and TSV.
func save(out string, results []result) error {
	b, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "results.json"), b, 0o600); err != nil {
		return err
	}
	var md, tsv strings.Builder
	md.WriteString(header() + "\n")
	tsv.WriteString(strings.Join(columns, "\t") + "\n")
	for i := range results {
		r := row(&results[i])
		md.WriteString(r + "\n")
		cells := strings.Split(strings.Trim(r, "| "), " | ")
		tsv.WriteString(strings.Join(cells, "\t") + "\n")
	}
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(md.String()), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "results.tsv"), []byte(tsv.String()), 0o600)
}

var columns = []string{"ranks", "fan-in", "levels", "cores", "shape", "wire MB", "raw MB", "final raw MB", "data phase s", "tail s", "wall s",
	"reducer CPU s", "MB/s/core", "raw MB/s/core", "profiles/s/core", "leaf proc RSS MB (leaves)", "inner RSS MB by level",
	"max node work s by level", "finish after last done s by level", "mean partial MB by level", "incomplete"}

func header() string {
	return "| " + strings.Join(columns, " | ") + " |\n|" + strings.Repeat("---|", len(columns))
}

func row(r *result) string {
	f := func(v []float64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprintf("%.1f", x)
		}
		return strings.Join(s, " / ")
	}
	k := strconv.Itoa(r.FanIn)
	if r.FanIn >= r.Ranks {
		k = "flat"
	}
	return fmt.Sprintf("| %d | %s | %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.2f | %.0f (%d) | %s | %s | %s | %s | %d |",
		r.Ranks, k, r.Levels, r.Cores, r.Shape, r.WireMB, r.RawMB, r.FinalRawMB, r.DataWallS, r.TailS, r.WallS, r.ReduceCPUS, r.MBps, r.RawMBps, r.ProfPerS,
		r.LeafRSSMB, r.LeavesPerProc, f(r.InnerRSSMB), f(r.MaxNodeWorkS), f(r.FinishAfterDoneS), f(r.PartialMB), r.Incomplete)
}

// scaleRun is one run of the table: n ranks, fan-in k.
type scaleRun struct {
	e      *broker.Embedded
	c      *broker.Conn
	n, k   int
	cfg    config
	job    string
	tree   *reducer.Tree
	reds   []rproc
	stream jetstream.Stream
	res    *result
}

// rproc is a reducer process and the tree level of its nodes.
type rproc struct {
	p     *proc
	level int
}

func one(e *broker.Embedded, c *broker.Conn, n, k int, cfg config) (*result, error) {
	ctx := context.Background()
	r := &scaleRun{e: e, c: c, n: n, k: k, cfg: cfg, job: fmt.Sprintf("scale-%d-k%d", n, k)}
	_ = c.DeleteJob(ctx, r.job)
	// Leaves purge what they merged, so the stream holds what is not yet
	// merged plus the partials; the bound only has to fit the disk.
	if _, err := c.EnsureStreamWith(ctx, r.job, broker.StreamOptions{MaxBytes: min(max(int64(n)*(4<<20), 2<<30), 24<<30)}); err != nil {
		return nil, err
	}
	defer c.DeleteJob(ctx, r.job)
	var err error
	if r.tree, err = reducer.PlanN(n, k); err != nil {
		return nil, err
	}
	r.res = &result{Ranks: n, FanIn: k, Levels: len(r.tree.Levels), Nodes: len(r.tree.Nodes()), Cores: runtime.NumCPU()}
	start := time.Now()
	if err := r.startReducers(ctx); err != nil {
		r.kill()
		return nil, err
	}
	t0 := time.Now()
	data, err := r.ranksPhase("data")
	if err != nil {
		r.kill()
		return nil, err
	}
	for _, rr := range data {
		r.res.WireMB += float64(rr.Bytes) / (1 << 20)
		r.res.RawMB += float64(rr.RawB) / (1 << 20)
		r.res.GenS += rr.GenS
	}
	r.waitLeavesMerged(ctx)
	r.res.DataWallS = time.Since(t0).Seconds()
	done, err := r.ranksPhase("done")
	if err != nil {
		r.kill()
		return nil, err
	}
	for _, rr := range done {
		r.res.WireMB += float64(rr.Bytes) / (1 << 20)
	}
	reps, inner, err := r.waitReducers()
	if err != nil {
		r.kill()
		return nil, err
	}
	r.res.WallS = time.Since(start).Seconds()
	r.summarize(reps, inner)
	return r.res, nil
}

func (r *scaleRun) kill() {
	for _, rp := range r.reds {
		_ = rp.p.cmd.Process.Kill()
	}
}

// startReducers spawns the reducers, leaves spread over leafProcs
// processes and every inner node in a process of its own (its memory is
// what grows with the tree), and waits for every node's consumer: the
// leaves' on the input stream, the inner nodes' on the tree stream.
func (r *scaleRun) startReducers(ctx context.Context) error {
	leaves := r.tree.Levels[0]
	lp := min(r.cfg.leafProcs, len(leaves))
	r.res.LeavesPerProc = (len(leaves) + lp - 1) / lp
	reduce := func(desc, nodes string, level int) error {
		p, err := spawn(desc, "-role", "reduce", "-url", r.e.URL, "-job", r.job, "-ranks", fmt.Sprint(r.n), "-k", fmt.Sprint(r.k), "-nodes", nodes)
		if err != nil {
			return err
		}
		r.reds = append(r.reds, rproc{p, level})
		return nil
	}
	for i := 0; i < lp; i++ {
		var names []string
		for j := i; j < len(leaves); j += lp {
			names = append(names, leaves[j].Name.String())
		}
		if err := reduce("leaves "+names[0], strings.Join(names, ","), 0); err != nil {
			return err
		}
	}
	for _, l := range r.tree.Levels[1:] {
		for _, nd := range l {
			if err := reduce("node "+nd.Name.String(), nd.Name.String(), nd.Name.Level); err != nil {
				return err
			}
		}
	}
	var err error
	if r.stream, err = r.c.Stream(ctx, r.job); err != nil {
		return err
	}
	treeStream, err := r.c.TreeStream(ctx, r.job)
	if err != nil {
		return err
	}
	for t0 := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		in, err1 := r.stream.Info(ctx)
		tr, err2 := treeStream.Info(ctx)
		if err1 == nil && err2 == nil && in.State.Consumers+tr.State.Consumers >= len(r.tree.Nodes()) {
			return nil
		}
		if time.Since(t0) > 2*time.Minute {
			return fmt.Errorf("the reducer nodes did not all start within 2 minutes")
		}
	}
}

// ranksPhase runs the ranks' processes through one phase (their data, or
// their done items) and gathers their reports.
func (r *scaleRun) ranksPhase(phase string) ([]rankReport, error) {
	rp := min(r.cfg.rankProcs, r.n)
	var ps []*proc
	for i := 0; i < rp; i++ {
		a, b := i*r.n/rp, (i+1)*r.n/rp
		p, err := spawn(fmt.Sprintf("ranks %d-%d", a, b-1), "-role", "ranks", "-url", r.e.URL, "-job", r.job, "-shape", r.cfg.shape,
			"-unique", fmt.Sprint(r.cfg.unique), "-variants", fmt.Sprint(r.cfg.variants), "-from", fmt.Sprint(a), "-to", fmt.Sprint(b), "-phase", phase)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	var reps []rankReport
	var first error
	for _, p := range ps {
		if _, _, err := p.wait(); err != nil && first == nil {
			first = err
		}
		var rr rankReport
		if err := json.Unmarshal([]byte(p.out.String()), &rr); err == nil {
			reps = append(reps, rr)
		}
	}
	return reps, first
}

// waitLeavesMerged: the leaves have merged the data once their consumers
// hold nothing pending or unacknowledged (acks follow durable partials).
func (r *scaleRun) waitLeavesMerged(ctx context.Context) {
	for _, l := range r.tree.Levels[0] {
		for {
			cons, err := r.stream.Consumer(ctx, l.Name.Consumer())
			if err == nil {
				if info, err := cons.Info(ctx); err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream > 0 {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// waitReducers waits for every reducer process and reads its nodes'
// reports; inner holds the largest RSS of each inner level's processes.
func (r *scaleRun) waitReducers() (reps []nodeReport, inner map[int]float64, err error) {
	inner = map[int]float64{}
	for _, rp := range r.reds {
		rss, cpu, err := rp.p.wait()
		if err != nil {
			return nil, nil, err
		}
		r.res.ReduceCPUS += cpu
		if rp.level == 0 {
			r.res.LeafRSSMB = max(r.res.LeafRSSMB, rss)
		} else {
			inner[rp.level] = max(inner[rp.level], rss)
		}
		var nr []nodeReport
		if err := json.Unmarshal([]byte(rp.p.out.String()), &nr); err != nil {
			return nil, nil, fmt.Errorf("%s: report: %w", rp.p.desc, err)
		}
		reps = append(reps, nr...)
	}
	return reps, inner, nil
}

// summarize fills the table's per-level and whole-run figures from the
// nodes' reports.
func (r *scaleRun) summarize(reps []nodeReport, inner map[int]float64) {
	res := r.res
	var lastDone, final int64
	for _, nr := range reps {
		lastDone = max(lastDone, nr.LastDoneNs)
	}
	levels := len(r.tree.Levels)
	res.MaxNodeWorkS = make([]float64, levels)
	res.FinishAfterDoneS = make([]float64, levels)
	res.PartialMB = make([]float64, levels)
	for _, nr := range reps {
		res.MaxNodeWorkS[nr.Level] = max(res.MaxNodeWorkS[nr.Level], nr.MergeS+nr.DecodeS+nr.EncodeS)
		res.FinishAfterDoneS[nr.Level] = max(res.FinishAfterDoneS[nr.Level], float64(nr.FinishNs-lastDone)/1e9)
		if nr.Partials > 0 {
			res.PartialMB[nr.Level] = max(res.PartialMB[nr.Level], float64(nr.BytesOut)/float64(nr.Partials)/(1<<20))
		}
		if nr.Node == r.tree.Root().Name.String() {
			final = nr.FinishNs
			res.Incomplete = nr.Incomplete
			res.FinalRawMB = nr.FinalRawMB
		}
	}
	res.TailS = float64(final-lastDone) / 1e9
	res.NodeReports = reps
	for l := 1; l < levels; l++ {
		res.InnerRSSMB = append(res.InnerRSSMB, inner[l])
	}
	res.MBps = res.WireMB / res.ReduceCPUS
	res.RawMBps = res.RawMB / res.ReduceCPUS
	res.ProfPerS = float64(r.n) / res.ReduceCPUS
}

func ints(s string) ([]int, error) {
	var out []int
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(s, ",", "\n")))
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		if t == "" || t == "0" {
			continue
		}
		v, err := strconv.Atoi(t)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive number", t)
		}
		out = append(out, v)
	}
	return out, nil
}
