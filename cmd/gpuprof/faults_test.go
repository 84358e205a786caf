package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/collector"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// Process-level faults: real gpuprof processes (run, collect, reduce), a
// real embedded broker, and real SIGKILLs. The in-process variants are in
// reducer/faults_test.go; docs/faults.md lists both.

// fakeLauncher is a stand-in for mpirun: "-np N" then the rank command. It
// starts N ranks (rank in OMPI_COMM_WORLD_RANK, as Open MPI sets it),
// writes each rank's pid, its own arguments and the broker's URL it got in
// its environment beside itself, waits for every rank and exits with the
// first non-zero status in rank order, as a launcher reports a failed
// rank. The files let a test find the broker and kill one rank's
// collector by pid.
const fakeLauncherScript = `#!/bin/sh
n=$2; shift 2
d=$(dirname "$0")
printf '%s\n' "$GPUPROF_NATS" > "$d/nats.tmp" && mv "$d/nats.tmp" "$d/nats"
printf '%s\n' "$@" > "$d/args.tmp" && mv "$d/args.tmp" "$d/args"
r=0; pids=
while [ "$r" -lt "$n" ]; do
	(OMPI_COMM_WORLD_RANK=$r; export OMPI_COMM_WORLD_RANK; exec "$@") &
	echo $! > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid.$r"
	pids="$pids $!"
	r=$((r + 1))
done
st=0
for p in $pids; do
	wait "$p"; s=$?
	[ "$st" -eq 0 ] && st=$s
done
echo "$st" > "$d/status"
exit "$st"
`

type fakeLauncher struct{ dir, path string }

func newFakeLauncher(t *testing.T) *fakeLauncher {
	t.Helper()
	dir := t.TempDir()
	l := &fakeLauncher{dir: dir, path: filepath.Join(dir, "mpirun")}
	if err := os.WriteFile(l.path, []byte(fakeLauncherScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return l
}

// file waits for the launcher to write name and returns its content.
func (l *fakeLauncher) file(t *testing.T, name string) string {
	t.Helper()
	var b []byte
	waitUntil(t, "the launcher's "+name, 60*time.Second, func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(l.dir, name))
		return err == nil
	})
	return strings.TrimSpace(string(b))
}

// brokerURL is the broker's URL gpuprof run gave the collectors (in their
// environment).
func (l *fakeLauncher) brokerURL(t *testing.T) string {
	t.Helper()
	return l.file(t, "nats")
}

// reducerKey is the reducer role's seed file of the job gpuprof run wrote
// into out (what gpuprof reduce processes use).
func reducerKey(out, job string) string {
	return filepath.Join(out, "broker", "auth", broker.SeedFileName(job, broker.RoleReducer))
}

