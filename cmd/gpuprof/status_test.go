package main

import (
	"strings"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/profile"
)

// What gpuprof run says of an incomplete rank, from its collector's last
// heartbeat, when the reducers gave up.
func TestStatusReasons(t *testing.T) {
	now := time.Now()
	zero := 0
	b := &statusBoard{last: map[int32]rankStatus{}, heard: map[int32]time.Time{}}
	b.connected = func() (map[string]int, error) {
		return map[string]int{collectorConnName(1, 101): 1, collectorConnName(2, 102): 1, collectorConnName(4, 104): 1, collectorConnName(5, 105): 1}, nil
	}
	set := func(r int32, st rankStatus, ago time.Duration) {
		st.Rank, st.Host, st.PID = r, "node7", 100+int(r)
		st.Conn = collectorConnName(r, st.PID)
		b.last[r], b.heard[r] = st, now.Add(-ago)
	}
	set(0, rankStatus{State: stateDone}, time.Second) // finished: no word
	set(1, rankStatus{State: stateAnalysing, Exit: &zero, AppEnd: now.Add(-9 * time.Second).UnixNano()}, time.Second)
	set(2, rankStatus{State: stateAnalysing, Exit: &zero}, 20*time.Second) // silent, connected: stalled
	set(3, rankStatus{State: stateRunning}, 20*time.Second)                // its connection is gone
	set(4, rankStatus{State: stateRunning}, time.Second)
	set(5, rankStatus{State: stateInterrupted, Signal: "SIGTERM"}, time.Second)
	set(6, rankStatus{State: stateFailed, Detail: "no broker+x"}, time.Second)
	v := b.now()
	for r, want := range map[int32]string{
		0: "",
		1: "collector still analysing on node7 pid 101 (the application exited with status 0 9s earlier)",
		2: "collector stopped responding on node7 pid 102 (silent for 20s: crashed or stalled)",
		3: "collector crashed or was killed on node7 pid 103 (its connection closed while running)",
		4: "application still running on node7 pid 104",
		5: "collector still publishing after the interruption by SIGTERM on node7 pid 105",
		6: "collector failed on node7 pid 106 (no broker+x)",
		7: "collector never connected",
	} {
		if got := v.reason(r, now); got != want {
			t.Errorf("rank %d: %q, want %q", r, got, want)
		}
	}
	// In a profile: the reducer's reason follows, a rank that sent nothing
	// gets its entry, and no '+' splits a reason.
	p := profile.New("j")
	p.SealRanks([]int32{1}, func(int32) string { return "rank timeout: no data" })
	b.explain(p, 8, now)
	if got := p.Ranks[1].Incomplete; !strings.HasPrefix(got, "collector still analysing") || !strings.HasSuffix(got, ": rank timeout: no data") {
		t.Errorf("rank 1: %q", got)
	}
	if got := p.Ranks[7]; got == nil || got.Incomplete != "collector never connected" {
		t.Errorf("rank 7: %+v", got)
	}
	if got := p.Ranks[6]; got == nil || strings.Contains(got.Incomplete, "+") {
		t.Errorf("rank 6: %+v", got)
	}
	if got := p.Ranks[0]; got != nil && got.Incomplete != "" {
		t.Errorf("rank 0 finished: %+v", got)
	}
	// Once run gave up (freeze), what ending the launcher does next (its
	// SIGTERM interrupts rank 1's collector, which then finishes) does not
	// change the reason.
	b.freeze()
	set(1, rankStatus{State: stateInterrupted, Signal: "SIGTERM"}, 0)
	set(1, rankStatus{State: stateDone}, 0)
	q := profile.New("j")
	q.SealRanks([]int32{1}, func(int32) string { return "rank timeout: no done item" })
	b.explain(q, 2, now)
	if got := q.Ranks[1].Incomplete; !strings.HasPrefix(got, "collector still analysing on node7 pid 101") {
		t.Errorf("rank 1 after the freeze: %q", got)
	}
}

// On a cluster whose roles gpuprof nats-config wrote, run never hands the
// collectors its own (reducer) key.
func TestClusterCollectorsGetTheirOwnKey(t *testing.T) {
	cfg := &jobConfig{Broker: broker.Options{URLs: []string{"tls://n1:4222"}, NKeySeedFile: "J.reducer.nk"}}
	if _, _, _, err := jobBroker(cfg); err == nil || !strings.Contains(err.Error(), "--collector-nkey") {
		t.Fatalf("run with its own key and none for the collectors: %v", err)
	}
	cfg.CollectorNKey = "J.collector.nk"
	run, col, emb, err := jobBroker(cfg)
	if err != nil || emb != nil || run.NKeySeedFile != "J.reducer.nk" || !strings.HasSuffix(col.NKeySeedFile, "J.collector.nk") || cfg.Replicas != 3 {
		t.Fatalf("run %+v, collectors %+v, %v", run, col, err)
	}
}
