package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/broker/brokertest"
)

// The embedded broker with a job's credentials admits only the job: a
// client without a key, or with another job's, is refused; the collector
// role publishes its batches and status but cannot read any of the job's
// data (other ranks' batches, partials, the final profile) nor consume
// from the stream; the reducer role runs the job. With a CA, clients must
// verify the server's certificate with it, by a name it carries.
func TestEmbeddedJobAuth(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		name := "plain"
		if tlsOn {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { testEmbeddedJobAuth(t, tlsOn) })
	}
}

func testEmbeddedJobAuth(t *testing.T, tlsOn bool) {
	const job = "authjob"
	dir := t.TempDir()
	var hosts []string
	if tlsOn {
		hosts = []string{"127.0.0.1"}
	}
	auth, err := broker.NewJobAuth(filepath.Join(dir, "auth"), job, hosts)
	if err != nil {
		t.Fatal(err)
	}
	e, err := broker.StartEmbeddedWith(broker.EmbeddedOptions{Dir: filepath.Join(dir, "store"), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	if want := map[bool]string{false: "nats://", true: "tls://"}[tlsOn]; !strings.HasPrefix(e.URL, want) {
		t.Fatalf("URL %s, want %s...", e.URL, want)
	}
	cx := ctx(t)
	red := conn(t, e.Options("reducer"))
	if _, err := red.EnsureStream(cx, job, 1); err != nil {
		t.Fatalf("reducer: %v (async %v)", err, red.AsyncErr())
	}
	if err := red.EnsureModuleBucket(cx, job, 1); err != nil {
		t.Fatal(err)
	}
	statuses, err := red.NC.SubscribeSync(broker.StatusSubjects(job))
	if err != nil {
		t.Fatal(err)
	}

	// The collector's seed, as a rank gets it: the text, in the environment.
	seed, err := auth.Seed(broker.RoleCollector)
	if err != nil {
		t.Fatal(err)
	}
	co := e.ClientOptions(broker.RoleCollector, "collector")
	co.NKeySeedFile, co.NKeySeed = "", seed
	col := conn(t, co)
	js, err := col.NewJetStream(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	subj := broker.BatchSubject(job, 1)
	if _, _, err := broker.PublishRetry(cx, js, &nats.Msg{Subject: subj, Data: []byte("x")}, subj, broker.StreamName(job), broker.DefaultRetry, nil); err != nil {
		t.Fatalf("collector publish: %v (async %v)", err, col.AsyncErr())
	}
	if err := col.NC.Publish(broker.StatusSubject(job, 1), []byte("running")); err != nil {
		t.Fatal(err)
	}
	if m, err := statuses.NextMsg(5 * time.Second); err != nil || string(m.Data) != "running" {
		t.Fatalf("the reducer role did not get the collector's status: %v", err)
	}
	for _, s := range []string{
		broker.BatchSubject(job, 0), // another rank's batches
		broker.BatchSubject(job, 1), // even its own, once published
		broker.PartialSubject(job, 0, 0),
		broker.FinalSubject(job),
		broker.StatusSubjects(job),
		">",
	} {
		expectViolation(t, col, "subscription", s, func() error {
			_, err := col.NC.Subscribe(s, func(*nats.Msg) {})
			return err
		})
	}
	for _, s := range []string{broker.PartialSubject(job, 0, 0), broker.FinalSubject(job), broker.EndSubject(job),
		"$JS.API.CONSUMER.CREATE." + broker.StreamName(job), "$JS.API.CONSUMER.CREATE." + broker.TreeStreamName(job)} {
		expectViolation(t, col, "publish", s, func() error { return col.NC.Publish(s, []byte("forged")) })
	}
	short, cancel := context.WithTimeout(cx, time.Second)
	_, err = col.JS.OrderedConsumer(short, broker.TreeStreamName(job), jetstreamAll())
	cancel()
	if err == nil {
		t.Fatal("a collector made a consumer of the tree stream")
	}

	// Everything the job's broker keeps is the user's alone.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dir && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v", p, fi.Mode().Perm())
		}
		return nil
	})

	base := e.ClientOptions(broker.RoleCollector, "refused")
	base.ConnectTimeout = 3 * time.Second
	none := base
	none.NKeySeedFile = ""
	brokertest.ExpectRefused(t, "no credentials", none, "authorization violation")
	other, err := broker.WriteJobConfig(t.TempDir(), job, broker.JobConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stranger := base
	stranger.NKeySeedFile = other.SeedFiles[broker.RoleReducer]
	brokertest.ExpectRefused(t, "another job's key", stranger, "authorization violation")
	if !tlsOn {
		return
	}
	noCA := base
	noCA.CAPEM = nil
	brokertest.ExpectRefused(t, "no CA (the system roots)", noCA, "unknown authority", "x509", "tls")
	otherCA, err := broker.NewCA("another", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	wrongCA := base
	wrongCA.CAPEM = otherCA.PEM
	brokertest.ExpectRefused(t, "another CA", wrongCA, "unknown authority", "x509")
	plain := base
	plain.URLs = []string{strings.Replace(e.URL, "tls://", "nats://", 1)}
	plain.CAPEM = nil
	brokertest.ExpectRefused(t, "plain TCP", plain, "tls", "secure connection")
	byName := base
	byName.URLs = []string{strings.Replace(e.URL, "127.0.0.1", "localhost", 1)}
	brokertest.ExpectRefused(t, "a name the certificate does not carry", byName, "x509", "certificate")
}

func jetstreamAll() jetstream.OrderedConsumerConfig {
	return jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
}
