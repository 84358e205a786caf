package publish_test

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/collector/publish"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

func setup(t *testing.T, o broker.EmbeddedOptions, job string, so broker.StreamOptions) (*broker.Embedded, *broker.Conn, jetstream.Stream) {
	t.Helper()
	o.Dir = t.TempDir()
	e, err := broker.StartEmbeddedWith(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	c, err := broker.Connect(e.Options("collector"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.EnsureStreamWith(ctx, job, so)
	if err != nil {
		t.Fatal(err)
	}
	return e, c, s
}

// stored reads every batch chunk in the stream and reassembles the items.
func stored(t *testing.T, s jetstream.Stream, job string) map[[2]int64]*profile.Profile {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]int64]*profile.Profile{}
	asm := map[[2]int64]*profile.Assembler{}
	chunks := map[string]bool{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		h, err := profile.ParseHeader(m.Data)
		if err != nil {
			t.Fatalf("stream seq %d: %v", seq, err)
		}
		if chunks[h.ID()] {
			t.Fatalf("chunk %s stored twice", h.ID())
		}
		chunks[h.ID()] = true
		k := [2]int64{int64(h.Rank), int64(h.Seq)}
		if asm[k] == nil {
			asm[k] = &profile.Assembler{}
		}
		p, _, err := asm[k].Add(m.Data)
		if err == nil {
			out[k] = p
		} else if err != profile.ErrIncomplete {
			t.Fatalf("stream seq %d: %v", seq, err)
		}
	}
	return out
}

func checkAll(t *testing.T, got map[[2]int64]*profile.Profile, items []*profile.Profile) {
	t.Helper()
	if len(got) != len(items) {
		t.Fatalf("stream holds %d items, want %d", len(got), len(items))
	}
	for _, it := range items {
		r := it.SortedRanks()[0]
		k := [2]int64{int64(r), int64(it.Items[r].Minimum())}
		g := got[k]
		if g == nil || string(g.Encode()) != string(it.Encode()) {
			t.Fatalf("item rank %d seq %d missing or changed", k[0], k[1])
		}
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// Items larger than the max payload go as several chunks; publishing an item
// again (a retry) stores nothing new.
func TestChunksAndDedup(t *testing.T) {
	_, c, s := setup(t, broker.EmbeddedOptions{MaxPayload: 16 << 10}, "chunks", broker.StreamOptions{})
	p, err := publish.New(c, publish.Config{Job: "chunks", Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	items := proftest.Rank("chunks", 3, proftest.Shape{Kernels: 6, HostDepth: 4, Lines: 20, InstPer: 6, Pairs: 300, Objects: 20, RankUnique: 10, Sketches: true}, 5, 3)
	for i, it := range items {
		if err := p.Publish(ctx(t, time.Minute), it, i == len(items)-1); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Chunks <= uint64(len(items)) || st.Acked != st.Chunks || st.Duplicates != 0 || st.Items != uint64(len(items)) {
		t.Fatalf("stats %+v: want several chunks per item, all acknowledged", st)
	}
	// A collector retrying a whole item (it did not see the ack).
	if err := p.Publish(ctx(t, time.Minute), items[1], false); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	st2 := p.Stats()
	if st2.Duplicates == 0 || st2.Duplicates != st2.Chunks-st.Chunks {
		t.Fatalf("republished item: %d duplicates of %d chunks", st2.Duplicates, st2.Chunks-st.Chunks)
	}
	checkAll(t, stored(t, s, "chunks"), items)
	if info, _ := s.Info(ctx(t, time.Minute)); info.State.Msgs != st.Chunks {
		t.Fatalf("stream holds %d messages, %d chunks were published once", info.State.Msgs, st.Chunks)
	}
	if err := p.Publish(ctx(t, time.Minute), items[0], false); err == nil {
		t.Fatal("publish after Close")
	}
}

// A full stream (discard new) makes the window fill: Publish blocks, then
// fails at its context naming rank, sequence and subject; once room is made
// everything in flight is stored and nothing is lost.
func TestFullBrokerPushesBack(t *testing.T) {
	_, c, s := setup(t, broker.EmbeddedOptions{MaxPayload: 8 << 10}, "full", broker.StreamOptions{MaxBytes: 48 << 10})
	p, err := publish.New(c, publish.Config{Job: "full", Window: 3, Retry: broker.RetryPolicy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond, Horizon: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	items := proftest.Rank("full", 4, proftest.Small, 2, 30)
	var blockedAt int
	var blockErr error
	for i, it := range items {
		err := p.Publish(ctx(t, 300*time.Millisecond), it, i == len(items)-1)
		if err != nil {
			blockedAt, blockErr = i, err
			break
		}
	}
	if blockErr == nil {
		t.Fatal("publishing 30 items into a 48 KiB stream never blocked")
	}
	if !strings.Contains(blockErr.Error(), "rank 2 seq") || !strings.Contains(blockErr.Error(), "gpuprof.full.batch.2") {
		t.Fatalf("blocked publish error %q does not name rank, seq and subject", blockErr)
	}
	st := p.Stats()
	if st.InFlight != 3 || st.Retries == 0 || st.Full == 0 || st.Failed != 0 {
		t.Fatalf("while full: %+v, want a full window of 3 being retried", st)
	}
	// Make room, as a reducer purging merged batches does (what is stored
	// so far is kept aside first).
	got := stored(t, s, "full")
	if err := s.Purge(ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for k, v := range stored(t, s, "full") {
		got[k] = v
	}
	if err := s.Purge(ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The item that timed out is published again; the rest go through as
	// room is made.
	for i := blockedAt; i < len(items); i++ {
		if err := p.Publish(ctx(t, time.Minute), items[i], i == len(items)-1); err != nil {
			t.Fatal(err)
		}
		if err := p.Flush(ctx(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
		for k, v := range stored(t, s, "full") {
			got[k] = v
		}
		if err := s.Purge(ctx(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	checkAll(t, got, items)
}

// The broker restarts while ranks publish: every item is stored exactly
// once.
func TestBrokerRestartLosesNothing(t *testing.T) {
	e, c, s := setup(t, broker.EmbeddedOptions{}, "restart", broker.StreamOptions{})
	p, err := publish.New(c, publish.Config{Job: "restart", Window: 8, AckTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var items []*profile.Profile
	for r := int32(0); r < 4; r++ {
		items = append(items, proftest.Rank("restart", 5, proftest.Small, r, 40)...)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(100 * time.Millisecond)
		if err := e.Restart(); err != nil {
			t.Error(err)
		}
	}()
	for i, it := range items {
		if err := p.Publish(ctx(t, 2*time.Minute), it, (i+1)%41 == 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	if err := p.Close(ctx(t, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Logf("stats after a broker restart: %+v", p.Stats())
	checkAll(t, stored(t, s, "restart"), items)
}

// A broker that never stores (no stream for the job) is an error from Close
// naming rank, seq and subject, after the retry horizon.
func TestUnrecoverable(t *testing.T) {
	_, c, _ := setup(t, broker.EmbeddedOptions{}, "other", broker.StreamOptions{})
	p, err := publish.New(c, publish.Config{Job: "nostream", AckTimeout: 200 * time.Millisecond, Retry: broker.RetryPolicy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond, Horizon: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	it := proftest.Item("nostream", 1, proftest.Small, 7, 0, false, 0)
	if err := p.Publish(ctx(t, time.Minute), it, false); err != nil {
		t.Fatal(err)
	}
	err = p.Close(ctx(t, time.Minute))
	if err == nil || !strings.Contains(err.Error(), "rank 7 seq 0") || !strings.Contains(err.Error(), "gpuprof.nostream.batch.7") {
		t.Fatalf("Close = %v, want an error naming rank 7 seq 0 and its subject", err)
	}
	if p.Stats().Failed != 1 {
		t.Fatalf("stats %+v", p.Stats())
	}
	if err := p.Publish(ctx(t, time.Minute), it, false); err == nil {
		t.Fatal("publish after a failure")
	}
	// Another job's item is refused up front.
	q, _ := publish.New(c, publish.Config{Job: "other"})
	if err := q.Publish(ctx(t, time.Minute), it, false); err == nil || !strings.Contains(err.Error(), `"nostream"`) {
		t.Fatalf("wrong job: %v", err)
	}
}

// throttle is a TCP proxy between clients and the broker that passes at
// most rate bytes per second each way, and passes nothing while stalled:
// a slow broker as the collector sees it.
type throttle struct {
	ln      net.Listener
	target  string
	rate    int
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func startThrottle(t *testing.T, target string, rate int) *throttle {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	th := &throttle{ln: ln, target: target, rate: rate}
	t.Cleanup(func() {
		ln.Close()
		th.mu.Lock()
		defer th.mu.Unlock()
		for _, c := range th.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			th.mu.Lock()
			th.conns = append(th.conns, c, d)
			th.mu.Unlock()
			go th.pipe(d, c)
			go th.pipe(c, d)
		}
	}()
	return th
}

func (th *throttle) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 1024)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		for th.stalled.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
		time.Sleep(time.Duration(n) * time.Second / time.Duration(th.rate))
	}
}

// A slow broker (the link throttled to 512 KB/s each way, then stalled for
// three times the ack timeout) pushes back on the collector: Publish waits
// on the full window, the chunk bytes held in flight never exceed the
// window's bound, and nothing is dropped: every item is stored exactly
// once, the chunks retried during the stall included.
func TestThrottledBrokerWindowHolds(t *testing.T) {
	e, _, s := setup(t, broker.EmbeddedOptions{MaxPayload: 16 << 10}, "slow", broker.StreamOptions{})
	o := e.Options("slow collector")
	u, err := url.Parse(o.URLs[0])
	if err != nil {
		t.Fatal(err)
	}
	th := startThrottle(t, u.Host, 512<<10)
	o.URLs = []string{"nats://" + th.ln.Addr().String()}
	c, err := broker.Connect(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const window = 4
	p, err := publish.New(c, publish.Config{Job: "slow", Window: window, AckTimeout: 300 * time.Millisecond,
		Retry: broker.RetryPolicy{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond, Horizon: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	items := proftest.Rank("slow", 6, proftest.Shape{Kernels: 6, HostDepth: 4, Lines: 20, InstPer: 6, Pairs: 300, Objects: 20, RankUnique: 10, Sketches: true}, 3, 16)
	for i, it := range items {
		if i == len(items)/2 {
			th.stalled.Store(true)
			time.AfterFunc(900*time.Millisecond, func() { th.stalled.Store(false) })
		}
		if err := p.Publish(ctx(t, 2*time.Minute), it, i == len(items)-1); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx(t, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	t.Logf("through a throttled, stalling link: %+v", st)
	bound := window * c.ChunkPayload()
	if st.PeakInFlight != window || st.PeakInFlightBytes > bound || st.PeakInFlightBytes == 0 {
		t.Errorf("peak in flight %d chunks, %d bytes: want the window of %d full and at most %d bytes", st.PeakInFlight, st.PeakInFlightBytes, window, bound)
	}
	if st.Blocked == 0 {
		t.Error("Publish never waited for the window: the slow broker did not push back")
	}
	if st.Retries == 0 {
		t.Error("no chunk was retried across a stall three times the ack timeout")
	}
	if st.Failed != 0 || st.InFlight != 0 || st.InFlightBytes != 0 || st.Acked != st.Chunks {
		t.Errorf("after Close: %+v, want every chunk acknowledged and none held", st)
	}
	checkAll(t, stored(t, s, "slow"), items)
}
