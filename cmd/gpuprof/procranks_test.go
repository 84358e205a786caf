package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gpuprof/collector"
	"gpuprof/profile"
)

// The application of the tests below is this test binary run again
// (GPUPROF_TEST_HELPER set): a stand-in launcher that starts
// GPUPROF_TEST_CHILDREN stand-in CUDA processes, child i with RANK=i and
// WORLD_SIZE when GPUPROF_TEST_RANKENV is set, i × GPUPROF_TEST_STAGGER_MS
// after the first; each connects to the collector's socket as the
// injection library does and writes the recorded H100 capture of MPI rank
// i (testdata/captures), its own data.
func TestMain(m *testing.M) {
	switch os.Getenv("GPUPROF_TEST_HELPER") {
	case "launcher":
		os.Exit(helperLauncher())
	case "rank":
		os.Exit(helperRank())
	case "passes":
		os.Exit(passesApp())
	}
	os.Exit(m.Run())
}

func helperLauncher() int {
	n, _ := strconv.Atoi(os.Getenv("GPUPROF_TEST_CHILDREN"))
	stagger, _ := strconv.Atoi(os.Getenv("GPUPROF_TEST_STAGGER_MS"))
	exe, err := os.Executable()
	if err != nil {
		return 97
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(stagger) * time.Millisecond)
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "GPUPROF_TEST_HELPER=rank", fmt.Sprintf("GPUPROF_TEST_CHILD=%d", i))
		if os.Getenv("GPUPROF_TEST_RANKENV") != "" {
			cmd.Env = append(cmd.Env, fmt.Sprintf("RANK=%d", i), fmt.Sprintf("LOCAL_RANK=%d", i), fmt.Sprintf("WORLD_SIZE=%d", n))
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "launcher:", err)
			return 96
		}
		wg.Add(1)
		go func() { defer wg.Done(); cmd.Wait() }()
	}
	wg.Wait()
	return 0
}

