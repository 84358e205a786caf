package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/broker/brokertest"
	"gpuprof/profile"
)

// The generated permissions, checked on a real 3-node cluster with TLS: a
// collector stores its job's batches and modules and nothing else; a
// reducer manages its job and nothing else; clients without credentials,
// with unknown keys, with the wrong CA, without a client certificate from
// the cluster's CA, or dialling a name the certificates do not carry are
// refused.
//
// The same cluster then serves testClusterLeaderKilled's checks, which
// saves starting another.
func TestCluster(t *testing.T) {
	cl := brokertest.Start(t, brokertest.Options{Jobs: []string{"jobA", "jobB", "kill", "small", "watch"}, VerifyClients: true,
		JobOptions: map[string]broker.JobConfigOptions{"small": {MaxFileStore: 64 << 20}}})
	t.Run("permissions", func(t *testing.T) { testClusterPermissions(t, cl) })
	t.Run("account limit", func(t *testing.T) { testClusterAccountLimit(t, cl) })
	t.Run("leader killed", func(t *testing.T) { testClusterLeaderKilled(t, cl) })
	t.Run("consumer leader watch", func(t *testing.T) { testConsumerLeaderWatch(t, cl) })
}

func testClusterPermissions(t *testing.T, cl *brokertest.Cluster) {
	cx := ctx(t)

	red := conn(t, cl.ClientOptions("jobA", broker.RoleReducer, "reducer A"))
	if _, err := red.EnsureStream(cx, "jobA", 3); err != nil {
		t.Fatal(err)
	}
	if err := red.EnsureModuleBucket(cx, "jobA", 3); err != nil {
		t.Fatal(err)
	}
	if err := red.EnsureModuleBucket(cx, "jobA", 3); err != nil {
		t.Fatalf("second EnsureModuleBucket: %v", err)
	}
	s, err := red.Stream(cx, "jobA")
	if err != nil {
		t.Fatal(err)
	}
	if info := s.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream replicas: config %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}

	col := conn(t, cl.ClientOptions("jobA", broker.RoleCollector, "collector A"))
	js, err := col.NewJetStream(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// What a collector does is allowed: batches, done items, modules.
	for _, subj := range []string{broker.BatchSubject("jobA", 0), broker.DoneSubject("jobA", 0)} {
		if _, _, err := broker.PublishRetry(cx, js, &nats.Msg{Subject: subj, Data: []byte("x")}, subj, broker.StreamName("jobA"), broker.DefaultRetry, nil); err != nil {
			t.Fatalf("collector publish to %s: %v (async: %v)", subj, err, col.AsyncErr())
		}
	}
	cubin := bytes.Repeat([]byte("\x7fELF module"), 30000)
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	if up, err := col.PutModule(cx, "jobA", h, broker.ModuleCubin, cubin); err != nil || !up {
		t.Fatalf("collector module upload: %v %v (async: %v)", up, err, col.AsyncErr())
	}
	// A second upload of the same module replaces it (ranks racing), which
	// purges the old chunks: also allowed.
	col2 := conn(t, cl.ClientOptions("jobA", broker.RoleCollector, "collector A2"))
	if _, err := col2.PutModule(cx, "jobA", h, broker.ModuleSASS, []byte("parsed")); err != nil {
		t.Fatalf("second collector: %v (async %v)", err, col2.AsyncErr())
	}
	if got, err := red.GetModule(cx, "jobA", h, broker.ModuleCubin); err != nil || !bytes.Equal(got, cubin) {
		t.Fatalf("reducer reads the module: %d bytes, %v (async %v)", len(got), err, red.AsyncErr())
	}
	// A rank waiting for a listing another rank stored reads it (the
	// object store reads chunks through an ordered consumer on the module
	// stream); denied, the read was retried until the rank's structure
	// bound and three of four mpirun ranks lost their kernels' structure.
	readCx, cancelRead := context.WithTimeout(cx, 5*time.Second)
	got, err := col.GetModule(readCx, "jobA", h, broker.ModuleSASS)
	cancelRead()
	if err != nil || string(got) != "parsed" {
		t.Fatalf("a collector reads the listing another stored: %q, %v (async %v)", got, err, col.AsyncErr())
	}

	// What a collector must not do: other jobs' subjects, reducer-only
	// subjects, stream management, reading the job's data.
	for _, subj := range []string{
		broker.BatchSubject("jobB", 0),
		broker.PartialSubject("jobA", 0, 0),
		broker.FinalSubject("jobA"),
		broker.EndSubject("jobA"),
		"$JS.API.STREAM.PURGE." + broker.StreamName("jobA"),
		"$JS.API.STREAM.DELETE." + broker.StreamName("jobA"),
		"$JS.API.CONSUMER.CREATE." + broker.StreamName("jobA"),
	} {
		expectViolation(t, col, "publish", subj, func() error { return col.NC.Publish(subj, []byte("forged")) })
	}
	expectViolation(t, col, "subscription", "gpuprof.jobA.>", func() error {
		_, err := col.NC.Subscribe("gpuprof.jobA.>", func(*nats.Msg) {})
		return err
	})
	expectViolation(t, col, "subscription", "reducer inbox", func() error {
		_, err := col.NC.Subscribe(broker.InboxPrefix("jobA", broker.RoleReducer)+".>", func(*nats.Msg) {})
		return err
	})
	// A refused request gets no answer: a short deadline.
	shortCx, cancel := context.WithTimeout(cx, time.Second)
	err = col.DeleteJob(shortCx, "jobA")
	cancel()
	if err == nil {
		t.Fatal("a collector deleted its job's stream")
	}
	// A JetStream publish to another job's subject is refused: no ack, and
	// the connection's last error names the violation.
	shortCx, cancel = context.WithTimeout(cx, 1500*time.Millisecond)
	_, _, err = broker.PublishRetry(shortCx, js, &nats.Msg{Subject: broker.BatchSubject("jobB", 1), Data: []byte("x")}, "forged", broker.StreamName("jobB"), broker.DefaultRetry, nil)
	cancel()
	if err == nil || col.AsyncErr() == nil || !strings.Contains(strings.ToLower(col.AsyncErr().Error()), "permissions violation") {
		t.Fatalf("JetStream publish to another job: %v (async %v)", err, col.AsyncErr())
	}

	// A reducer of job B cannot reach job A's stream (another account,
	// and not in its permissions).
	redB := conn(t, cl.ClientOptions("jobB", broker.RoleReducer, "reducer B"))
	shortCx, cancel = context.WithTimeout(cx, time.Second)
	_, err = redB.JS.Stream(shortCx, broker.StreamName("jobA"))
	cancel()
	if err == nil {
		t.Fatal("job B's reducer sees job A's stream")
	}
	if _, err := redB.EnsureStream(cx, "jobB", 3); err != nil {
		t.Fatalf("job B's reducer on its own job: %v", err)
	}
	// Job A's stream holds exactly what its collector was allowed to store.
	info, err := s.Info(cx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("job A's stream holds %d messages, want the collector's 2", info.State.Msgs)
	}

	// Authentication and TLS.
	base := cl.ClientOptions("jobA", broker.RoleCollector, "refused")
	base.ConnectTimeout = 3 * time.Second
	refuse := func(what string, o broker.Options, want ...string) {
		t.Helper()
		c, err := broker.Connect(o)
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected", what)
		}
		for _, w := range want {
			if strings.Contains(strings.ToLower(err.Error()), w) {
				t.Logf("%s: refused: %v", what, err)
				return
			}
		}
		t.Fatalf("%s: error %q does not say %q", what, err, want)
	}
	noCreds := base
	noCreds.NKeySeedFile = ""
	refuse("no credentials", noCreds, "authorization violation")

	unknown := base
	otherDir := t.TempDir()
	jc, err := broker.WriteJobConfig(otherDir, "jobA", broker.JobConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unknown.NKeySeedFile = jc.SeedFiles[broker.RoleCollector]
	refuse("a key the servers do not know", unknown, "authorization violation")

	otherCA, err := brokertest.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := base
	wrongCA.CAFile = filepath.Join(t.TempDir(), "other-ca.pem")
	if err := otherCA.WriteFiles(wrongCA.CAFile, "", "", nil); err != nil {
		t.Fatal(err)
	}
	refuse("a CA that did not sign the servers' certificates", wrongCA, "unknown authority", "x509")

	// The servers verify clients too: no client certificate, or one from
	// another CA, is refused.
	noCert := base
	noCert.CertFile, noCert.KeyFile = "", ""
	// With TLS 1.3 the client may learn of the refusal only after its
	// handshake; and it offers no certificate from a CA the server does
	// not accept.
	certRefused := []string{"certificate required", "closed by remote after tls handshake", "bad certificate", "unknown certificate authority", "connection reset"}
	refuse("no client certificate", noCert, certRefused...)
	foreignCert := base
	d := t.TempDir()
	foreignCert.CertFile, foreignCert.KeyFile = filepath.Join(d, "c.pem"), filepath.Join(d, "k.pem")
	if err := otherCA.WriteFiles(filepath.Join(d, "ca.pem"), foreignCert.CertFile, foreignCert.KeyFile, []string{"intruder"}); err != nil {
		t.Fatal(err)
	}
	refuse("a client certificate from another CA", foreignCert, certRefused...)

	noCA := base
	noCA.CAFile = ""
	refuse("the system roots only", noCA, "unknown authority", "x509")

	// The certificates name localhost only: dialling the same server by
	// address fails hostname verification.
	byIP := base
	byIP.URLs = []string{fmt.Sprintf("tls://127.0.0.1:%d", cl.Port(0))}
	refuse("a name the certificate does not carry", byIP, "not 127.0.0.1", "doesn't contain any ip sans", "x509")
}

