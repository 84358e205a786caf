package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gpuprof/collector/online"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// items is an in-process publisher: it keeps every item, checks each
// against the batch codec (as the broker path would) and can be slowed.
type items struct {
	mu    sync.Mutex
	got   []*profile.Profile
	done  []bool
	delay time.Duration
	fail  error
}

func (it *items) Publish(ctx context.Context, p *profile.Profile, done bool) error {
	if it.delay > 0 {
		time.Sleep(it.delay)
	}
	if it.fail != nil {
		return it.fail
	}
	if err := p.Validate(); err != nil {
		return err
	}
	chunks, err := profile.EncodeBatch(p, done, 1<<20)
	if err != nil {
		return err
	}
	var a profile.Assembler
	var q *profile.Profile
	for _, c := range chunks {
		q, _, err = a.Add(c)
	}
	if err != nil {
		return err
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	it.got = append(it.got, q)
	it.done = append(it.done, done)
	return nil
}

// merged checks the sequence (0..n-1 data items, then the done item n)
// and returns the merge.
func (it *items) merged(t *testing.T, rank int32) *profile.Profile {
	t.Helper()
	it.mu.Lock()
	defer it.mu.Unlock()
	if len(it.got) == 0 || !it.done[len(it.done)-1] {
		t.Fatalf("%d items, the last not a done item", len(it.got))
	}
	m := profile.New("")
	for i, p := range it.got {
		if p.Items[rank] == nil || p.Items[rank].Minimum() != uint32(i) {
			t.Fatalf("item %d has items %v, want rank %d seq %d", i, p.Items, rank, i)
		}
		if it.done[i] != (i == len(it.got)-1) {
			t.Fatalf("item %d: done=%v", i, it.done[i])
		}
		if err := m.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Sealed(rank) || m.Ranks[rank].Batches != int64(len(it.got)-1) {
		t.Fatalf("rank %d not sealed: batches %d, items %d", rank, m.Ranks[rank].Batches, len(it.got))
	}
	return m
}

func writeSynth(t *testing.T, dir string, o synth.Options, rank int) (string, []byte) {
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, rank, o); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, synth.FileName(rank))
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, buf.Bytes()
}