func (l *fakeLauncher) pid(t *testing.T, rank int) int {
	t.Helper()
	pid, err := strconv.Atoi(l.file(t, fmt.Sprintf("pid.%d", rank)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// feeder holds a rank's recorded stream behind a named pipe, so the test
// decides when the collector replaying it gets the rest: the collector
// runs as it would on a live application, blocked until more records come.
type feeder struct {
	path             string
	more, stop, done chan struct{}
	err              error // the writer's, once done is closed
}

// feedFIFO replaces the stream file at path by a named pipe and writes the
// file's first cut bytes into it once a reader opens it.
func feedFIFO(t *testing.T, path string, cut int) *feeder {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cut <= 0 || cut >= len(data) {
		t.Fatalf("cut %d of a %d-byte stream", cut, len(data))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	f := &feeder{path: path, more: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			f.err = err
			return
		}
		if _, err = w.Write(data[:cut]); err == nil {
			select {
			case <-f.more:
				_, err = w.Write(data[cut:])
			case <-f.stop:
			}
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		f.err = err
	}()
	t.Cleanup(func() {
		select {
		case <-f.stop:
		default:
			close(f.stop)
		}
		// A writer still waiting for a reader (the collector never
		// started) is released by a reader that reads nothing.
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			r.Close()
		}
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
		}
	})
	return f
}

// rest writes the rest of the stream and closes the pipe (the collector
// sees the end of the stream).
func (f *feeder) rest(t *testing.T) {
	t.Helper()
	close(f.more)
	<-f.done
	if f.err != nil {
		t.Fatalf("feeding %s: %v", f.path, f.err)
	}
}

// itemsPublisher keeps the items a collector publishes, in order.
type itemsPublisher struct{ items []*profile.Profile }

func (p *itemsPublisher) Publish(_ context.Context, item *profile.Profile, _ bool) error {
	p.items = append(p.items, item)
	return nil
}

// rankItems collects one rank's stream in this process (no broker, no
// tree) and returns its items: what its collector process publishes with
// the same batch size.
func rankItems(t *testing.T, job string, file string, rank int, batchRecords uint64, sassDir string) []*profile.Profile {
	t.Helper()
	ip := &itemsPublisher{}
	err := collector.Collect(context.Background(), collector.Options{Job: job, Rank: rank, Replay: file, Publisher: ip,
		BatchRecords: batchRecords, BatchInterval: time.Hour, SASSFiles: []string{sassDir}})
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	return ip.items
}

func mergeItems(t *testing.T, p *profile.Profile, items []*profile.Profile) {
	t.Helper()
	for _, it := range items {
		if err := p.Merge(it); err != nil {
			t.Fatal(err)
		}
	}
}

// sameAsLocal checks a distributed profile against the in-process merge,
// byte for byte once the value sketches are compared within their error
// (checkSketches says why).
func sameAsLocal(t *testing.T, got, want *profile.Profile) {
	t.Helper()
	checkSketches(t, got, want)
	if g, w := got.Encode(), want.Encode(); !bytes.Equal(g, w) {
		t.Fatalf("distributed profile differs from the in-process merge (%d vs %d bytes, items %d vs %d, incomplete %v vs %v):\n--- distributed\n%s\n--- in-process\n%s",
			len(g), len(w), got.MergedItems(), want.MergedItems(), got.IncompleteRanks(), want.IncompleteRanks(), head(got.String(), 40), head(want.String(), 40))
	}
}

func subjectMsgs(t *testing.T, s jetstream.Stream, subj string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// waitItems waits until n items are stored whole (every chunk) on subj.
func waitItems(t *testing.T, s jetstream.Stream, subj string, n int, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	chunks := map[uint32]uint16{}
	whole := 0
	for whole < n {
		m, err := oc.Next(jetstream.FetchMaxWait(time.Second))
		if ctx.Err() != nil {
			t.Fatalf("%d items stored whole on %s, waited for %d", whole, subj, n)
		}
		if err != nil {
			continue
		}
		h, err := profile.ParseHeader(m.Data())
		if err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
		if chunks[h.Seq]++; chunks[h.Seq] == h.Chunks {
			whole++
		}
	}
}

// jobStream reaches job's input stream on url as a reducer: with the seed
// file nkey ("": a broker without credentials).
func jobStream(t *testing.T, url, job, nkey string) jetstream.Stream {
	t.Helper()
	c, err := broker.Connect(broker.Options{URLs: []string{url}, Name: "fault test", NKeySeedFile: nkey, InboxPrefix: broker.InboxPrefix(job, broker.RoleReducer)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var s jetstream.Stream
	waitUntil(t, "the job's stream", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err = c.Stream(ctx, job)
		return err == nil
	})
	return s
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// A rank's collector process is SIGKILLed mid-run, after its first batches
// are stored: the report names the rank incomplete (with the batches that
// were merged), every other rank is merged exactly as an in-process merge
// of its stream, the killed rank's stored batches are kept, and gpuprof
// run exits with the launcher's status (the killed rank's), not one of its
// own.
func TestCollectorKilledMidRun(t *testing.T) {
	bin := buildGpuprof(t)
	const job, ranks, victim, batch = "fkill", 4, 2, 128
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: ranks, Seed: 21, Iterations: 6})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	full := filepath.Join(streams, "victim.gpraw")
	b, err := os.ReadFile(files[victim])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, b, 0o600); err != nil {
		t.Fatal(err)
	}
	feedFIFO(t, files[victim], len(b)/2)
	l := newFakeLauncher(t)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", job, "--fan-in", "2", "--rank-timeout", "5s",
		"--batch-records", fmt.Sprint(batch), "--batch-interval", "1h", "--sass", sassDir,
		"--replay", filepath.Join(streams, "rank{rank:4}.gpraw"), "--", l.path, "-np", fmt.Sprint(ranks))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := jobStream(t, l.brokerURL(t), job, reducerKey(out, job))
	waitItems(t, s, broker.BatchSubject(job, victim), 2, 60*time.Second)
	if err := syscall.Kill(l.pid(t, victim), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	status, _ := strconv.Atoi(l.file(t, "status"))
	if status == 0 || exitCode(err) != status {
		t.Fatalf("gpuprof run exited %v, the launcher %d: want the launcher's non-zero status\nstdout:\n%s\nstderr:\n%s", err, status, stdout.String(), stderr.String())
	}

	got, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	kept := got.Items[victim]
	if kept == nil || kept.IsEmpty() {
		t.Fatalf("none of the killed rank's stored batches were merged\nstderr:\n%s", stderr.String())
	}
	// The reducer's reason, after what the collector's heartbeats and its
	// closed connection tell gpuprof run.
	sealed := fmt.Sprintf("rank timeout: no done item (%d batches merged)", kept.GetCardinality())
	reason := got.Ranks[victim].Incomplete
	if !slices.Equal(got.IncompleteRanks(), []int32{victim}) || !strings.HasPrefix(reason, "collector crashed or was killed on ") || !strings.HasSuffix(reason, ": "+sealed) {
		t.Fatalf("incomplete ranks %v (rank %d: %q), want only it (collector crashed or was killed ...: %s)", got.IncompleteRanks(), victim, reason, sealed)
	}
	// The reference: every other rank's stream collected and merged here,
	// plus the killed rank's items that the stream kept (its collector
	// cuts the same items from the same records), sealed as the reducer
	// seals it.
	want := profile.New(job)
	for r := range ranks {
		if r != victim {
			mergeItems(t, want, rankItems(t, job, files[r], r, batch, sassDir))
			continue
		}
		for _, it := range rankItems(t, job, full, r, batch, sassDir) {
			if kept.Contains(it.Items[victim].Minimum()) {
				mergeItems(t, want, []*profile.Profile{it})
			}
		}
	}
	want.SealRanks([]int32{victim}, func(int32) string { return reason })
	sameAsLocal(t, got, want)
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if line := fmt.Sprintf("rank %d (%s)", victim, reason); !strings.Contains(string(rep), line) {
		t.Errorf("report does not name %q:\n%s", line, head(string(rep), 12))
	}
	if line := fmt.Sprintf("rank=%d reason=%q", victim, sealed); !strings.Contains(stderr.String(), line) {
		t.Errorf("no log line %s:\n%s", line, stderr.String())
	}
	t.Logf("killed rank %d after %d of its batches were stored; %d items merged in all; exit status %d", victim, kept.GetCardinality(), got.MergedItems(), status)
}

// reduceProc is one 'gpuprof reduce' process.
type reduceProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

// Reducer processes (a leaf holding merged, durably published state and
// inputs not yet merged, and the root) are SIGKILLed mid-merge while the
// ranks go on, and started again: the final profile is byte-identical to
// the in-process merge of the same streams (what a clean run gives, see
// TestRunUnderMpirun), and the restarted leaf resumed from its partial.
func TestReducerProcessKilledAndRestarted(t *testing.T) {
	bin := buildGpuprof(t)
	const job, ranks, batch = "rkill", 8, 128
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: ranks, Seed: 22, Iterations: 6})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	// The reference first, while the streams are plain files.
	want := profile.New(job)
	for r, f := range files {
		mergeItems(t, want, rankItems(t, job, f, r, batch, sassDir))
	}
	// Leaf 0.0's ranks get half their streams until both nodes are dead:
	// the leaf cannot finish before it is killed.
	var feeders []*feeder
	for r := range 4 {
		st, err := os.Stat(files[r])
		if err != nil {
			t.Fatal(err)
		}
		feeders = append(feeders, feedFIFO(t, files[r], int(st.Size()/2)))
	}
	l := newFakeLauncher(t)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", job, "--external-reducers", "--fan-in", "4",
		"--batch-records", fmt.Sprint(batch), "--batch-interval", "1h", "--sass", sassDir,
		"--replay", filepath.Join(streams, "rank{rank:4}.gpraw"), "--", l.path, "-np", fmt.Sprint(ranks))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := l.brokerURL(t)
	var procs []*reduceProc
	start := func(node string) *reduceProc {
		p := &reduceProc{cmd: exec.Command(bin, "reduce", "--job", job, "--ranks", fmt.Sprint(ranks), "--fan-in", "4", "--node", node, "--nats", url, "--nkey", reducerKey(out, job))}
		p.cmd.Stderr = &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		return p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	kill := func(p *reduceProc) {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Wait(); err == nil {
			t.Fatal("a killed reducer exited cleanly: it had finished before the kill")
		}
	}
	leaf, other, root := start("0.0"), start("0.1"), start("1.0")
	s := jobStream(t, url, job, reducerKey(out, job))
	// A leaf acknowledges inputs only once a partial covering them is
	// stored: its ack floor moving says it holds durable state.
	waitUntil(t, "leaf 0.0 to acknowledge merged inputs", 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := s.Consumer(ctx, "node_0_0")
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.AckFloor.Stream > 0
	})
	kill(leaf)
	kill(root)
	// The ranks finish while the nodes are down; their batches and done
	// items wait in the stream.
	for _, f := range feeders {
		f.rest(t)
	}
	waitUntil(t, "the done items of leaf 0.0's ranks", 60*time.Second, func() bool {
		for r := range 4 {
			if subjectMsgs(t, s, broker.DoneSubject(job, int32(r))) == 0 {
				return false
			}
		}
		return true
	})
	leaf2, root2 := start("0.0"), start("1.0")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gpuprof run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, p := range []*reduceProc{leaf2, root2, other} {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("%v: %v\n%s", p.cmd.Args, err, p.stderr.String())
		}
	}
	if !strings.Contains(leaf2.stderr.String(), "resumed from own partial") {
		t.Errorf("the restarted leaf did not resume from its partial:\n%s", leaf2.stderr.String())
	}
	if t.Failed() {
		for _, p := range procs {
			t.Logf("%v:\n%s", p.cmd.Args[5:], p.stderr.String())
		}
		t.Logf("run:\n%s", stderr.String())
	}
	got, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.SealedRanks() != ranks || len(got.IncompleteRanks()) != 0 {
		t.Fatalf("%d ranks sealed, incomplete %v", got.SealedRanks(), got.IncompleteRanks())
	}
	sameAsLocal(t, got, want)
}