// expectViolation runs f and waits for the server to report a permissions
// violation on the connection for what it did.
func expectViolation(t *testing.T, c *broker.Conn, kind, what string, f func() error) {
	t.Helper()
	errs := make(chan error, 16)
	prev := c.NC.Opts.AsyncErrorCB
	c.NC.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		prev(nc, sub, err)
		select {
		case errs <- err:
		default:
		}
	})
	defer c.NC.SetErrorHandler(prev)
	if err := f(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			return
		}
		t.Fatalf("%s %s: %v", kind, what, err)
	}
	c.NC.Flush()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation for "+kind) {
				return
			}
		case <-timeout:
			t.Fatalf("%s %s: no permissions violation reported", kind, what)
		}
	}
}

// A job's stream with 3 replicas keeps every message and its duplicate
// detection when the node leading it is killed mid-stream: publishes retry
// across the election and each message is stored exactly once.
func testClusterLeaderKilled(t *testing.T, cl *brokertest.Cluster) {
	cx := ctx(t)
	red := conn(t, cl.ClientOptions("kill", broker.RoleReducer, "reducer"))
	s, err := red.EnsureStream(cx, "kill", 3)
	if err != nil {
		t.Fatal(err)
	}
	col := conn(t, cl.ClientOptions("kill", broker.RoleCollector, "collector"))
	js, err := col.NewJetStream(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pub := func(i int) {
		t.Helper()
		id := fmt.Sprintf("kill/0/%d/0", i)
		m := &nats.Msg{Subject: broker.BatchSubject("kill", 0), Data: []byte(id)}
		if _, _, err := broker.PublishRetry(cx, js, m, id, broker.StreamName("kill"), broker.DefaultRetry, nil); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := 0; i < 50; i++ {
		pub(i)
	}
	info, err := s.Info(cx)
	if err != nil {
		t.Fatal(err)
	}
	leader := cl.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("stream leader %q is not a node of the cluster", info.Cluster.Leader)
	}
	cl.Kill(leader)
	killed := time.Now()
	// Retries of messages already stored and new ones, across the election.
	for i := 40; i < 100; i++ {
		pub(i)
	}
	err = broker.RetryAPI(cx, broker.DefaultRetry, func(cx context.Context) error {
		var err error
		info, err = s.Info(cx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("60 publishes across the election in %v", time.Since(killed).Round(time.Millisecond))
	if info.State.Msgs != 100 || info.Cluster.Leader == cl.Name(leader) {
		t.Fatalf("after killing leader %s: %d messages (want 100), leader %s", cl.Name(leader), info.State.Msgs, info.Cluster.Leader)
	}
	// The killed node comes back on its store and catches up.
	cl.Restart(leader)
	var seen []string
	var cons jetstream.Consumer
	err = broker.RetryAPI(cx, broker.DefaultRetry, func(cx context.Context) error {
		var err error
		cons, err = s.OrderedConsumer(cx, jetstream.OrderedConsumerConfig{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for len(seen) < 100 {
		// The restarted node may still be catching up: transient errors
		// are retried, as the reducers do.
		var m jetstream.Msg
		err := broker.Retry(cx, broker.DefaultRetry, func() error {
			var err error
			m, err = cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			return err
		})
		if err != nil {
			t.Fatalf("reading back after %d: %v", len(seen), err)
		}
		seen = append(seen, string(m.Data()))
	}
	for i, id := range seen {
		if want := fmt.Sprintf("kill/0/%d/0", i); id != want {
			t.Fatalf("message %d is %s, want %s", i, id, want)
		}
	}
}

func TestWriteJobConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	jc, err := broker.WriteJobConfig(dir, "perm", broker.JobConfigOptions{MaxFileStore: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{dir, jc.AccountsFile, jc.SeedFiles[broker.RoleCollector], jc.SeedFiles[broker.RoleReducer]} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: want user-only", f, st.Mode().Perm())
		}
	}
	conf, _ := os.ReadFile(jc.AccountsFile)
	for _, want := range []string{"GPUPROF_perm: {", "max_file: 1073741824", jc.PublicKeys[broker.RoleCollector], jc.PublicKeys[broker.RoleReducer], `"gpuprof.perm.batch.*"`, `"$O.GPUPROF_MOD_perm.>"`} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("accounts file lacks %s:\n%s", want, conf)
		}
	}
	for _, seed := range jc.SeedFiles {
		if b, _ := os.ReadFile(seed); !bytes.HasPrefix(b, []byte("SU")) {
			t.Errorf("%s is not a user seed", seed)
		}
	}
	// Generating again replaces the keys (revocation on reload).
	jc2, err := broker.WriteJobConfig(dir, "perm", broker.JobConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if jc2.PublicKeys[broker.RoleCollector] == jc.PublicKeys[broker.RoleCollector] {
		t.Error("regenerated config kept the old key")
	}
	if _, err := broker.WriteJobConfig(dir, "bad.job", broker.JobConfigOptions{}); err == nil || !strings.Contains(err.Error(), `'.' at byte 3`) {
		t.Errorf("bad job: %v", err)
	}
	if _, err := broker.JobPermissions("perm", "admin"); err == nil || !strings.Contains(err.Error(), `unknown role "admin"`) {
		t.Errorf("unknown role: %v", err)
	}
	// Collector permissions stay within the job's batch and done subjects
	// and its module bucket.
	p, _ := broker.JobPermissions("perm", broker.RoleCollector)
	for _, s := range p.Publish {
		if !strings.Contains(s, "perm") || strings.Contains(s, "partial") || strings.Contains(s, ".final") || strings.Contains(s, "gpuprof.perm.>") {
			t.Errorf("collector may publish to %s", s)
		}
	}
}

// A job account's storage bound (nats-config --max-file-store) holds, and
// a stream's byte limit counts once per replica against it, as
// docs/cluster.md tells administrators.
func testClusterAccountLimit(t *testing.T, cl *brokertest.Cluster) {
	cx := ctx(t)
	red := conn(t, cl.ClientOptions("small", broker.RoleReducer, "reducer"))
	if _, err := red.EnsureStreamWith(cx, "small", broker.StreamOptions{Replicas: 3, MaxBytes: 16 << 20}); err != nil {
		t.Fatalf("3 x 16 MiB in a 64 MiB account: %v", err)
	}
	_, err := red.EnsureStreamWith(cx, "small", broker.StreamOptions{Replicas: 3, MaxBytes: 32 << 20})
	if err == nil || !strings.Contains(err.Error(), "a smaller stream limit may fit") {
		t.Fatalf("3 x 32 MiB in a 64 MiB account: %v, want a refusal that suggests a smaller limit", err)
	}
	t.Logf("refused: %v", err)
}

// A message delivered by a consumer leader that then dies counts as
// delivered on the new leader and would come back only after AckWait;
// LeaderWatch notices the change, and a consumer recreated then gets the
// message at once (what the reducer nodes do).
func testConsumerLeaderWatch(t *testing.T, cl *brokertest.Cluster) {
	cx := ctx(t)
	red := conn(t, cl.ClientOptions("watch", broker.RoleReducer, "reducer"))
	if _, err := red.EnsureStream(cx, "watch", 3); err != nil {
		t.Fatal(err)
	}
	s, err := red.TreeStream(cx, "watch")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := red.JS.Publish(cx, broker.PartialSubject("watch", 0, 0), []byte("partial")); err != nil {
		t.Fatal(err)
	}
	cc := jetstream.ConsumerConfig{Durable: "node_1_0", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Minute,
		FilterSubjects: []string{broker.PartialSubject("watch", 0, 0)}}
	cons, err := s.CreateOrUpdateConsumer(cx, cc)
	if err != nil {
		t.Fatal(err)
	}
	// The delivery that the failure loses: fetched, never acknowledged. The
	// cluster may still be re-forming its routes after the node restarted
	// in "leader killed" (a fetch then ends early and empty), so fetch
	// again until the message comes, within a bound.
	n := 0
	for deadline := time.Now().Add(30 * time.Second); n == 0 && time.Now().Before(deadline); {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Logf("fetch: %v", err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for range b.Messages() {
			n++
		}
		if n == 0 {
			t.Logf("fetch ended empty: %v", b.Error())
			time.Sleep(200 * time.Millisecond)
		}
	}
	if n != 1 {
		t.Fatalf("fetched %d messages, want 1", n)
	}
	w := broker.NewLeaderWatch(cons, 100*time.Millisecond)
	if w.Changed(cx) || w.Leader() == "" {
		t.Fatalf("first answer: leader %q reported as a change, or no leader", w.Leader())
	}
	old := w.Leader()
	killed := cl.Index(old)
	// The kill starts from a healthy cluster: a node restarted by an
	// earlier subtest may still be catching up, and the two survivors must
	// elect new leaders (the consumer's, and the meta leader's if it dies).
	for i := 0; i < cl.Nodes(); i++ {
		cl.WaitHealthy(i)
	}
	// The last subtest: the node stays dead until the cluster stops.
	cl.Kill(killed)
	deadline := time.Now().Add(45 * time.Second)
	for !w.Changed(cx) {
		if time.Now().After(deadline) {
			t.Fatalf("no leader change seen 45s after killing %s (leader now %q)", old, w.Leader())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("consumer leader %s killed; %s leads now", old, w.Leader())
	// The same consumer keeps the message as delivered...
	if m, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second)); err == nil {
		for range m.Messages() {
			t.Fatal("the new leader redelivered before AckWait: LeaderWatch would not be needed")
		}
	}
	// ...a recreated one delivers it now. The recreation has a bound of
	// its own: the steps above may have used most of cx (on 2 busy cores
	// under the race detector they once used all of it).
	rcx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Each try's requests are bounded (RetryAPI, as the reducer's own
	// consumer recreation is): a request lost while the cluster elects its
	// leaders costs one try, not the whole bound.
	err = broker.RetryAPI(rcx, broker.DefaultRetry, func(rcx context.Context) error {
		err := s.DeleteConsumer(rcx, cc.Durable)
		if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			cons, err = s.CreateOrUpdateConsumer(rcx, cc)
		}
		if err != nil {
			t.Logf("recreating the consumer: %v (retried)", err) // says why, should the bound run out
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Its first pull may find no leader yet ("no responders"): retried
	// within the same bound.
	var m jetstream.Msg
	err = broker.Retry(rcx, broker.DefaultRetry, func() error {
		var err error
		m, err = cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		return err
	})
	if err != nil || string(m.Data()) != "partial" {
		t.Fatalf("recreated consumer: %v", err)
	}
}
