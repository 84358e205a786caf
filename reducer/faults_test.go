package reducer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
	"gpuprof/reducer"
)

// Out-of-order, duplicated, replayed, corrupt, truncated, foreign and
// mislabelled batches: each is merged once, ignored or rejected with a log
// line naming rank and seq, and everything else merges. The one corrupt
// item (its only copy) leaves its rank incomplete, named with the missing
// batch.
func TestBadInputs(t *testing.T) {
	e := startBrokerWith(t, broker.EmbeddedOptions{MaxPayload: 16 << 10})
	c := connect(t, e, "reducer")
	const job = "bad"
	ensureStream(t, c, job)
	pay := c.ChunkPayload()
	items := jobItems(job, 11, medium, 4, 3)
	id := 0
	pub := func(subj string, data []byte) {
		id++
		rawPublish(t, c, job, subj, data, fmt.Sprintf("inject-%d", id))
	}
	pubItem := func(it *profile.Profile, done bool) {
		r := it.SortedRanks()[0]
		subj := broker.BatchSubject(job, r)
		if done {
			subj = broker.DoneSubject(job, r)
		}
		for _, ch := range chunksOf(t, it, done, pay) {
			pub(subj, ch)
		}
	}
	if n := len(chunksOf(t, items[0][0], false, pay)); n < 2 {
		t.Fatalf("items take %d chunk(s); the test wants several", n)
	}

	// Rank 0: done first, data items in reverse order; then a batch
	// beyond its batch count.
	pubItem(items[0][3], true)
	for s := 2; s >= 0; s-- {
		pubItem(items[0][s], false)
	}
	pubItem(proftest.Item(job, 11, medium, 0, 5, false, 0), false)
	// Rank 1: every item stored twice (different message ids), an old
	// batch replayed, a foreign job's batch on its subject.
	// (A node stops reading once all its ranks are sealed, so these come
	// before rank 1's done item.)
	for _, it := range items[1][:3] {
		pubItem(it, false)
		pubItem(it, false)
	}
	pubItem(items[1][0], false)
	for _, ch := range chunksOf(t, proftest.Item("otherjob", 11, medium, 1, 0, false, 0), false, pay) {
		pub(broker.BatchSubject(job, 1), ch)
	}
	pubItem(items[1][3], true)
	pubItem(items[1][3], true)
	// Rank 2: item 1's only copy corrupt in its last chunk.
	for i, it := range items[2] {
		cs := chunksOf(t, it, i == 3, pay)
		if i == 1 {
			last := cs[len(cs)-1]
			last[len(last)-7] ^= 0xff
		}
		subj := broker.BatchSubject(job, 2)
		if i == 3 {
			subj = broker.DoneSubject(job, 2)
		}
		for _, ch := range cs {
			pub(subj, ch)
		}
	}
	// Rank 3: a truncated copy of its done item before the good one; its
	// item 0 on rank 2's subject; garbage on its subject.
	done3 := chunksOf(t, items[3][3], true, pay)
	pub(broker.DoneSubject(job, 3), done3[0][:len(done3[0])/2])
	pub(broker.DoneSubject(job, 3), done3[0][:20])
	for _, ch := range chunksOf(t, items[3][0], false, pay) {
		pub(broker.BatchSubject(job, 2), ch)
	}
	pub(broker.BatchSubject(job, 3), []byte("definitely not a batch, but long enough for a header........"))
	for i, it := range items[3] {
		pubItem(it, i == 3)
	}

	log, lb := newLogger(t)
	cfg := treeConfig(t, c, job, 4, 2, log)
	// Long enough that the good ranks finish on a loaded machine under
	// -race; rank 2 then times out as intended.
	cfg.RankTimeout = 10 * time.Second
	cfg.ChildGrace = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, st, err := reducer.RunTree(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	good := [][]*profile.Profile{items[0], items[1], {items[2][0], items[2][2], items[2][3]}, items[3]}
	want := expectSealed(t, job, good, map[int32]string{2: "rank timeout: batches missing (2 of 3 merged; first missing 1)"})
	sameProfile(t, got, want)
	if !slices.Equal(st.Incomplete, []int32{2}) {
		t.Errorf("incomplete ranks %v, want [2]", st.Incomplete)
	}
	logs := lb.String()
	for _, w := range []string{
		`rank=0 seq=5`,              // beyond the batch count
		`rank=1 seq=0`,              // replayed / foreign
		`batch of job \"otherjob\"`, // foreign
		`rank=2 seq=1`,              // corrupt
		`checksum mismatch`,         // corrupt
		`rank=3 seq=3`,              // truncated done item
		`header names rank 3 on the subject of rank 2`,
		`bad magic`,
		`rank=2 reason="rank timeout: batches missing`,
	} {
		if !strings.Contains(logs, w) {
			t.Errorf("no log line with %s", w)
		}
	}
	var dups, rejected uint64
	for _, ns := range st.Nodes {
		dups += ns.Duplicates
		rejected += ns.Rejected
	}
	if dups == 0 || rejected < 6 {
		t.Errorf("%d duplicates and %d rejected inputs counted", dups, rejected)
	}
	if t.Failed() {
		t.Log(logs)
	}
}

// A rank that never sends its done item and one that sends nothing are
// named incomplete after the rank timeout; all else is merged.
func TestRankNeverDone(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "reducer")
	const job = "nodone"
	ensureStream(t, c, job)
	items := jobItems(job, 3, proftest.Small, 8, 2)
	items[5] = items[5][:2] // no done item
	items[6] = nil          // nothing at all
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.RankTimeout = 5 * time.Second
	cfg.ChildGrace = time.Second
	var last reducer.Progress
	var mu sync.Mutex
	cfg.OnProgress = func(p reducer.Progress) { mu.Lock(); last = p; mu.Unlock() }
	pc, sc, ec := runTree(t, cfg)
	publishRanks(t, e, job, items, 8)
	if err := <-ec; err != nil {
		t.Fatal(err)
	}
	got, st := <-pc, <-sc
	want := expectSealed(t, job, items, map[int32]string{5: "rank timeout: no done item (2 batches merged)", 6: "rank timeout: no data"})
	sameProfile(t, got, want)
	if !slices.Equal(st.Incomplete, []int32{5, 6}) || got.Ranks[6] == nil || got.Ranks[6].Incomplete != "rank timeout: no data" {
		t.Fatalf("incomplete %v", st.Incomplete)
	}
	mu.Lock()
	defer mu.Unlock()
	if last.RanksTotal != 8 || last.RanksDone != 8 || last.RanksIncomplete != 2 || last.BatchesMerged != 6*3+2 {
		t.Fatalf("last progress %+v", last)
	}
}