func helperRank() int {
	// What of the job's secrets this process inherited (none should
	// reach an application), for the test to check.
	if d := os.Getenv("GPUPROF_TEST_SECRETS"); d != "" {
		var got []string
		for _, v := range secretEnv {
			if os.Getenv(v) != "" {
				got = append(got, v)
			}
		}
		os.WriteFile(filepath.Join(d, "child"+os.Getenv("GPUPROF_TEST_CHILD")), []byte(strings.Join(got, " ")), 0o600)
	}
	f, err := os.Open(helperCapture(os.Getenv("GPUPROF_TEST_CAPTURES"), os.Getenv("GPUPROF_TEST_CHILD")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		return 95
	}
	defer f.Close()
	conn, err := net.Dial("unix", os.Getenv("GPUPROF_SOCKET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		return 94
	}
	defer conn.Close()
	// A CUDA process connects when CUDA starts and lives on: the
	// collector reads its launcher environment meanwhile.
	time.Sleep(200 * time.Millisecond)
	if _, err := io.Copy(conn, f); err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		return 93
	}
	return 0
}

func helperCapture(dir, child string) string {
	return filepath.Join(dir, "mpi_imbalance.pcsampling.rank"+child+".gpr")
}

// runHelperJob runs `gpuprof run` around the stand-in launcher, invoked
// by the name launcher (a link to this test binary), and returns the
// final profile, the report and run's output. It checks that no child
// inherited the broker's key or another secret of the job (the collector,
// which got them in its environment, takes them out before it starts the
// command; --no-values adds the value key).
func runHelperJob(t *testing.T, bin, launcher string, children int, rankEnv bool, args ...string) (*profile.Profile, string, string) {
	t.Helper()
	captures, _ := filepath.Abs("../../testdata/captures")
	sassDir, _ := filepath.Abs("../../testdata/sass/mpi_imbalance")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, launcher)
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libgpuprof_inject.so") // the stand-ins do not load it
	os.WriteFile(lib, nil, 0o644)
	os.WriteFile(filepath.Join(dir, "gpuprof_patch.fatbin"), nil, 0o644) // run checks that value tracing has its patches
	out := filepath.Join(dir, "out")
	secrets := filepath.Join(dir, "secrets")
	os.Mkdir(secrets, 0o700)
	cmd := exec.Command(bin, append([]string{"run", "-o", out, "--rank-timeout", "30s", "--sass", sassDir, "--no-values", "--"}, append([]string{link}, args...)...)...)
	cmd.Env = append(os.Environ(), "GPUPROF_TEST_HELPER=launcher", "GPUPROF_INJECT="+lib, "GPUPROF_TEST_CAPTURES="+captures,
		fmt.Sprintf("GPUPROF_TEST_CHILDREN=%d", children), "GPUPROF_TEST_STAGGER_MS=300", "GPUPROF_TEST_SECRETS="+secrets)
	if rankEnv {
		cmd.Env = append(cmd.Env, "GPUPROF_TEST_RANKENV=1")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuprof run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for i := 0; i < children; i++ {
		got, err := os.ReadFile(filepath.Join(secrets, fmt.Sprint("child", i)))
		if err != nil || len(got) != 0 {
			t.Errorf("child %d inherited the job's secrets: %q (%v)", i, got, err)
		}
	}
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return p, string(rep), stderr.String()
}

// replayed is the reference for rank r: the capture collected on its own.
func replayed(t *testing.T, job string, r int) *profile.Profile {
	t.Helper()
	captures, _ := filepath.Abs("../../testdata/captures")
	sassDir, _ := filepath.Abs("../../testdata/sass/mpi_imbalance")
	lp := &localPublisher{p: profile.New(job)}
	err := collector.Collect(context.Background(), collector.Options{Job: job, Rank: r, Replay: helperCapture(captures, strconv.Itoa(r)), Publisher: lp,
		SASSFiles: []string{sassDir}})
	if err != nil {
		t.Fatalf("rank %d: %v", r, err)
	}
	return lp.p
}

// checkOwnData checks that each listed rank of the job's profile holds the
// capture that child wrote: its launches, blocks and kernel times.
func checkOwnData(t *testing.T, p *profile.Profile, ranks map[int32]int) {
	t.Helper()
	for r, child := range ranks {
		ri := p.Ranks[r]
		if ri == nil || !p.Sealed(r) || ri.Incomplete != "" {
			t.Errorf("rank %d: sealed %v, %+v", r, p.Sealed(r), ri)
			continue
		}
		q := replayed(t, p.Job, child)
		ref := q.Ranks[int32(child)]
		if ri.Launches != ref.Launches || ri.Blocks != ref.Blocks || ri.Host != ref.Host || ri.GPU != ref.GPU {
			t.Errorf("rank %d: %+v; child %d's capture has %+v", r, ri, child, ref)
		}
		var tr, tc uint64
		for _, v := range p.PerRank[r] {
			tr += v.Get(profile.GPUTime)
		}
		for _, v := range q.PerRank[int32(child)] {
			tc += v.Get(profile.GPUTime)
		}
		if tr == 0 || tr != tc {
			t.Errorf("rank %d: kernel time %d ns, child %d's capture %d ns", r, tr, child, tc)
		}
	}
}

// Two CUDA processes under one wrapped torchrun are two ranks with their
// own data, ranks from the processes' RANK; the count from torchrun's
// arguments.
func TestTorchrunProcessesAreRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	t.Run("torchrun", func(t *testing.T) {
		p, rep, _ := runHelperJob(t, bin, "torchrun", 2, true, "--standalone", "--nproc_per_node", "2", "ddp.py")
		if len(p.Items) != 2 || p.SealedRanks() != 2 {
			t.Fatalf("%d ranks, %d sealed, want 2 and 2", len(p.Items), p.SealedRanks())
		}
		checkOwnData(t, p, map[int32]int{0: 0, 1: 1})
		if !strings.Contains(rep, "2 merged of 2 expected") {
			t.Errorf("report:\n%s", head(rep, 12))
		}
	})
	// A plain command whose two CUDA processes carry no rank: numbered in
	// order of first use; the second is past the one rank a plain command
	// is planned for, merged after the tree and named.
	t.Run("order-of-first-use", func(t *testing.T) {
		p, rep, log := runHelperJob(t, bin, "python3", 2, false, "mp.py")
		if len(p.Items) != 2 || p.SealedRanks() != 2 {
			t.Fatalf("%d ranks, %d sealed, want 2 and 2\n%s", len(p.Items), p.SealedRanks(), log)
		}
		checkOwnData(t, p, map[int32]int{0: 0, 1: 1})
		if !strings.Contains(log, "ranks beyond the expected count") || !strings.Contains(rep, "2 merged of 1 expected") {
			t.Errorf("the extra rank is not named:\n%s\n%s", log, head(rep, 12))
		}
	})
	// torchrun asked for three workers; one never came: the report names
	// it, without waiting for the rank timeout.
	t.Run("never-connected", func(t *testing.T) {
		start := time.Now()
		p, rep, _ := runHelperJob(t, bin, "torchrun", 2, true, "--nproc-per-node=3", "ddp.py")
		checkOwnData(t, p, map[int32]int{0: 0, 1: 1})
		if ri := p.Ranks[2]; ri == nil || !strings.Contains(ri.Incomplete, "never connected") {
			t.Fatalf("rank 2: %+v", ri)
		}
		if !strings.Contains(rep, "rank 2 (never connected") {
			t.Errorf("report does not name rank 2:\n%s", head(rep, 14))
		}
		if el := time.Since(start); el > 25*time.Second {
			t.Errorf("run took %v: it waited for the rank timeout", el)
		}
	})
}
