package collector

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// rankEvents records what a collector tells OnRank.
type rankEvents struct {
	mu sync.Mutex
	ev map[int32][]RankState
}

func (e *rankEvents) note(r int32, st RankState, _ int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ev == nil {
		e.ev = map[int32][]RankState{}
	}
	e.ev[r] = append(e.ev[r], st)
}

func (e *rankEvents) has(r int32, st RankState) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.ev[r] {
		if s == st {
			return true
		}
	}
	return false
}

// An interruption reaches every rank of a collector that measures several
// CUDA processes (a torchrun's workers): the command is signalled and
// passes it to its processes; each rank whose process was still running
// publishes what it measured and a done item naming the signal, and a rank
// whose process had finished before stays complete. OnRank follows each
// rank: running, its application exited (with the command), done.
func TestInterruptReachesEveryRank(t *testing.T) {
	pub, dir := &items{}, t.TempDir()
	o := spawnOptions(t, pub, 3, []string{"", "GPUPROF_TEST_HOLD=1", "GPUPROF_TEST_HOLD=1"}, dir)
	o.Ranks = 3
	ev := &rankEvents{}
	o.OnRank = ev.note
	intr := make(chan os.Signal, 1)
	o.Interrupts = intr
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(t.Context()) }()
	deadline := time.Now().Add(30 * time.Second)
	for !(ev.has(0, RankDone) && ev.has(1, RankRunning) && ev.has(2, RankRunning) && len(c.Ranks()) == 3) {
		if time.Now().After(deadline) {
			t.Fatalf("ranks not under way: %v", ev.ev)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the held processes' streams are read
	t0 := time.Now()
	intr <- os.Interrupt
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector did not end after the interruption")
	}
	t.Logf("collector ended %v after SIGINT: %v", time.Since(t0).Round(time.Millisecond), err)
	if s := c.Interrupted(); s != os.Interrupt {
		t.Fatalf("interrupted by %v", s)
	}
	if got := fmt.Sprint(c.Ranks()); got != "[0 1 2]" {
		t.Fatalf("ranks %s", got)
	}
	for r := int32(0); r < 3; r++ {
		m := pub.only(r).merged(t, r)
		why := m.Ranks[r].Incomplete
		switch {
		case r == 0 && why != "":
			t.Errorf("rank 0 ended before the interruption: incomplete %q", why)
		case r > 0 && !strings.Contains(why, "interrupted by SIGINT"):
			t.Errorf("rank %d: incomplete %q, want it interrupted by SIGINT", r, why)
		case r > 0 && len(m.Nodes) <= 1:
			t.Errorf("rank %d: nothing of what it measured was published", r)
		}
		for _, st := range []RankState{RankRunning, RankExited, RankDone} {
			if !ev.has(r, st) {
				t.Errorf("rank %d: OnRank never said %d (%v)", r, st, ev.ev[r])
			}
		}
	}
}
