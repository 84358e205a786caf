package collector

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpuprof/collector/launcher"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// spawnApp is a stand-in for a launcher such as torchrun: it starts
// GPUPROF_TEST_SPAWN children (this binary again, each a stand-in CUDA
// process: fakeApp), child i with the environment GPUPROF_TEST_ENV_i
// ("K=V,K=V") and connecting i × GPUPROF_TEST_STAGGER_MS after the
// first, passes SIGINT and SIGTERM on to them, waits for them and exits 0.
func spawnApp() int {
	n, _ := strconv.Atoi(os.Getenv("GPUPROF_TEST_SPAWN"))
	stagger, _ := strconv.Atoi(os.Getenv("GPUPROF_TEST_STAGGER_MS"))
	exe, err := os.Executable()
	if err != nil {
		return 97
	}
	var mu sync.Mutex
	var procs []*os.Process
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			mu.Lock()
			for _, p := range procs {
				p.Signal(s)
			}
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "GPUPROF_TEST_SPAWN=", "GPUPROF_TEST_APP=1", fmt.Sprintf("GPUPROF_TEST_CHILD=%d", i))
		for _, kv := range strings.Split(os.Getenv(fmt.Sprintf("GPUPROF_TEST_ENV_%d", i)), ",") {
			if kv != "" {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		time.Sleep(time.Duration(stagger) * time.Millisecond)
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn:", err)
			return 96
		}
		mu.Lock()
		procs = append(procs, cmd.Process)
		mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); cmd.Wait() }()
	}
	wg.Wait()
	return 0
}

// idleApp is a process that initialises CUDA and ends without using the
// GPU (a launcher counting devices): HELLO, its host modules, END.
func idleApp(conn io.Writer, rank int, o synth.Options) int {
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, rank, o); err != nil {
		return 98
	}
	d := rawstream.NewDecoder(&buf)
	w := rawstream.NewWriter(conn)
	for {
		f, err := d.Next()
		if err != nil {
			return 91
		}
		if gpuWork(f) {
			break
		}
		w.Write(f)
	}
	w.Write(&rawstream.End{ExitCode: 0})
	return 0
}

// heldApp is a process still running when the job is interrupted: it
// writes its stream but its END and waits for SIGINT or SIGTERM, then
// exits as the signal's default action would be reported (128+n).
func heldApp(conn io.Writer, rank int, o synth.Options) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, rank, o); err != nil {
		return 98
	}
	d := rawstream.NewDecoder(&buf)
	w := rawstream.NewWriter(conn)
	for {
		f, err := d.Next()
		if err != nil {
			return 91
		}
		if _, end := f.(*rawstream.End); end {
			break
		}
		w.Write(f)
	}
	return 128 + int((<-sigs).(syscall.Signal))
}

// only returns the items of one rank, in publishing order.
func (it *items) only(r int32) *items {
	it.mu.Lock()
	defer it.mu.Unlock()
	out := &items{}
	for i, p := range it.got {
		if p.Items[r] != nil {
			out.got = append(out.got, p)
			out.done = append(out.done, it.done[i])
		}
	}
	return out
}

func (it *items) ranks() map[int32]bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	rs := map[int32]bool{}
	for _, p := range it.got {
		for r := range p.Items {
			rs[r] = true
		}
	}
	return rs
}

// spawnOptions runs spawnApp under the collector with n children, env[i]
// given to child i; the streams are recorded per rank under dir.
func spawnOptions(t *testing.T, pub Publisher, n int, env []string, dir string) Options {
	o := appOptions(t, pub)
	t.Setenv("GPUPROF_TEST_APP", "")
	t.Setenv("GPUPROF_TEST_SPAWN", strconv.Itoa(n))
	t.Setenv("GPUPROF_TEST_STAGGER_MS", "300") // the order of first CUDA use is the children's order
	for i := 0; i < n; i++ {
		v := ""
		if i < len(env) {
			v = env[i]
		}
		t.Setenv(fmt.Sprintf("GPUPROF_TEST_ENV_%d", i), v)
	}
	o.Stdin, o.Stdout = strings.NewReader(""), io.Discard
	o.Record = filepath.Join(dir, "rank{rank}.gpraw")
	return o
}