// direct analyses a stream in one item, without the collector, for
// comparison.
func direct(t *testing.T, stream []byte, rank int32) *profile.Profile {
	a := online.New(online.Options{Job: "job", Rank: rank, Structures: &online.SASS{NVDisasm: "-"}})
	defer a.Close()
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	for {
		f, err := d.Next()
		if err != nil {
			break // the stream's own error is checked by the caller
		}
		if err := a.Add(f, d.Offset()); err != nil {
			t.Fatal(err)
		}
	}
	a.Final()
	p, err := a.Flush(0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sameData(t *testing.T, want, got *profile.Profile) {
	t.Helper()
	sum := func(p *profile.Profile) string {
		var b strings.Builder
		for _, m := range []profile.MetricID{profile.MemLoads, profile.MemStores, profile.RedTempLoad, profile.RedTempStore,
			profile.RedSpatLoad, profile.RedSpatStore, profile.GPULaunches, profile.GPUTime, profile.MemSectors} {
			var n uint64
			for _, nd := range p.Nodes {
				n += nd.Metrics.Get(m)
			}
			fmt.Fprintf(&b, "%s=%d ", m.Name(), n)
		}
		fmt.Fprintf(&b, "temporal=%d spatial=%d pcs=%d objects=%d", len(p.Temporal), len(p.Spatial), len(p.PCs), len(p.Objects))
		return b.String()
	}
	if w, g := sum(want), sum(got); w != g {
		t.Errorf("collected data differs from a direct analysis:\n got  %s\n want %s", g, w)
	}
	for k, v := range want.Temporal {
		if got.Temporal[k] != v {
			t.Errorf("temporal %+v: %d, want %d", k, got.Temporal[k], v)
			break
		}
	}
	for k, v := range want.Spatial {
		if got.Spatial[k] != v {
			t.Errorf("spatial %+v: %d, want %d", k, got.Spatial[k], v)
			break
		}
	}
}

func TestReplayBatches(t *testing.T) {
	dir := t.TempDir()
	path, stream := writeSynth(t, dir, synth.Options{Seed: 11, BlockSampling: 4, FrameRecords: 64}, 5)
	rec := filepath.Join(dir, "copy-{rank}.gpraw")
	pub := &items{}
	c, err := New(Options{Job: "job", Rank: 5, Replay: strings.Replace(path, "0005", "{rank:4}", 1), Publisher: pub, BatchRecords: 300, Record: rec,
		Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := pub.merged(t, 5)
	if len(pub.got) < 4 {
		t.Errorf("%d items: batching every 300 records should give several", len(pub.got))
	}
	ri := m.Ranks[5]
	if ri.Source != "synthetic" || ri.Incomplete != "" || ri.ExitCode != 0 || ri.Mode != "redundancy" || ri.BlockP != 4 {
		t.Errorf("provenance %+v", ri)
	}
	pr := c.Progress()
	if pr.Bytes != uint64(len(stream)) || pr.Items != uint64(len(pub.got)) || pr.Records != ri.Records || pr.Records == 0 {
		t.Errorf("progress %+v; stream %d bytes, %d items, %d records", pr, len(stream), len(pub.got), ri.Records)
	}
	sameData(t, direct(t, stream, 5), m)
	copied, err := os.ReadFile(filepath.Join(dir, "copy-5.gpraw"))
	if err != nil || !bytes.Equal(copied, stream) {
		t.Errorf("recorded copy: %d bytes, %v; want the %d bytes replayed", len(copied), err, len(stream))
	}
}

func TestReplayTruncatedAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	_, stream := writeSynth(t, dir, synth.Options{Seed: 12, BlockSampling: 4, FrameRecords: 64}, 2)
	// Offsets of the frames, to cut in the middle of one and corrupt another.
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	var offs []int64
	for {
		if _, err := d.Next(); err != nil {
			break
		}
		offs = append(offs, d.Offset())
	}
	mid := offs[len(offs)/2]
	cases := []struct {
		name  string
		bytes []byte
		off   int64
		want  string
	}{
		{"truncated", stream[:mid+20], mid, "stream ends"},
		{"corrupt", func() []byte {
			b := append([]byte{}, stream...)
			b[mid] = 77 // an unknown frame kind
			return b
		}(), mid, "unknown frame kind 77"},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			p := filepath.Join(dir, cs.name+".gpraw")
			os.WriteFile(p, cs.bytes, 0o644)
			pub := &items{}
			err := Collect(context.Background(), Options{Job: "job", Rank: 2, Replay: p, Publisher: pub, BatchRecords: 500,
				Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}})
			var se *StreamError
			if !errors.As(err, &se) || se.Rank != 2 || se.Offset < cs.off {
				t.Fatalf("error %v, want a StreamError of rank 2 at offset >= %d", err, cs.off)
			}
			if !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), cs.want) || !strings.Contains(err.Error(), "offset") {
				t.Errorf("error %q should name the rank, the offset and say %q", err, cs.want)
			}
			m := pub.merged(t, 2)
			if !strings.Contains(m.Ranks[2].Incomplete, "offset") {
				t.Errorf("done item's incomplete %q", m.Ranks[2].Incomplete)
			}
			// Everything before the bad frame was analysed and published.
			sameData(t, direct(t, cs.bytes[:mid], 2), m)
		})
	}
}

