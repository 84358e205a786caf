package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpuprof/collector"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// buildGpuprof builds the command into a temporary directory.
func buildGpuprof(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpuprof")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// mpirunOrSkip skips an integration test in -short mode or without
// mpirun; otherwise it returns mpirun's path and a gpuprof built for it.
func mpirunOrSkip(t *testing.T) (mpirun, gpuprof string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (scripts/setup-debian installs openmpi-bin)")
	}
	return mpirun, buildGpuprof(t)
}

// mpirunEnv is the environment a test's mpirun runs in: as root in a
// container, and every rank on this host.
func mpirunEnv(extra ...string) []string {
	return append(append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_plm_rsh_agent="), extra...)
}

// localMerge collects every stream in this process, without broker or tree,
// and merges the ranks: what the distributed pipeline must reproduce.
func localMerge(t *testing.T, job string, files []string, sassDir string) *profile.Profile {
	t.Helper()
	all := profile.New(job)
	for r, f := range files {
		lp := &localPublisher{p: profile.New(job)}
		err := collector.Collect(context.Background(), collector.Options{Job: job, Rank: r, Replay: f, Publisher: lp,
			BatchRecords: 4096, BatchInterval: time.Hour, SASSFiles: []string{sassDir}})
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if err := all.Merge(lp.p); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// TestRunUnderMpirun runs the real pipeline: mpirun starts 8 collector
// processes that replay generated streams, an embedded NATS server carries
// their batches, a tree of fan-in 4 (two levels) merges them. The final
// profile must equal the in-process merge of the same streams, byte for
// byte.
func TestRunUnderMpirun(t *testing.T) {
	mpirun, bin := mpirunOrSkip(t)
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: 8, Seed: 3, Imbalance: 1})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", "itest", "--fan-in", "4", "--rank-timeout", "30s",
		"--batch-records", "4096", "--batch-interval", "1h", "--sass", sassDir,
		"--replay", filepath.Join(streams, "rank{rank:4}.gpraw"),
		"--", mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "8")
	cmd.Env = mpirunEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuprof run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	got, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := localMerge(t, "itest", files, sassDir)
	if len(got.Items) != 8 || got.SealedRanks() != 8 {
		t.Fatalf("merged %d ranks, %d sealed, want 8", len(got.Items), got.SealedRanks())
	}
	// Value sketches merge exactly only until their heavy-hitter lists
	// truncate; past that the tree's grouping may differ within the
	// sketch's error bound. Everything else must be byte-identical.
	checkSketches(t, got, want)
	if !bytes.Equal(got.Encode(), want.Encode()) {
		t.Fatalf("distributed merge differs from the in-process merge:\n--- distributed\n%s\n--- in-process\n%s", head(got.String(), 60), head(want.String(), 60))
	}
	for _, f := range []string{"report.txt", "report.html", "profile.pb.gz", "profile.json", "database/meta.db"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: outputs must be user-only", f, st.Mode().Perm())
		}
	}
	if !strings.Contains(stderr.String(), "8 of 8 ranks reported, 0 incomplete") {
		t.Errorf("the summary does not say how many ranks were merged:\n%s", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout is the application's (nothing here), not gpuprof's:\n%s", head(stdout.String(), 20))
	}
	// report prints it again from the directory.
	rep, err := exec.Command(bin, "report", out).CombinedOutput()
	if err != nil || !strings.Contains(string(rep), "synthetic") {
		t.Fatalf("gpuprof report: %v\n%s", err, head(string(rep), 20))
	}
}

// checkSketches compares the value sketches of two merges of the same
// items: totals, ranges and distinct-count registers exactly, heavy-hitter
// counts within the sketches' stated error; then drops them from both.
func checkSketches(t *testing.T, got, want *profile.Profile) {
	t.Helper()
	cmp := func(where string, a, b *profile.ValueSketch) {
		if (a == nil) != (b == nil) {
			t.Fatalf("%s: sketch present on one side only", where)
		}
		if a == nil {
			return
		}
		if a.Total != b.Total || a.Min != b.Min || a.Max != b.Max || !bytes.Equal(a.HLL, b.HLL) {
			t.Fatalf("%s: sketches differ in total, range or distinct registers", where)
		}
		for _, x := range a.Top {
			for _, y := range b.Top {
				if x.Value == y.Value {
					d := int64(x.Count) - int64(y.Count)
					if d < -int64(x.Err+y.Err) || d > int64(x.Err+y.Err) {
						t.Fatalf("%s: value %#x counted %d and %d, beyond errors %d and %d", where, x.Value, x.Count, y.Count, x.Err, y.Err)
					}
				}
			}
		}
	}
	for k, s := range got.PCs {
		cmp(fmt.Sprintf("pc %+v", k), s.Values, want.PCs[k].Values)
		s.Values, want.PCs[k].Values = nil, nil
	}
	for k, s := range got.ObjStats {
		cmp(fmt.Sprintf("object %+v", k), s.Values, want.ObjStats[k].Values)
		s.Values, want.ObjStats[k].Values = nil, nil
	}
}

// TestRunExitCode: the job's exit status is the application's. A stand-in
// launcher named mpirun runs the rank's collector (replaying a stream) and
// then exits 3, as a failing application would.
func TestRunExitCode(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	launcher := filepath.Join(t.TempDir(), "mpirun")
	os.WriteFile(launcher, []byte("#!/bin/sh\nshift 2\n\"$@\" || exit 9\nexit 3\n"), 0o755)
	out := filepath.Join(t.TempDir(), "o")
	cmd := exec.Command(bin, "run", "-o", out, "--replay", files[0], "--rank-timeout", "10s", "--", launcher, "-np", "1")
	b, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit = %v, want 3\n%s", err, b)
	}
	p, err := profile.ReadFile(out)
	if err != nil || p.SealedRanks() != 1 {
		t.Fatalf("profile of the failed job: %v", err)
	}
}

func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("... (%d more bytes)", len(s)))
	}
	return strings.Join(lines, "\n")
}
