package collector

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The collector ends a stream with its account of the analysis: the
// records analysed (all of them) and the workers' busy time.
func TestAnalysisAccount(t *testing.T) {
	pub := &items{}
	o := appOptions(t, pub)
	t.Setenv("GPUPROF_TEST_SCALE", "2")
	var mu sync.Mutex
	var logs []string
	o.Logf = func(format string, args ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); ExitCode(err) != 3 {
		t.Fatalf("run: %v", err)
	}
	re := regexp.MustCompile(`analysed (\d+) access records in \S+: workers busy (\S+) \((\d+) workers`)
	var line string
	for _, l := range logs {
		if re.MatchString(l) {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no analysis account in the log:\n%s", strings.Join(logs, "\n"))
	}
	m := re.FindStringSubmatch(line)
	recs, _ := strconv.ParseUint(m[1], 10, 64)
	busy, err := time.ParseDuration(m[2])
	if recs == 0 || recs != c.Progress().Records || err != nil || busy <= 0 {
		t.Fatalf("account %q: %d records (collector counted %d), busy %v %v", line, recs, c.Progress().Records, busy, err)
	}
	t.Log(line)
}

// The reader's budget holds it back only while the analysis holds
// readAhead bytes, says how long it waited, and never deadlocks on a frame
// larger than the budget. In a synctest bubble: a blocked acquire is seen
// blocked (not assumed so after a sleep), and the wait it reports is the
// bubble's exact time to the release.
func TestByteBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newByteBudget(100)
		if w := b.acquire(60); w != 0 {
			t.Fatalf("first acquire waited %v", w)
		}
		got := make(chan time.Duration)
		go func() { got <- b.acquire(60) }()
		synctest.Wait() // blocked in acquire, or (wrongly) on sending its result
		select {
		case w := <-got:
			t.Fatalf("acquired beyond the budget (waited %v)", w)
		default:
		}
		time.Sleep(50 * time.Millisecond)
		b.release(60)
		if w := <-got; w != 50*time.Millisecond {
			t.Fatalf("waited %v, want the 50ms until the release", w)
		}
		b.release(60)
		if w := b.acquire(1000); w != 0 { // larger than the budget, nothing held
			t.Fatalf("oversized frame waited %v", w)
		}
		go func() { got <- b.acquire(1) }()
		synctest.Wait()
		b.close() // the stream ends: nobody waits any more
		if w := <-got; w != 0 {
			t.Fatalf("a waiter released by close waited %v of the bubble's time", w)
		}
	})
}