func TestExpandRank(t *testing.T) {
	for in, want := range map[string]string{"a/{rank}.raw": "a/7.raw", "r{rank:4}-{rank}": "r0007-7", "plain": "plain"} {
		if got := ExpandRank(in, 7); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestResolveRank(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		explicit int
		env      map[string]string
		want     int32
		from     string
		bad      bool
	}{
		{3, map[string]string{"OMPI_COMM_WORLD_RANK": "7"}, 3, "--rank", false},
		{-1, map[string]string{"OMPI_COMM_WORLD_RANK": "7", "PMIX_RANK": "8"}, 7, "OMPI_COMM_WORLD_RANK", false},
		{-1, map[string]string{"PMIX_RANK": "8", "PMI_RANK": "9"}, 8, "PMIX_RANK", false},
		{-1, map[string]string{"PMI_RANK": "9", "SLURM_PROCID": "10"}, 9, "PMI_RANK", false},
		{-1, map[string]string{"SLURM_PROCID": "10"}, 10, "SLURM_PROCID", false},
		{-1, map[string]string{"RANK": "6", "WORLD_SIZE": "8", "SLURM_PROCID": "1"}, 6, "RANK", false},
		{-1, map[string]string{"RANK": "6", "SLURM_PROCID": "1"}, 1, "SLURM_PROCID", false}, // RANK without WORLD_SIZE is not a launcher's
		{-1, map[string]string{}, 0, "default", false},
		{-1, map[string]string{"PMI_RANK": "x"}, 0, "PMI_RANK", true},
	} {
		r, from, err := ResolveRank(c.explicit, env(c.env))
		if (err != nil) != c.bad || r != c.want || from != c.from {
			t.Errorf("%d %v: rank %d from %s, %v", c.explicit, c.env, r, from, err)
		}
	}
}

// The application is this test binary run again: it connects to the
// collector's socket like the injection library does, writes a generated
// stream, echoes stdin to stdout and exits with a chosen status.
func TestMain(m *testing.M) {
	if os.Getenv("GPUPROF_TEST_SPAWN") != "" {
		os.Exit(spawnApp())
	}
	if os.Getenv("GPUPROF_TEST_APP") != "" {
		os.Exit(fakeApp())
	}
	os.Exit(m.Run())
}

func fakeApp() int {
	io.Copy(os.Stdout, os.Stdin)
	if want, ok := os.LookupEnv("GPUPROF_TEST_SASS_KERNEL"); ok && !sassKernelIs(want) {
		return 96
	}
	conn, err := net.Dial("unix", os.Getenv("GPUPROF_SOCKET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 99
	}
	if os.Getenv("GPUPROF_TEST_CHILD") != "" {
		// A CUDA process connects when CUDA starts and lives on: the
		// collector reads its launcher environment meanwhile.
		time.Sleep(200 * time.Millisecond)
	}
	var scale int
	fmt.Sscan(os.Getenv("GPUPROF_TEST_SCALE"), &scale)
	var child int // a spawned child's index: its own data
	fmt.Sscan(os.Getenv("GPUPROF_TEST_CHILD"), &child)
	o := synth.Options{Seed: 13 + uint64(child), BlockSampling: 4, FrameRecords: 64, ExitCode: 3, Scale: scale}
	if os.Getenv("GPUPROF_BLOCK_SAMPLING") != "" {
		fmt.Sscan(os.Getenv("GPUPROF_BLOCK_SAMPLING"), &o.BlockSampling)
	}
	var rank int
	fmt.Sscan(os.Getenv("GPUPROF_RANK"), &rank)
	if os.Getenv("GPUPROF_TEST_CHILD") != "" {
		rank = child // HELLO names the child, for the test to see who got which rank
	}
	if os.Getenv("GPUPROF_TEST_PERFMAP") != "" {
		return pythonApp(conn, rank, o)
	}
	if os.Getenv("GPUPROF_TEST_IDLE") != "" {
		return idleApp(conn, rank, o)
	}
	if os.Getenv("GPUPROF_TEST_HOLD") != "" {
		return heldApp(conn, rank, o)
	}
	if _, err := synth.WriteRank(conn, rank, o); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 98
	}
	conn.Close()
	return 3
}

func appOptions(t *testing.T, pub Publisher) Options {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(t.TempDir(), "libgpuprof_inject.so") // the stand-in application does not load it
	os.WriteFile(lib, nil, 0o644)
	t.Setenv("GPUPROF_TEST_APP", "1")
	return Options{Job: "job", Rank: -1, Command: []string{exe}, InjectLib: lib, Publisher: pub, BatchRecords: 400,
		BlockSampling: 5, Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}}
}

func TestRunApplication(t *testing.T) {
	pub := &items{}
	o := appOptions(t, pub)
	t.Setenv("PMI_RANK", "4")
	var out bytes.Buffer
	o.Stdin, o.Stdout = strings.NewReader("hello from stdin\n"), &out
	o.Record = filepath.Join(t.TempDir(), "rec.gpraw")
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(context.Background())
	if ExitCode(err) != 3 || c.ExitCode() != 3 {
		t.Fatalf("error %v (exit %d), want the application's status 3", err, ExitCode(err))
	}
	if out.String() != "hello from stdin\n" {
		t.Errorf("stdout %q", out.String())
	}
	m := pub.merged(t, 4)
	ri := m.Ranks[4]
	if ri.ExitCode != 3 || ri.Incomplete != "" || ri.BlockP != 5 || ri.Records == 0 {
		t.Errorf("provenance %+v", ri)
	}
	rec, err := os.ReadFile(o.Record)
	if err != nil {
		t.Fatal(err)
	}
	sameData(t, direct(t, rec, 4), m)
}

