package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// Interruptions (issue: Ctrl-C and the batch system's SIGTERM end a run
// cleanly): the real gpuprof processes, the real embedded broker, and, for
// the MPI case, the real mpirun; signals sent to gpuprof run as a terminal
// or Slurm would.

// jobProcs lists the live processes of job: those whose environment names
// it (gpuprof run gives GPUPROF_JOB to the launcher, which every rank,
// collector and application inherits).
func jobProcs(job string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	marker := []byte(JobEnv + "=" + job + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				continue // dead, not yet reaped by a parent that is gone too
			}
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " ")))
	}
	return out
}

// waitProc waits until a process of job whose command line starts with
// what runs.
func waitProc(t *testing.T, job, what string) {
	t.Helper()
	waitUntil(t, what+" of job "+job, 60*time.Second, func() bool {
		for _, p := range jobProcs(job) {
			if _, cmd, _ := strings.Cut(p, " "); strings.HasPrefix(cmd, what) {
				return true
			}
		}
		return false
	})
}

// interruptRun starts cmd, sends it sigs (one second apart) once ready()
// returned, and returns how long after the first it exited, its status
// and its output.
func interruptRun(t *testing.T, cmd *exec.Cmd, ready func(), sigs ...syscall.Signal) (time.Duration, int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t0 := time.Now()
	for i, s := range sigs {
		if i > 0 {
			select {
			case err := <-done:
				done <- err
			case <-time.After(time.Second):
			}
		}
		cmd.Process.Signal(s)
	}
	select {
	case err := <-done:
		return time.Since(t0), exitCode(err), out.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("gpuprof run still runs 60 s after %v\n%s", sigs, out.String())
	}
	return 0, 0, ""
}

// checkInterrupted checks that every output of the job in out says it was
// interrupted by sig, and that no process of the job is left.
func checkInterrupted(t *testing.T, out, job, sig string) *profile.Profile {
	t.Helper()
	if left := jobProcs(job); len(left) > 0 {
		t.Errorf("processes of the job left after gpuprof run exited:\n%s", strings.Join(left, "\n"))
	}
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Interrupted != sig {
		t.Errorf("profile: interrupted %q, want %q", p.Interrupted, sig)
	}
	note := "INTERRUPTED by " + sig
	for _, f := range []struct{ name, want string }{
		{"report.txt", note},
		{"report.html", note},
		{"profile.json", `"interrupted":"` + sig + `"`},
		{"database/meta.db", note},
		{"profile.pb.gz", note},
	} {
		b, err := os.ReadFile(filepath.Join(out, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f.name, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Contains(b, []byte(f.want)) {
			t.Errorf("%s does not say %q", f.name, f.want)
		}
	}
	return p
}

// SIGINT and SIGTERM to gpuprof run over a plain command: the signal
// reaches the application, which ends; the report of what was merged is
// written, marked interrupted everywhere; the status is 128+signal, as a
// shell reports a command the signal ended; nothing of the job is left;
// all within 10 s. A second SIGINT ends an application that ignores the
// first.
func TestInterruptPlainCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	inject := fakeInject(t) // the applications here use no CUDA: nothing loads it
	stubborn := filepath.Join(t.TempDir(), "stubborn.sh")
	if err := os.WriteFile(stubborn, []byte("#!/bin/sh\ntrap '' INT TERM\nsleep 47.5\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		app  []string
		sigs []syscall.Signal
		want int
	}{
		{"SIGINT", []string{"sleep", "47.25"}, []syscall.Signal{syscall.SIGINT}, 130},
		{"SIGTERM", []string{"sleep", "47.25"}, []syscall.Signal{syscall.SIGTERM}, 143},
		{"second SIGINT", []string{stubborn}, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, 130},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := "intr-" + strings.ReplaceAll(c.name, " ", "-")
			out := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command(bin, append([]string{"run", "-o", out, "--job", job, "--"}, c.app...)...)
			cmd.Env = append(os.Environ(), "GPUPROF_INJECT="+inject)
			took, status, log := interruptRun(t, cmd, func() { waitProc(t, job, "sleep 47") }, c.sigs...)
			t.Logf("%s: exit %d %v after the signal", c.name, status, took.Round(time.Millisecond))
			if status != c.want || took > 10*time.Second {
				t.Fatalf("exit status %d %v after the signal, want %d within 10 s\n%s", status, took, c.want, log)
			}
			sig := proctreeName(c.sigs[0])
			p := checkInterrupted(t, out, job, sig)
			if why := p.Ranks[0].Incomplete; !strings.Contains(why, "interrupted by "+sig) {
				t.Errorf("rank 0: incomplete %q, want it interrupted by %s", why, sig)
			}
		})
	}
}