// The broker is restarted (same port, same file storage) while collector
// processes publish and a reducer process merges: every item is merged
// exactly once (the reducer's count equals the items published, and the
// final profile equals the in-process merge of the same streams).
func TestBrokerRestartUnderProcesses(t *testing.T) {
	bin := buildGpuprof(t)
	const job, ranks, batch = "brestart", 4, 128
	e, err := broker.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	url := e.Options("").URLs[0]
	c, err := broker.Connect(e.Options("fault test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.EnsureStream(ctx, job, 1)
	if err != nil {
		t.Fatal(err)
	}
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: ranks, Seed: 23, Iterations: 6})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	want := profile.New(job)
	var items uint64
	for r, f := range files {
		its := rankItems(t, job, f, r, batch, sassDir)
		items += uint64(len(its))
		mergeItems(t, want, its)
	}
	var feeders []*feeder
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		feeders = append(feeders, feedFIFO(t, f, int(st.Size()/2)))
	}
	out := filepath.Join(t.TempDir(), "out")
	var procs []*exec.Cmd
	var logs []*bytes.Buffer
	spawn := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		lb := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = lb, lb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs, logs = append(procs, cmd), append(logs, lb)
		return cmd
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	})
	spawn("reduce", "--job", job, "--ranks", fmt.Sprint(ranks), "--fan-in", "2", "--node", "all", "--nats", url, "-o", out)
	for r := range ranks {
		spawn("collect", "--job", job, "--rank", fmt.Sprint(r), "--nats", url, "--replay", files[r],
			"--batch-records", fmt.Sprint(batch), "--batch-interval", "1h", "--sass", sassDir)
	}
	for r := range ranks {
		waitItems(t, s, broker.BatchSubject(job, int32(r)), 1, 60*time.Second)
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, f := range feeders {
		f.rest(t)
	}
	for i, p := range procs {
		if err := p.Wait(); err != nil {
			t.Fatalf("%v: %v\n%s", p.Args[1:], err, logs[i].String())
		}
	}
	got, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs[0].String(), "reconnected; recreating the consumer") {
		t.Errorf("the reducer did not see the broker restart:\n%s", logs[0].String())
	}
	if line := fmt.Sprintf("items=%d ", items); !strings.Contains(logs[0].String(), line) {
		t.Errorf("the reducer did not merge each of the %d items once:\n%s", items, logs[0].String())
	}
	if got.SealedRanks() != ranks || len(got.IncompleteRanks()) != 0 {
		t.Fatalf("%d ranks sealed, incomplete %v", got.SealedRanks(), got.IncompleteRanks())
	}
	sameAsLocal(t, got, want)
}