// A failing analysis must not stop the application: the stream is still
// read to its end (a writer blocked on a full socket would hang it), the
// application's status comes back and the done item says what happened.
func TestAnalysisFailureDoesNotStopApplication(t *testing.T) {
	pub := &items{}
	o := appOptions(t, pub)
	o.Rank = 1
	t.Setenv("GPUPROF_TEST_SCALE", "8") // several MB: more than the socket buffers hold
	o.Analysis.Structures = panicking{}
	o.Stdin = strings.NewReader("")
	o.Stdout = io.Discard
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the application hung: the collector stopped reading its stream")
	}
	if ExitCode(err) != 3 {
		t.Fatalf("error %v, want the application's status 3", err)
	}
	m := pub.merged(t, 1)
	if !strings.Contains(m.Ranks[1].Incomplete, "analysis stopped") {
		t.Errorf("incomplete %q", m.Ranks[1].Incomplete)
	}
	if c.Progress().Bytes < 4<<20 {
		t.Errorf("read %d bytes; the whole stream should have been drained", c.Progress().Bytes)
	}
}

// panicking is a structure source whose lookups fail, to exercise the
// collector's recovery from a bug in the analysis.
type panicking struct{}

func (panicking) Request(online.ModuleRef, string) *online.Pending {
	panic("structure lookup failed")
}

func TestNoStreamFromApplication(t *testing.T) {
	pub := &items{}
	o := appOptions(t, pub)
	o.Rank = 0
	o.Command = []string{"/bin/sh", "-c", "exit 0"}
	if err := Collect(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	m := pub.merged(t, 0)
	if !strings.Contains(m.Ranks[0].Incomplete, "no stream") || m.Ranks[0].ExitCode != 0 {
		t.Errorf("provenance %+v", m.Ranks[0])
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []Options{
		{Job: "j", Replay: "x"},
		{Job: "j", Publisher: &items{}},
		{Job: "j", Publisher: &items{}, Replay: "x", Command: []string{"y"}},
		{Job: "j", Publisher: &items{}, Replay: "x", Mode: "fast"},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	err := Collect(context.Background(), Options{Job: "j", Rank: 0, Publisher: &items{}, Command: []string{"true"}, InjectLib: "/nonexistent/lib.so"})
	if err == nil || !strings.Contains(err.Error(), "injection library") {
		t.Errorf("missing library: %v", err)
	}
}

func TestPublisherBackpressure(t *testing.T) {
	dir := t.TempDir()
	path, _ := writeSynth(t, dir, synth.Options{Seed: 14, BlockSampling: 4, FrameRecords: 64}, 0)
	pub := &items{delay: 20 * time.Millisecond}
	start := time.Now()
	if err := Collect(context.Background(), Options{Job: "job", Rank: 0, Replay: path, Publisher: pub, BatchRecords: 200,
		Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}}); err != nil {
		t.Fatal(err)
	}
	// A slow publisher slows the collector; nothing is skipped.
	if el := time.Since(start); el < time.Duration(len(pub.got))*20*time.Millisecond {
		t.Errorf("%d items in %v", len(pub.got), el)
	}
	pub.merged(t, 0)
	failing := &items{fail: errors.New("broker gone")}
	err := Collect(context.Background(), Options{Job: "job", Rank: 0, Replay: path, Publisher: failing, BatchRecords: 200,
		Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}})
	if err == nil || !strings.Contains(err.Error(), "broker gone") || !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("error %v", err)
	}
}

// A recording that fails (a full disk) stops the recording, not the
// analysis: every item is still published and the error is returned.
func TestRecordFailureKeepsAnalysing(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	dir := t.TempDir()
	path, stream := writeSynth(t, dir, synth.Options{Seed: 15, BlockSampling: 4, FrameRecords: 64}, 0)
	pub := &items{}
	err := Collect(context.Background(), Options{Job: "job", Rank: 0, Replay: path, Publisher: pub, BatchRecords: 500,
		Record: "/dev/full", Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}})
	if err == nil || !strings.Contains(err.Error(), "recording the stream") || ExitCode(err) != 1 {
		t.Fatalf("error %v", err)
	}
	m := pub.merged(t, 0)
	if m.Ranks[0].Incomplete != "" {
		t.Errorf("incomplete %q: the profile itself is complete", m.Ranks[0].Incomplete)
	}
	sameData(t, direct(t, stream, 0), m)
}