// The launcher's end signal starts the clock of a leaf none of whose ranks
// ever published.
func TestEndSignal(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "reducer")
	const job = "endsig"
	ensureStream(t, c, job)
	items := jobItems(job, 3, proftest.Small, 8, 1)
	for r := 4; r < 8; r++ {
		items[r] = nil
	}
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.RankTimeout = 500 * time.Millisecond
	cfg.ChildGrace = 5 * time.Second // long: the leaf itself must time its ranks out
	pc, sc, ec := runTree(t, cfg)
	publishRanks(t, e, job, items, 8)
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := reducer.SignalEnd(ctx, c, job, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-ec; err != nil {
		t.Fatal(err)
	}
	got, st := <-pc, <-sc
	reasons := map[int32]string{}
	for r := int32(4); r < 8; r++ {
		reasons[r] = "rank timeout: no data"
	}
	sameProfile(t, got, expectSealed(t, job, items, reasons))
	if !slices.Equal(st.Incomplete, []int32{4, 5, 6, 7}) {
		t.Fatalf("incomplete %v", st.Incomplete)
	}
	// Anyone can wait for the final profile on the broker.
	fin, err := reducer.WaitFinal(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	sameProfile(t, fin, got)
}

// runNodes runs each node of the plan with RunNode, as separate processes
// would, each with its own connection and context, so tests can kill and
// restart single nodes.
type nodeRunner struct {
	t    *testing.T
	e    *broker.Embedded
	cfg  reducer.Config
	mu   sync.Mutex
	runs map[reducer.NodeName]*nodeRun
}

type nodeRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    *reducer.NodeResult
	err    error
}

func (nr *nodeRunner) start(name reducer.NodeName) *nodeRun {
	c := connect(nr.t, nr.e, "node "+name.String())
	cfg := nr.cfg
	cfg.Conn, cfg.Node = c, name
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	run := &nodeRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		run.res, run.err = reducer.RunNode(ctx, cfg)
	}()
	nr.mu.Lock()
	nr.runs[name] = run
	nr.mu.Unlock()
	return run
}

func (nr *nodeRunner) kill(name reducer.NodeName) {
	nr.mu.Lock()
	run := nr.runs[name]
	nr.mu.Unlock()
	run.cancel()
	<-run.done
	if !errors.Is(run.err, context.Canceled) {
		nr.t.Fatalf("killed node %v: %v", name, run.err)
	}
}