// runCollector runs a collection that must succeed.
func runCollector(t *testing.T, o Options) *Collector {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// helloRank is the rank field of a recorded stream's HELLO: the stand-in
// process writes its child index there.
func helloRank(t *testing.T, stream []byte) int32 {
	t.Helper()
	f, err := rawstream.NewDecoder(bytes.NewReader(stream)).Next()
	if err != nil {
		t.Fatal(err)
	}
	return f.(*rawstream.Hello).Rank
}

// checkRank checks that rank r published its own sequence, sealed, with
// the data of the stream recorded for it, written by child.
func checkRank(t *testing.T, pub *items, dir string, r int32, child int32) *profile.Profile {
	t.Helper()
	rec, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.gpraw", r)))
	if err != nil {
		t.Fatalf("rank %d: no recorded stream: %v", r, err)
	}
	if got := helloRank(t, rec); got != child {
		t.Errorf("rank %d is child %d's process, want child %d", r, got, child)
	}
	m := pub.only(r).merged(t, r)
	if ri := m.Ranks[r]; ri.Incomplete != "" || ri.Records == 0 || ri.ExitCode != 3 {
		t.Errorf("rank %d provenance %+v", r, ri)
	}
	sameData(t, direct(t, rec, r), m)
	return m
}

// Two CUDA processes under one command (a launcher giving each RANK and
// WORLD_SIZE) are two ranks, each with its own sequence of items and its
// own data; the launcher's RANK decides, not the order they connected.
func TestProcessesAreRanks(t *testing.T) {
	pub, dir := &items{}, t.TempDir()
	o := spawnOptions(t, pub, 2, []string{"RANK=1,WORLD_SIZE=2,LOCAL_RANK=1", "RANK=0,WORLD_SIZE=2,LOCAL_RANK=0"}, dir)
	o.Ranks = 2
	c := runCollector(t, o)
	if got := fmt.Sprint(c.Ranks()); got != "[0 1]" {
		t.Fatalf("ranks %s, want [0 1]", got)
	}
	if rs := pub.ranks(); len(rs) != 2 {
		t.Fatalf("items of ranks %v", rs)
	}
	a, b := checkRank(t, pub, dir, 1, 0), checkRank(t, pub, dir, 0, 1)
	if a.Ranks[1].Host == b.Ranks[0].Host && len(a.Nodes) == len(b.Nodes) && sameMetrics(a, b) {
		t.Error("the two ranks carry the same data")
	}
}

func sameMetrics(a, b *profile.Profile) bool {
	var sa, sb uint64
	for _, n := range a.Nodes {
		sa += n.Metrics.Get(profile.MemLoads)
	}
	for _, n := range b.Nodes {
		sb += n.Metrics.Get(profile.MemLoads)
	}
	return sa == sb
}

// Without a launcher rank, processes are numbered in order of first CUDA
// use: the expected ranks first, then ids past them, never two processes
// in one rank.
func TestOrderOfFirstUse(t *testing.T) {
	for _, expected := range []int{2, 1} {
		t.Run(fmt.Sprintf("expected%d", expected), func(t *testing.T) {
			pub, dir := &items{}, t.TempDir()
			o := spawnOptions(t, pub, 2, nil, dir)
			o.Ranks = expected
			c := runCollector(t, o)
			if got := fmt.Sprint(c.Ranks()); got != "[0 1]" {
				t.Fatalf("ranks %s, want [0 1]", got)
			}
			checkRank(t, pub, dir, 0, 0)
			checkRank(t, pub, dir, 1, 1)
		})
	}
}

// A process that only initialised CUDA (a parent counting devices before
// it starts its workers) takes no rank: order of first use is order of
// first GPU work.
func TestIdleProcessIsNoRank(t *testing.T) {
	pub, dir := &items{}, t.TempDir()
	o := spawnOptions(t, pub, 3, []string{"GPUPROF_TEST_IDLE=1"}, dir)
	o.Ranks = 2
	c := runCollector(t, o)
	if got := fmt.Sprint(c.Ranks()); got != "[0 1]" {
		t.Fatalf("ranks %s, want [0 1]", got)
	}
	checkRank(t, pub, dir, 0, 1)
	checkRank(t, pub, dir, 1, 2)
	if left, _ := filepath.Glob(filepath.Join(dir, "*pid*")); len(left) != 0 {
		t.Errorf("recordings left under a pid: %v", left)
	}
}

// A rank that no process claims is published by the job's only collector
// as a done item naming why, so the report names it at once rather than
// after the rank timeout; a second process claiming a rank already taken
// gets an id of its own past the expected ranks.
func TestNeverConnectedAndDuplicateRank(t *testing.T) {
	pub, dir := &items{}, t.TempDir()
	o := spawnOptions(t, pub, 2, []string{"RANK=0,WORLD_SIZE=3", "RANK=0,WORLD_SIZE=3"}, dir)
	o.Ranks = 3
	c := runCollector(t, o)
	if got := fmt.Sprint(c.Ranks()); got != "[0 1 2 3]" {
		t.Fatalf("ranks %s, want [0 1 2 3]: 0 and the duplicate's extra id 3, 1 and 2 never connected", got)
	}
	checkRank(t, pub, dir, 0, 0)
	checkRank(t, pub, dir, 3, 1)
	for _, r := range []int32{1, 2} {
		m := pub.only(r).merged(t, r)
		ri := m.Ranks[r]
		if !strings.Contains(ri.Incomplete, "never connected") || ri.Batches != 0 || ri.ExitCode != 0 {
			t.Errorf("rank %d: %+v", r, ri)
		}
	}
}

// The collector's own launcher rank (mpirun's, inherited by the process)
// names the process's rank when the process has none of its own.
func TestInheritedLauncherRank(t *testing.T) {
	pub, dir := &items{}, t.TempDir()
	t.Setenv("OMPI_COMM_WORLD_RANK", "5")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "8")
	o := spawnOptions(t, pub, 2, nil, dir)
	c := runCollector(t, o)
	// The second process is an extra rank in this collector's slot:
	// 8 + 0×8 + 5, which no other collector of the job hands out.
	if got := fmt.Sprint(c.Ranks()); got != "[5 13]" {
		t.Fatalf("ranks %s, want [5 13]", got)
	}
	checkRank(t, pub, dir, 5, 0)
	checkRank(t, pub, dir, 13, 1)
}

