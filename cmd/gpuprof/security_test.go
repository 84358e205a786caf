package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/broker"
	"gpuprof/broker/brokertest"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// The job's embedded broker admits only the job (issue: other users on the
// node cannot reach the job's broker): while gpuprof run runs, a client
// without credentials is refused, and the collectors' credentials, which
// the ranks get in their environment and nowhere on a command line, may
// publish but not read the job's partials, final profile or another rank's
// batches. Everything in the output directory is the user's alone.
func TestRunBrokerAdmitsOnlyTheJob(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	const job, ranks = "guarded", 2
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: ranks, Seed: 51, Iterations: 6})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	st, err := os.Stat(files[1])
	if err != nil {
		t.Fatal(err)
	}
	f := feedFIFO(t, files[1], int(st.Size()/2)) // holds the job open
	l := newFakeLauncher(t)
	// The launcher also shows the test what a rank gets: the collector
	// role's seed, from its environment.
	script, _ := os.ReadFile(l.path)
	script = bytes.Replace(script, []byte("printf '%s\\n' \"$GPUPROF_NATS\""), []byte("printf '%s\\n' \"$GPUPROF_NKEY_SEED\" > \"$d/seed\"; printf '%s\\n' \"$GPUPROF_NATS\""), 1)
	if err := os.WriteFile(l.path, script, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", job, "--rank-timeout", "30s", "--batch-records", "128", "--batch-interval", "1h",
		"--sass", sassDir, "--replay", filepath.Join(streams, "rank{rank:4}.gpraw"), "--", l.path, "-np", fmt.Sprint(ranks))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url := l.brokerURL(t)
	seed := l.file(t, "seed")
	if !strings.HasPrefix(seed, "SU") {
		t.Fatalf("the ranks got %q as their nkey seed", seed)
	}
	// The job's data exists: rank 1 stored batches, rank 0 its done item.
	s := jobStream(t, url, job, reducerKey(out, job))
	waitItems(t, s, broker.BatchSubject(job, 1), 1, 60*time.Second)

	brokertest.ExpectRefused(t, "a client without credentials", broker.Options{URLs: []string{url}, Name: "stranger", ConnectTimeout: 3 * time.Second}, "authorization violation")
	other, err := broker.WriteJobConfig(t.TempDir(), job, broker.JobConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	brokertest.ExpectRefused(t, "a client with keys made for the same job name elsewhere",
		broker.Options{URLs: []string{url}, Name: "impostor", NKeySeedFile: other.SeedFiles[broker.RoleReducer], ConnectTimeout: 3 * time.Second}, "authorization violation")

	col, err := broker.Connect(broker.Options{URLs: []string{url}, Name: "curious collector", NKeySeed: seed, InboxPrefix: broker.InboxPrefix(job, broker.RoleCollector)})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	violations := make(chan error, 64)
	col.NC.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err })
	for _, subj := range []string{
		broker.BatchSubject(job, 1), // another rank's batches
		broker.DoneSubject(job, 1),
		broker.PartialSubject(job, 0, 0), // the reducers' partials
		broker.FinalSubject(job),
		broker.StatusSubjects(job),
		broker.InboxPrefix(job, broker.RoleReducer) + ".>",
		"gpuprof." + job + ".>",
	} {
		sub, err := col.NC.SubscribeSync(subj)
		if err == nil {
			err = col.NC.Flush()
		}
		if err == nil {
			select {
			case err = <-violations:
			case <-time.After(5 * time.Second):
			}
		}
		if err == nil || !(errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation for subscription")) {
			t.Errorf("a collector subscribed to %s: %v", subj, err)
		}
		if sub != nil {
			sub.Unsubscribe()
		}
	}
	// Nor can it read the streams through a consumer.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = col.JS.OrderedConsumer(ctx, broker.TreeStreamName(job), jetstream.OrderedConsumerConfig{FilterSubjects: []string{broker.FinalSubject(job)}})
	cancel()
	if err == nil {
		t.Error("a collector made a consumer of the tree stream")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	_, err = col.JS.OrderedConsumer(ctx, broker.StreamName(job), jetstream.OrderedConsumerConfig{FilterSubjects: []string{broker.BatchSubject(job, 1)}})
	cancel()
	if err == nil {
		t.Error("a collector made a consumer of the input stream")
	}

	f.rest(t)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gpuprof run: %v\n%s", err, log.String())
	}
	completeProfile(t, out, ranks, log.String())
	// No secret on a command line: the ranks' arguments hold no seed.
	if args := l.file(t, "args"); strings.Contains(args, seed) {
		t.Errorf("the ranks' command line holds a seed:\n%s", args)
	}
	filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: everything the job writes must be user-only", path, fi.Mode().Perm())
		}
		return nil
	})
}

// completeProfile reads the profile gpuprof run wrote into out and checks
// that every one of ranks is in it, complete.
func completeProfile(t *testing.T, out string, ranks int, log string) *profile.Profile {
	t.Helper()
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.SealedRanks() != uint64(ranks) || len(p.IncompleteRanks()) != 0 {
		t.Fatalf("%d ranks sealed, incomplete %v\n%s", p.SealedRanks(), p.IncompleteRanks(), log)
	}
	return p
}
