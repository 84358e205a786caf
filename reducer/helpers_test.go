package reducer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"gpuprof/broker"
	"gpuprof/collector/publish"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

// testLogger keeps reducer log lines in a buffer the test can search, and
// shows them with -v.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLogger(t testing.TB) (*slog.Logger, *logBuf) {
	lb := &logBuf{}
	var w io.Writer = lb
	if testing.Verbose() && os.Getenv("REDUCER_TEST_LOG") != "" {
		w = io.MultiWriter(lb, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

func startBroker(t testing.TB) *broker.Embedded {
	t.Helper()
	e, err := broker.StartEmbedded(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func connect(t testing.TB, e *broker.Embedded, name string) *broker.Conn {
	t.Helper()
	c, err := broker.Connect(e.Options(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ensureStream(t testing.TB, c *broker.Conn, job string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.EnsureStream(ctx, job, 1); err != nil {
		t.Fatal(err)
	}
}

// jobItems builds every rank's items (data items then the done item).
func jobItems(job string, seed uint64, shape proftest.Shape, ranks, batches int) [][]*profile.Profile {
	out := make([][]*profile.Profile, ranks)
	for r := range out {
		out[r] = proftest.Rank(job, seed, shape, int32(r), batches)
	}
	return out
}

// flatMerge is the reference: every item merged in one process.
func flatMerge(t testing.TB, job string, items [][]*profile.Profile) *profile.Profile {
	t.Helper()
	p := profile.New(job)
	for _, rank := range items {
		for _, it := range rank {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// publishRanks publishes each rank's items through its own Publisher,
// ranks concurrently, as the collectors do.
func publishRanks(t testing.TB, e *broker.Embedded, job string, items [][]*profile.Profile, window int) []publish.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stats := make([]publish.Stats, len(items))
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for r := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := broker.Connect(e.Options(fmt.Sprintf("rank %d", r)))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			p, err := publish.New(c, publish.Config{Job: job, Window: window, AckTimeout: 2 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			for i, it := range items[r] {
				if err := p.Publish(ctx, it, i == len(items[r])-1); err != nil {
					errs <- err
					return
				}
			}
			if err := p.Close(ctx); err != nil {
				errs <- err
			}
			stats[r] = p.Stats()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return stats
}

func sameProfile(t testing.TB, got, want *profile.Profile) {
	t.Helper()
	g, w := got.Encode(), want.Encode()
	if !bytes.Equal(g, w) {
		t.Fatalf("final profile differs from the in-process merge: %d vs %d bytes, %d vs %d items, ranks sealed %d vs %d, incomplete %v",
			len(g), len(w), got.MergedItems(), want.MergedItems(), got.SealedRanks(), want.SealedRanks(), got.IncompleteRanks())
	}
}

func treeConfig(t testing.TB, c *broker.Conn, job string, ranks, k int, log *slog.Logger) reducer.Config {
	t.Helper()
	tree, err := reducer.PlanN(ranks, k)
	if err != nil {
		t.Fatal(err)
	}
	// RankTimeout is only a safety net here (tests that expect a timeout set
	// their own): long, so a loaded CI machine under -race seals no rank early.
	return reducer.Config{Job: job, Conn: c, Tree: tree, Logger: log, PartialInterval: 200 * time.Millisecond, RankTimeout: 90 * time.Second, ChildGrace: 2 * time.Second}
}

// medium is a shape whose items take a few chunks under a 16 KiB payload.
var medium = proftest.Shape{Kernels: 6, HostDepth: 4, Lines: 20, InstPer: 6, Pairs: 300, Objects: 20, RankUnique: 10, Sketches: true}

func startBrokerWith(t testing.TB, o broker.EmbeddedOptions) *broker.Embedded {
	t.Helper()
	o.Dir = t.TempDir()
	e, err := broker.StartEmbeddedWith(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// rawPublish stores data on subj under a message id, bypassing the
// Publisher (to inject duplicates, corrupt and foreign batches).
func rawPublish(t testing.TB, c *broker.Conn, job, subj string, data []byte, id string) {
	t.Helper()
	js, err := c.NewJetStream(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
	if _, _, err := broker.PublishRetry(ctx, js, m, id, broker.StreamName(job), broker.DefaultRetry, nil); err != nil {
		t.Fatal(err)
	}
}

func chunksOf(t testing.TB, it *profile.Profile, done bool, payload int) [][]byte {
	t.Helper()
	cs, err := profile.EncodeBatch(it, done, payload)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// expectSealed is the in-process reference for a run where some ranks
// time out: the merge of what was published, those ranks sealed with the
// reasons the reducer gives.
func expectSealed(t testing.TB, job string, items [][]*profile.Profile, reasons map[int32]string) *profile.Profile {
	t.Helper()
	p := flatMerge(t, job, items)
	var rs []int32
	for r := range reasons {
		rs = append(rs, r)
	}
	p.SealRanks(rs, func(r int32) string { return reasons[r] })
	return p
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