func TestPlacement(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		name string
		o    Options
		env  func(string) string
		want placement
		sole bool
	}{
		{"plain", Options{Rank: -1, Command: []string{"python", "mp.py"}}, env(), placement{base: 0, from: "default", world: 1, slot: 0, slots: 1}, true},
		{"torchrun", Options{Rank: -1, Command: []string{"torchrun", "--standalone", "--nproc_per_node", "2", "ddp.py"}}, env(),
			placement{base: 0, from: "default", world: 2, slot: 0, slots: 1, torch: true}, true},
		{"mpirun rank", Options{Rank: -1, Command: []string{"./app"}}, env("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4"),
			placement{base: 3, from: "OMPI_COMM_WORLD_RANK", world: 4, slot: 3, slots: 4}, false},
		{"srun torchrun", Options{Rank: -1, Command: []string{"torchrun", "--nnodes", "2", "--nproc-per-node", "4", "t.py"}},
			env("SLURM_PROCID", "1", "SLURM_NTASKS", "2"), placement{base: 1, from: "SLURM_PROCID", world: 8, slot: 1, slots: 2, torch: true}, false},
		{"given count", Options{Rank: -1, Ranks: 6, Command: []string{"python", "mp.py"}}, env(), placement{base: 0, from: "default", world: 6, slot: 0, slots: 1}, true},
	} {
		got, err := place(c.o, c.env)
		if err != nil || got != c.want || got.sole() != c.sole {
			t.Errorf("%s: %+v (sole %v), %v; want %+v", c.name, got, got.sole(), err, c.want)
		}
	}
	// The launcher's rank variables: a process's own, not inherited ones.
	proc := launcher.EnvOf([]byte("RANK=2\x00WORLD_SIZE=4\x00SLURM_PROCID=1\x00"))
	if r, ok, err := launcher.OwnRankOf(proc, env("SLURM_PROCID", "1")); !ok || err != nil || r.Rank != 2 || r.Var != "RANK" || r.Size != 4 {
		t.Errorf("own rank %+v %v %v", r, ok, err)
	}
	if _, ok, _ := launcher.OwnRankOf(launcher.EnvOf([]byte("PMI_RANK=3\x00")), env("PMI_RANK", "3")); ok {
		t.Error("an inherited PMI_RANK counted as the process's own")
	}
}

// A process whose environment cannot be read (it ended moments after
// connecting) is numbered in order of first use by the job's only
// collector, even under a torch launcher; one of several collectors gives
// it an id past the job's ranks in its own slot.
func TestAssignUnreadEnvironment(t *testing.T) {
	gone := 1 << 30 // no such process
	torch := []string{"torchrun", "--nproc-per-node", "2", "t.py"}
	c, err := New(Options{Job: "j", Rank: -1, Command: torch, Publisher: &items{}})
	if err != nil {
		t.Fatal(err)
	}
	as := func(pid int) *rankState { return c.assign(pid, c.readRank(pid, os.Getenv)) }
	if a, b := as(gone), as(0); a.rank != 0 || b.rank != 1 || as(gone).rank != 2 {
		t.Errorf("sole collector: ranks %d %d", a.rank, b.rank)
	}
	t.Setenv("SLURM_PROCID", "1")
	t.Setenv("SLURM_NTASKS", "2")
	c, err = New(Options{Job: "j", Rank: -1, Command: torch, Ranks: 8, Publisher: &items{}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := as(gone), as(gone); a.rank != 9 || b.rank != 11 {
		t.Errorf("one of two collectors: ranks %d %d, want 9 and 11", a.rank, b.rank)
	}
}

// A collector that cannot start the application still reports the ranks
// it owes, with the reason, so the reducers need not wait for them.
func TestFailedStartReportsRanks(t *testing.T) {
	pub := &items{}
	err := Collect(context.Background(), Options{Job: "j", Rank: -1, Ranks: 2, Publisher: pub, Command: []string{"true"}, InjectLib: "/nonexistent/lib.so"})
	if err == nil || !strings.Contains(err.Error(), "injection library") {
		t.Fatalf("error %v", err)
	}
	for _, r := range []int32{0, 1} {
		m := pub.only(r).merged(t, r)
		if !strings.Contains(m.Ranks[r].Incomplete, "injection library") {
			t.Errorf("rank %d: %+v", r, m.Ranks[r])
		}
	}
}
