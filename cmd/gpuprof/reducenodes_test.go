package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"gpuprof/broker"
)

// Forty reducer nodes of one gpuprof reduce process fail (their job's
// streams do not exist): the process ends, at once, with one error that
// names every failed node; reporting the failures never blocks.
func TestReduceManyFailingNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	e, err := broker.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	const leaves = 40
	var nodes []string
	for i := range leaves {
		nodes = append(nodes, fmt.Sprintf("0.%d", i))
	}
	cmd := exec.Command(bin, "reduce", "--job", "nostream", "--ranks", fmt.Sprint(8*leaves), "--fan-in", "8",
		"--node", strings.Join(nodes, ","), "--nats", e.URL)
	done := make(chan struct{})
	var out []byte
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("gpuprof reduce with 40 failing nodes did not end")
	}
	if exitCode(err) != exitFailure {
		t.Fatalf("exit %v, want %d (gpuprof's own failure)\n%s", err, exitFailure, out)
	}
	msg := string(out)
	if !strings.Contains(msg, fmt.Sprintf("%d of %d reducer nodes failed", leaves, leaves)) {
		t.Errorf("the error does not count the failed nodes:\n%s", msg)
	}
	for _, n := range nodes {
		if !strings.Contains(msg, "node "+n+": ") {
			t.Errorf("the error does not name node %s", n)
		}
	}
	t.Logf("%s", strings.SplitN(msg, "\n", 2)[0])
}
