package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/profile"
)

func TestValidateJob(t *testing.T) {
	for _, ok := range []string{"lj", "job-1_A", strings.Repeat("x", broker.MaxJobLen)} {
		if err := broker.ValidateJob(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for job, want := range map[string]string{
		"":                                      "empty",
		"a.b":                                   `'.' at byte 1`,
		"run*":                                  `'*' at byte 3`,
		"x>":                                    `'>' at byte 1`,
		"two words":                             `' ' at byte 3`,
		"a/b":                                   `'/' at byte 1`,
		"é":                                     `'é' at byte 0`,
		strings.Repeat("x", broker.MaxJobLen+1): "more than",
	} {
		err := broker.ValidateJob(job)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateJob(%q) = %v, want an error saying %s", job, err, want)
		}
	}
	for in, want := range map[string]string{"lmp.in.lj": "lmp_in_lj", "": "job", "a b>c": "a_b_c", "ok-1": "ok-1"} {
		if got := broker.SanitizeJob(in); got != want || broker.ValidateJob(got) != nil {
			t.Errorf("SanitizeJob(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSubjects(t *testing.T) {
	for _, tc := range []struct {
		subj string
		want broker.Subject
	}{
		{broker.BatchSubject("j", 12), broker.Subject{Kind: broker.SubjectBatch, Job: "j", Rank: 12}},
		{broker.DoneSubject("j", 0), broker.Subject{Kind: broker.SubjectDone, Job: "j"}},
		{broker.PartialSubject("j", 2, 7), broker.Subject{Kind: broker.SubjectPartial, Job: "j", Level: 2, Node: 7}},
		{broker.FinalSubject("j"), broker.Subject{Kind: broker.SubjectFinal, Job: "j"}},
		{broker.EndSubject("j"), broker.Subject{Kind: broker.SubjectEnd, Job: "j"}},
		{broker.TreeEndSubject("j"), broker.Subject{Kind: broker.SubjectEnd, Job: "j"}},
	} {
		got, err := broker.ParseSubject(tc.subj)
		if err != nil || got != tc.want {
			t.Errorf("ParseSubject(%q) = %+v, %v; want %+v", tc.subj, got, err, tc.want)
		}
	}
	for _, bad := range []string{"gpuprof.j.batch.-1", "gpuprof.j.batch.x", "gpuprof.j.partial.1", "other.j.final", "gpuprof.j.nope", "gpuprof.j.batch.99999999999", "gpuprof.j.tree.x", "gpuprof.j.tree"} {
		if _, err := broker.ParseSubject(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseSubject(%q) = %v, want an error naming it", bad, err)
		}
	}
	if broker.JobSubjects("j") != "gpuprof.j.>" || broker.StreamName("j") != "GPUPROF_j" || broker.TreeStreamName("j") != "GPUPROFTREE_j" {
		t.Error("stream layout changed")
	}
	// Every subject belongs to exactly one of the two streams.
	for _, subj := range []string{broker.BatchSubject("j", 3), broker.DoneSubject("j", 3), broker.EndSubject("j"),
		broker.PartialSubject("j", 1, 2), broker.FinalSubject("j"), broker.TreeEndSubject("j")} {
		n := 0
		for _, f := range append(broker.InputSubjects("j"), broker.TreeSubjects("j")...) {
			if subjectMatches(f, subj) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s is in %d of the streams' subject filters", subj, n)
		}
	}
}

// subjectMatches applies NATS wildcards ('*' one token, '>' the rest).
func subjectMatches(filter, subj string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subj, ".")
	for i, t := range f {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || t != "*" && t != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}

func start(t *testing.T, o broker.EmbeddedOptions) *broker.Embedded {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	e, err := broker.StartEmbeddedWith(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	if !strings.HasPrefix(e.URL, "nats://127.0.0.1:") {
		t.Fatalf("URL %s: want a loopback address", e.URL)
	}
	return e
}

func conn(t *testing.T, o broker.Options) *broker.Conn {
	t.Helper()
	c, err := broker.Connect(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// The stream has the layout's limits, and a retried publish (same message
// id) is stored once, before and after a broker restart from the same
// storage.
func TestStreamDedupAcrossRestart(t *testing.T) {
	e := start(t, broker.EmbeddedOptions{})
	c := conn(t, e.Options("test"))
	s, err := c.EnsureStream(ctx(t), "dedup", 1)
	if err != nil {
		t.Fatal(err)
	}
	// The job's limit is split: a quarter for the tree stream, so the
	// reducers' partials never compete with the batches for room.
	cfg := s.CachedInfo().Config
	if cfg.Discard != jetstream.DiscardNew || cfg.Storage != jetstream.FileStorage || cfg.Duplicates != broker.DefaultDuplicates || cfg.MaxBytes != broker.DefaultStreamMaxBytes/4*3 {
		t.Fatalf("stream config %+v", cfg)
	}
	ts, err := c.TreeStream(ctx(t), "dedup")
	if err != nil {
		t.Fatal(err)
	}
	if tc := ts.CachedInfo().Config; tc.MaxBytes != broker.DefaultStreamMaxBytes/4 || tc.Discard != jetstream.DiscardNew || tc.Storage != jetstream.FileStorage {
		t.Fatalf("tree stream config %+v", tc)
	}
	if c.MaxPayload() != 1<<20 || c.ChunkPayload() != 1<<20-broker.HeaderRoom {
		t.Fatalf("max payload %d, chunk payload %d", c.MaxPayload(), c.ChunkPayload())
	}
	js, err := c.NewJetStream(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(id string) *jetstream.PubAck {
		ack, _, err := broker.PublishRetry(ctx(t), js, &nats.Msg{Subject: broker.BatchSubject("dedup", 3), Data: []byte(id)}, id, broker.StreamName("dedup"), broker.DefaultRetry, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	if a := pub("dedup/3/0/0"); a.Duplicate {
		t.Fatal("first publish reported as duplicate")
	}
	if a := pub("dedup/3/0/0"); !a.Duplicate {
		t.Fatal("retried publish stored twice")
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects by itself to the same URL.
	if a := pub("dedup/3/0/0"); !a.Duplicate {
		t.Fatal("retried publish after a restart stored twice")
	}
	pub("dedup/3/1/0")
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
}

// A full stream refuses new messages (discard new) with an error that is
// retryable, so publishers back off rather than drop.
func TestFullStreamPushesBack(t *testing.T) {
	e := start(t, broker.EmbeddedOptions{})
	c := conn(t, e.Options("test"))
	s, err := c.EnsureStreamWith(ctx(t), "full", broker.StreamOptions{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		_, full = c.JS.Publish(ctx(t), broker.BatchSubject("full", 0), bytes.Repeat([]byte{1}, 8<<10))
	}
	if full == nil || !broker.Full(full) || !broker.Retryable(full) {
		t.Fatalf("publishing into a full stream: %v (full %v, retryable %v)", full, broker.Full(full), broker.Retryable(full))
	}
	if err := s.Purge(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.Publish(ctx(t), broker.BatchSubject("full", 0), []byte("again")); err != nil {
		t.Fatalf("after purge: %v", err)
	}
}

func TestEnsureStreamRejectsBadJob(t *testing.T) {
	e := start(t, broker.EmbeddedOptions{})
	c := conn(t, e.Options("test"))
	if _, err := c.EnsureStream(ctx(t), "bad.job", 1); err == nil || !strings.Contains(err.Error(), `'.' at byte 3`) {
		t.Fatalf("err = %v", err)
	}
}

func TestRetry(t *testing.T) {
	n := 0
	err := broker.Retry(context.Background(), broker.RetryPolicy{Min: time.Millisecond, Max: 2 * time.Millisecond, Horizon: time.Second}, func() error {
		n++
		if n < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d tries", err, n)
	}
	n = 0
	err = broker.Retry(context.Background(), broker.DefaultRetry, func() error { n++; return nats.ErrMaxPayload })
	if !errors.Is(err, nats.ErrMaxPayload) || n != 1 {
		t.Fatalf("a permanent error was retried: %v after %d tries", err, n)
	}
	// The server's "too many requests" (many reducer nodes publishing at
	// once) passes after a back-off.
	if busy := (&jetstream.APIError{Code: 429, ErrorCode: 10167, Description: "too many requests"}); !broker.Retryable(fmt.Errorf("publishing: %w", busy)) {
		t.Fatalf("%v is not retried", busy)
	}
	// A replica that cannot be placed because a peer is offline may be
	// placed once it is back; one that does not fit the storage never is.
	offline := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}
	noRoom := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, insufficient storage resources available"}
	if !broker.Retryable(fmt.Errorf("stream: %w", offline)) || broker.Retryable(noRoom) {
		t.Fatalf("placement: offline peer retried %v, no room retried %v", broker.Retryable(offline), broker.Retryable(noRoom))
	}
	err = broker.Retry(context.Background(), broker.RetryPolicy{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond, Horizon: 100 * time.Millisecond}, func() error { return nats.ErrNoResponders })
	if !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("horizon: %v", err)
	}
}

// The first rank to see a module uploads it; the others find it and skip.
func TestModules(t *testing.T) {
	e := start(t, broker.EmbeddedOptions{})
	a := conn(t, e.Options("rank 0"))
	b := conn(t, e.Options("rank 1"))
	cubin := bytes.Repeat([]byte("\x7fELF cubin"), 50000) // several object chunks
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	up, err := a.PutModule(ctx(t), "mods", h, broker.ModuleCubin, cubin)
	if err != nil || !up {
		t.Fatalf("first put: uploaded %v, %v", up, err)
	}
	if has, err := b.HasModule(ctx(t), "mods", h, broker.ModuleCubin); err != nil || !has {
		t.Fatalf("HasModule: %v %v", has, err)
	}
	up, err = b.PutModule(ctx(t), "mods", h, broker.ModuleCubin, cubin)
	if err != nil || up {
		t.Fatalf("second put: uploaded %v, %v", up, err)
	}
	got, err := b.GetModule(ctx(t), "mods", h, broker.ModuleCubin)
	if err != nil || !bytes.Equal(got, cubin) {
		t.Fatalf("GetModule: %d bytes, %v", len(got), err)
	}
	if _, err := b.PutModule(ctx(t), "mods", h, broker.ModuleSASS, []byte("parsed")); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GetModule(ctx(t), "mods", h, broker.ModuleSASS); string(got) != "parsed" {
		t.Fatalf("sass object %q", got)
	}
	if _, err := a.PutModule(ctx(t), "mods", h+1, broker.ModuleCubin, cubin); err == nil || !strings.Contains(err.Error(), "hash to") {
		t.Fatalf("cubin under the wrong hash: %v", err)
	}
	if _, err := a.GetModule(ctx(t), "mods", h+2, broker.ModuleCubin); !errors.Is(err, broker.ErrModuleNotFound) {
		t.Fatalf("missing module: %v", err)
	}
	if _, err := a.GetModule(ctx(t), "mods", h, "Bad.Kind"); err == nil || !strings.Contains(err.Error(), `'B' at byte 0`) {
		t.Fatalf("bad kind: %v", err)
	}
	if err := a.DeleteJob(ctx(t), "mods"); err != nil {
		t.Fatal(err)
	}
}

// With credentials configured, a client without them is refused.
func TestAuthRequired(t *testing.T) {
	e := start(t, broker.EmbeddedOptions{User: "gpuprof", Password: "s3cret"})
	if _, err := broker.Connect(broker.Options{URLs: []string{e.URL}, ConnectTimeout: 2 * time.Second}); err == nil {
		t.Fatal("a client without credentials connected")
	}
	if _, err := broker.Connect(broker.Options{URLs: []string{e.URL}, User: "gpuprof", Password: "wrong", ConnectTimeout: 2 * time.Second}); err == nil {
		t.Fatal("a client with a wrong password connected")
	}
	c := conn(t, e.Options("ok"))
	if _, err := c.EnsureStream(ctx(t), "auth", 1); err != nil {
		t.Fatal(err)
	}
}

func TestConnectOptions(t *testing.T) {
	if _, err := broker.Connect(broker.Options{}); err == nil {
		t.Fatal("no URL accepted")
	}
	if _, err := broker.Connect(broker.Options{URLs: []string{"nats://127.0.0.1:1"}, CertFile: "c.pem"}); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("certificate without key: %v", err)
	}
	e := start(t, broker.EmbeddedOptions{})
	// A comma-separated list, as --nats takes it, with a dead server first.
	c := conn(t, broker.Options{URLs: []string{"nats://127.0.0.1:1, " + e.URL}, Name: "list"})
	if !c.NC.IsConnected() {
		t.Fatal("not connected")
	}
}

// A JetStream API request whose answer never comes (a server that takes
// the request and drops it) costs one try of APITimeout, not the caller's
// whole deadline: the lookup is tried again until ctx ends, and the error
// says so.
func TestRetryAPILostAnswers(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(srv.Shutdown)
	c := conn(t, broker.Options{URLs: []string{srv.ClientURL()}})
	// Something answers nothing on the JetStream API subjects, so requests
	// neither get a reply nor "no responders".
	var asked atomic.Int32
	sub, err := c.NC.Subscribe("$JS.API.>", func(*nats.Msg) { asked.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	old := broker.APITimeout
	broker.APITimeout = 100 * time.Millisecond
	defer func() { broker.APITimeout = old }()
	cctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = c.Stream(cctx, "lost")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "while retrying") {
		t.Fatalf("err %v, want the deadline after retries", err)
	}
	if n := asked.Load(); n < 3 {
		t.Fatalf("the lookup was asked %d times in %v, want several tries", n, time.Since(t0))
	}
}