func partials(t *testing.T, c *broker.Conn, job string, level, node int) uint64 {
	s, err := c.TreeStream(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(broker.PartialSubject(job, level, node)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Reducer nodes killed mid-merge (a leaf holding durable partial state and
// unacknowledged inputs, and the root) and restarted: the final profile is
// byte-identical to the in-process merge.
func TestKillAndRestart(t *testing.T) {
	e := startBrokerWith(t, broker.EmbeddedOptions{MaxPayload: 16 << 10})
	c := connect(t, e, "test")
	const job = "kill"
	ensureStream(t, c, job)
	items := jobItems(job, 5, medium, 8, 6)
	log, lb := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.PartialInterval = 50 * time.Millisecond
	nr := &nodeRunner{t: t, e: e, cfg: cfg, runs: map[reducer.NodeName]*nodeRun{}}
	for _, n := range cfg.Tree.Nodes() {
		nr.start(n.Name)
	}
	leaf, root := reducer.NodeName{Level: 0, Index: 0}, reducer.NodeName{Level: 1, Index: 0}
	first := make([][]*profile.Profile, len(items))
	rest := make([][]*profile.Profile, len(items))
	for r := range items {
		first[r], rest[r] = items[r][:3], items[r][3:]
	}
	publishRanks(t, e, job, first, 8)
	// A partial counts once all its chunks are stored (the leaf says so):
	// killed between its first chunk and its last, the leaf has nothing
	// of its own to resume from, and the test failed now and then so.
	waitFor(t, "a stored partial of leaf 0.0 and one of the root's inputs", 30*time.Second, func() bool {
		stored := false
		for _, l := range strings.Split(lb.String(), "\n") {
			stored = stored || strings.Contains(l, `msg="reducer: partial stored"`) && strings.Contains(l, " node=0.0 ")
		}
		return stored && partials(t, c, job, 0, 1) > 0
	})
	nr.kill(leaf)
	nr.kill(root)
	// The ranks go on while the nodes are down; some of it reaches the
	// living leaf, all of it waits in the stream for the dead one.
	publishRanks(t, e, job, rest, 8)
	nr.start(leaf)
	r := nr.start(root)
	<-r.done
	if r.err != nil {
		t.Fatal(r.err)
	}
	sameProfile(t, r.res.Profile, flatMerge(t, job, items))
	nr.mu.Lock()
	lr := nr.runs[leaf]
	nr.mu.Unlock()
	<-lr.done
	if lr.err != nil || !lr.res.Stats.Restored {
		t.Fatalf("restarted leaf: %v, restored %v", lr.err, lr.res != nil && lr.res.Stats.Restored)
	}
	if !strings.Contains(lb.String(), "resumed from own partial") {
		t.Error("the restarted leaf did not resume from its partial")
	}
	// Running the root again returns the published final profile.
	again := nr.start(root)
	<-again.done
	if again.err != nil || !again.res.Stats.Restored {
		t.Fatalf("root run again: %v", again.err)
	}
	sameProfile(t, again.res.Profile, r.res.Profile)
}

// The embedded broker restarts (same storage) in the middle of a run: no
// batch is lost or merged twice.
func TestBrokerRestartMidRun(t *testing.T) {
	e := startBrokerWith(t, broker.EmbeddedOptions{MaxPayload: 16 << 10})
	c := connect(t, e, "reducer")
	const job = "brestart"
	ensureStream(t, c, job)
	items := jobItems(job, 9, medium, 8, 8)
	log, lb := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.PartialInterval = 100 * time.Millisecond
	cfg.AckTimeout = 2 * time.Second
	// The tree's own log, last lines, when it did not end: what each node
	// waited for after the restart.
	defer func() {
		if t.Failed() {
			l := lb.String()
			t.Logf("reducer log (last 8 KB):\n%s", l[max(0, len(l)-8<<10):])
		}
	}()
	pc, sc, ec := runTree(t, cfg)
	first := make([][]*profile.Profile, len(items))
	rest := make([][]*profile.Profile, len(items))
	for r := range items {
		first[r], rest[r] = items[r][:4], items[r][4:]
	}
	publishRanks(t, e, job, first, 8)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(50 * time.Millisecond)
		if err := e.Restart(); err != nil {
			t.Error(err)
		}
	}()
	publishRanks(t, e, job, rest, 8)
	wg.Wait()
	select {
	case err := <-ec:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(100 * time.Second):
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("the tree did not end within 100 s of the last item; goroutines:\n%s", b.String())
	}
	got, st := <-pc, <-sc
	sameProfile(t, got, flatMerge(t, job, items))
	if st.ItemsMerged != 8*9 {
		t.Fatalf("%d items merged, want %d (each once)", st.ItemsMerged, 8*9)
	}
}

// A node whose whole subtree never reports is given up on at its deadline:
// its ranks are named incomplete, with what the other children sent kept.
func TestDeadChild(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "test")
	const job = "deadchild"
	ensureStream(t, c, job)
	items := jobItems(job, 2, proftest.Small, 8, 2)
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.RankTimeout = 300 * time.Millisecond
	cfg.ChildGrace = 300 * time.Millisecond
	nr := &nodeRunner{t: t, e: e, cfg: cfg, runs: map[reducer.NodeName]*nodeRun{}}
	nr.start(reducer.NodeName{Level: 0, Index: 0}) // leaf 0.1 never runs
	root := nr.start(reducer.NodeName{Level: 1, Index: 0})
	publishRanks(t, e, job, items, 8)
	<-root.done
	if root.err != nil {
		t.Fatal(root.err)
	}
	reasons := map[int32]string{}
	for r := int32(4); r < 8; r++ {
		reasons[r] = "reducer node 0.1 did not finish"
	}
	sameProfile(t, root.res.Profile, expectSealed(t, job, items[:4], reasons))
}

// The server cuts the reducers' connection mid-run (as it does to a slow
// client): deliveries in flight are lost to the client, and come back at
// once because the nodes recreate their consumers on reconnecting, not
// after AckWait.
func TestConnectionCutMidRun(t *testing.T) {
	e := startBrokerWith(t, broker.EmbeddedOptions{MaxPayload: 16 << 10})
	c := connect(t, e, "reducer")
	const job = "cut"
	ensureStream(t, c, job)
	items := jobItems(job, 4, medium, 8, 6)
	log, lb := newLogger(t)
	cfg := treeConfig(t, c, job, 8, 4, log)
	cfg.AckWait = 10 * time.Minute // a redelivery by AckWait would fail the test's deadline
	cfg.PartialInterval = 100 * time.Millisecond
	ready := make(chan reducer.NodeName, 10)
	cfg.OnReady = func(n reducer.NodeName) { ready <- n }
	pc, _, ec := runTree(t, cfg)
	for range cfg.Tree.Nodes() {
		<-ready
	}
	first := make([][]*profile.Profile, len(items))
	rest := make([][]*profile.Profile, len(items))
	for r := range items {
		first[r], rest[r] = items[r][:3], items[r][3:]
	}
	publishRanks(t, e, job, first, 8)
	id, err := c.NC.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Server().DisconnectClientByID(id); err != nil {
		t.Fatal(err)
	}
	publishRanks(t, e, job, rest, 8)
	select {
	case err := <-ec:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the tree did not finish after its connection was cut")
	}
	sameProfile(t, <-pc, flatMerge(t, job, items))
	if !strings.Contains(lb.String(), "reconnected; recreating the consumer") {
		t.Error("no node noticed the reconnect")
	}
}

// A job whose streams are far smaller than its data (256 KiB for about
// 1 MB of batches): the input stream fills, the publishers are held back
// (the broker refuses, they retry), the leaf keeps storing its partials in
// the tree stream, which the batches cannot fill, and purges what they
// cover, so the publishers go on; every batch is merged once.
func TestFullInputStream(t *testing.T) {
	e := startBroker(t)
	c := connect(t, e, "test")
	const job = "fullstream"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.EnsureStreamWith(ctx, job, broker.StreamOptions{MaxBytes: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	small := proftest.Shape{Kernels: 2, HostDepth: 2, Lines: 4, InstPer: 2, Pairs: 20, Objects: 2, RankUnique: 10}
	items := jobItems(job, 13, small, 4, 120)
	log, _ := newLogger(t)
	cfg := treeConfig(t, c, job, 4, 4, log)
	cfg.PartialInterval = 50 * time.Millisecond
	pc, _, ec := runTree(t, cfg)
	stats := publishRanks(t, e, job, items, 8)
	if err := <-ec; err != nil {
		t.Fatal(err)
	}
	sameProfile(t, <-pc, flatMerge(t, job, items))
	var full, bytes uint64
	for _, s := range stats {
		full += s.Full
		bytes += s.Bytes
	}
	if bytes < 512<<10 || full == 0 {
		t.Errorf("%d bytes published, %d publishes refused by the full stream: the stream never filled", bytes, full)
	}
	t.Logf("%d bytes published through a 192 KiB input stream; %d publishes refused while it was full", bytes, full)
}