// SIGINT and SIGTERM to gpuprof run over mpirun -np 4 of replaying ranks
// (each held mid-stream, as a live application): mpirun passes the signal
// on, every rank's stored items are merged and the rank named interrupted,
// the report says so, the status is 128+signal, and no process of the job
// (mpirun, its daemon, the collectors) is left, within 10 s.
func TestInterruptUnderMpirun(t *testing.T) {
	mpirun, bin := mpirunOrSkip(t)
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(proctreeName(sig), func(t *testing.T) {
			const ranks, batch = 4, 128
			job := "mpi-" + proctreeName(sig)
			streams := t.TempDir()
			files, err := synth.WriteFiles(streams, synth.Options{Ranks: ranks, Seed: 31, Iterations: 6})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				st, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				feedFIFO(t, f, int(st.Size()/2))
			}
			out := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command(bin, "run", "-o", out, "--job", job, "--fan-in", "2", "--rank-timeout", "60s",
				"--batch-records", fmt.Sprint(batch), "--batch-interval", "1h", "--sass", sassDir,
				"--replay", filepath.Join(streams, "rank{rank:4}.gpraw"),
				"--", mpirun, "--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(ranks))
			cmd.Env = mpirunEnv()
			if os.Getenv("GPUPROF_TEST_LOG") != "" {
				cmd.Env = append(cmd.Env, "GPUPROF_LOG=debug")
			}
			ready := func() {
				// Every rank has stored items: there is something to merge.
				waitUntil(t, "the broker's credentials", 60*time.Second, func() bool {
					_, err := os.Stat(reducerKey(out, job))
					return err == nil
				})
				url := brokerURLFromLog(t, out, job)
				s := jobStream(t, url, job, reducerKey(out, job))
				for r := range ranks {
					waitItems(t, s, broker.BatchSubject(job, int32(r)), 1, 60*time.Second)
				}
			}
			took, status, log := interruptRun(t, cmd, ready, sig)
			t.Logf("exit %d %v after %s", status, took.Round(time.Millisecond), proctreeName(sig))
			if want := 128 + int(sig); status != want || took > 10*time.Second {
				t.Fatalf("exit status %d %v after the signal, want %d within 10 s\n%s", status, took, want, log)
			}
			p := checkInterrupted(t, out, job, proctreeName(sig))
			for r := int32(0); r < ranks; r++ {
				b := p.Items[r]
				why := p.Ranks[r].Incomplete
				if b == nil || b.IsEmpty() || !strings.Contains(why, "interrupted by") {
					t.Errorf("rank %d: %v items merged, incomplete %q: want its stored items, interrupted", r, b, why)
				}
			}
			if t.Failed() || os.Getenv("GPUPROF_TEST_LOG") != "" {
				t.Logf("gpuprof run:\n%s", log)
			}
		})
	}
}

// brokerURLFromLog finds the broker's URL in what gpuprof run wrote for
// the job: the collectors get it in their environment only, and the
// reducer's key file sits beside the broker's store.
func brokerURLFromLog(t *testing.T, out, job string) string {
	t.Helper()
	var url string
	waitUntil(t, "a collector of job "+job, 60*time.Second, func() bool {
		for _, p := range jobProcs(job) {
			pid, _ := strconv.Atoi(strings.Fields(p)[0])
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				continue
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if v, ok := bytes.CutPrefix(kv, []byte(NATSEnv+"=")); ok {
					url = string(v)
					return true
				}
			}
		}
		return false
	})
	return url
}

func proctreeName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[s]
}
