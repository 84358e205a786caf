package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"gpuprof/broker"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// holdFIFO replaces the stream file at path by a named pipe, writes the
// whole stream into it (its END included: the application has ended) and
// keeps it open until the test ends: the collector reading it never sees
// the end of its input, as one still busy after its application exited.
func holdFIFO(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.Write(data)
		<-stop
		w.Close()
	}()
	t.Cleanup(func() {
		close(stop)
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			r.Close()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
}

// statusWatch follows the collectors' heartbeats as gpuprof run does.
type statusWatch struct {
	mu   sync.Mutex
	last map[int32]rankStatus
}

func watchJobStatus(t *testing.T, url, job, nkey string) *statusWatch {
	t.Helper()
	c, err := broker.Connect(broker.Options{URLs: []string{url}, Name: "bounds test", NKeySeedFile: nkey, InboxPrefix: broker.InboxPrefix(job, broker.RoleReducer)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := &statusWatch{last: map[int32]rankStatus{}}
	if _, err := c.NC.Subscribe(broker.StatusSubjects(job), func(m *nats.Msg) {
		var st rankStatus
		if json.Unmarshal(m.Data, &st) == nil {
			w.mu.Lock()
			w.last[st.Rank] = st
			w.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *statusWatch) state(r int32) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[r].State
}

// Nothing hangs: after the application's end, collectors that stall,
// crash or never connected cannot hold gpuprof run beyond the rank timeout
// (plus writing the report and ending the launcher), and the report names
// each incomplete rank with what its collector was doing. Five ranks are
// expected; the launcher starts four: rank 0 runs to its end; rank 1 is
// still analysing (its input never closes); rank 2's collector is stopped
// (SIGSTOP) and rank 3's killed (SIGKILL) once their applications ended;
// rank 4 never starts.
func TestCollectorsStallAfterAppEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	const job, started, expected = "stall", 4, 5
	const rankTimeout = 8 * time.Second // past the heartbeats' silence threshold
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: started, Seed: 41})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	for _, r := range []int{1, 2, 3} {
		holdFIFO(t, files[r])
	}
	l := newFakeLauncher(t)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", job, "--ranks", fmt.Sprint(expected), "--rank-timeout", rankTimeout.String(),
		"--sass", sassDir, "--replay", filepath.Join(streams, "rank{rank:4}.gpraw"), "--", l.path, "-np", fmt.Sprint(started))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	w := watchJobStatus(t, l.brokerURL(t), job, reducerKey(out, job))
	waitUntil(t, "every started rank's application to end", 60*time.Second, func() bool {
		return w.state(0) == stateDone && w.state(1) == stateAnalysing && w.state(2) == stateAnalysing && w.state(3) == stateAnalysing
	})
	appEnd := time.Now()
	if err := syscall.Kill(l.pid(t, 2), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(l.pid(t, 2), syscall.SIGKILL) })
	if err := syscall.Kill(l.pid(t, 3), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(rankTimeout + time.Minute):
		t.Fatalf("gpuprof run still runs %v after the applications ended\n%s", time.Since(appEnd), log.String())
	}
	took := time.Since(appEnd)
	t.Logf("gpuprof run ended %v after the applications, rank timeout %v; exit %d", took.Round(time.Millisecond), rankTimeout, exitCode(runErr))
	if bound := rankTimeout + 5*time.Second; took > bound {
		t.Errorf("gpuprof run ended %v after the applications, bound %v (rank timeout + report + ending the launcher)", took, bound)
	}
	if exitCode(runErr) != 0 {
		t.Errorf("exit %v: the applications exited 0\n%s", runErr, log.String())
	}
	if left := jobProcs(job); len(left) > 0 {
		t.Errorf("processes of the job left:\n%s", strings.Join(left, "\n"))
	}
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range map[int32]string{
		1: "collector still analysing",
		2: "collector stopped responding",
		3: "collector crashed or was killed",
		4: "collector never connected",
	} {
		ri := p.Ranks[r]
		if ri == nil || !strings.HasPrefix(ri.Incomplete, want) {
			t.Errorf("rank %d: %+v, want incomplete: %s...", r, ri, want)
			continue
		}
		if line := fmt.Sprintf("rank %d (%s", r, want); !bytes.Contains(rep, []byte(line)) {
			t.Errorf("report.txt does not name %q", line)
		}
		t.Logf("rank %d: %s", r, ri.Incomplete)
	}
	if ri := p.Ranks[0]; ri == nil || ri.Incomplete != "" || !p.Sealed(0) {
		t.Errorf("rank 0 ran to its end: %+v", ri)
	}
	if t.Failed() {
		t.Logf("gpuprof run:\n%s", log.String())
	}
}
