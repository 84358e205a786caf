package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/broker/brokertest"
	"gpuprof/profile"
)

// fakeMpirun stands in for mpirun -np N CMD...: it starts N copies of CMD
// with their rank in the environment. With GATE set, it starts the first
// half, waits for them, creates $GATE.half and starts the second half only
// once $GATE exists, so a test can act between the two halves.
const fakeMpirun = `#!/bin/sh
n=$2; shift 2
half=$n
[ -n "$GATE" ] && half=$((n / 2))
st=0
i=0; pids=""
while [ $i -lt $half ]; do OMPI_COMM_WORLD_RANK=$i "$@" & pids="$pids $!"; i=$((i + 1)); done
for p in $pids; do wait $p || st=$?; done
if [ -n "$GATE" ]; then
  : > "$GATE.half"
  while [ ! -e "$GATE" ]; do sleep 0.05; done
  pids=""
  while [ $i -lt $n ]; do OMPI_COMM_WORLD_RANK=$i "$@" & pids="$pids $!"; i=$((i + 1)); done
  for p in $pids; do wait $p || st=$?; done
fi
exit $st
`

// TestRunOnCluster: gpuprof run against a real 3-node NATS cluster (separate
// processes, mutual TLS, the accounts and keys written by gpuprof nats-config,
// collectors on their own restricted keys, stream replicas 3) gives the
// byte-identical profile of the embedded-broker run of the same captures;
// and again when the node leading the job's stream is killed with SIGKILL
// after half the ranks' batches are stored.
func TestRunOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin := buildGpuprof(t)
	const job = "cluster-run"
	confDir := filepath.Join(t.TempDir(), "nats")
	out, err := exec.Command(bin, "nats-config", "--job", job, "-o", confDir).CombinedOutput()
	if err != nil {
		t.Fatalf("gpuprof nats-config: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--collector-nkey") {
		t.Errorf("nats-config does not say how to run the job:\n%s", out)
	}
	cl := brokertest.Start(t, brokertest.Options{AccountsFiles: []string{filepath.Join(confDir, broker.AccountsFileName(job))}, VerifyClients: true})
	seed := func(r broker.Role) string { return filepath.Join(confDir, broker.SeedFileName(job, r)) }

	captures, _ := filepath.Abs("../../testdata/captures")
	sassDir, _ := filepath.Abs("../../testdata/sass")
	launcher := filepath.Join(t.TempDir(), "mpirun")
	if err := os.WriteFile(launcher, []byte(fakeMpirun), 0o755); err != nil {
		t.Fatal(err)
	}
	// The demo's captured ranks 0-3, two passes each; small batches so
	// the stream holds many messages when a node dies.
	replay := filepath.Join(captures, "mpi_imbalance.pcsampling.rank{rank}.gpr") + "," + filepath.Join(captures, "mpi_imbalance.redundancy.rank{rank}.gpr")
	common := []string{"run", "--job", job, "--fan-in", "2", "--rank-timeout", "60s", "--batch-records", "2048", "--batch-interval", "1h",
		"--sass", sassDir, "--replay", replay}
	clusterArgs := []string{"--nats", cl.URL(), "--replicas", "3", "--tls-ca", cl.CAFile, "--tls-cert", cl.ClientCert, "--tls-key", cl.ClientKey,
		"--nkey", seed(broker.RoleReducer), "--collector-nkey", seed(broker.RoleCollector)}
	run := func(name string, extra []string, env []string, during func()) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), name)
		args := append(append(append([]string{}, common...), "-o", dir), extra...)
		cmd := exec.Command(bin, append(args, "--", launcher, "-np", "4")...)
		cmd.Env = append(os.Environ(), env...)
		if os.Getenv("CLUSTER_TEST_LOG") != "" {
			cmd.Env = append(cmd.Env, "GPUPROF_LOG=debug")
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if during != nil {
			during()
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: gpuprof run: %v\nstdout:\n%s\nstderr:\n%s", name, err, head(stdout.String(), 30), stderr.String())
		}
		t.Logf("%s: gpuprof run took %v", name, time.Since(start).Round(time.Millisecond))
		if os.Getenv("CLUSTER_TEST_LOG") != "" {
			t.Logf("stderr:\n%s", stderr.String())
		}
		if strings.Contains(strings.ToLower(stderr.String()), "permissions violation") {
			t.Errorf("%s: a permissions violation was reported:\n%s", name, stderr.String())
		}
		for _, f := range []string{"profile.gpuprof", "report.txt", "report.html", "profile.pb.gz", "profile.json"} {
			st, err := os.Stat(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: %s has mode %v: outputs must be user-only", name, f, st.Mode().Perm())
			}
		}
		p, err := profile.ReadFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) != 4 || p.SealedRanks() != 4 || len(p.IncompleteRanks()) != 0 {
			t.Fatalf("%s: merged %d ranks, %d sealed, incomplete %v; want 4 complete", name, len(p.Items), p.SealedRanks(), p.IncompleteRanks())
		}
		return dir
	}
	same := func(name, gotDir, wantDir string) {
		t.Helper()
		got, err := profile.ReadFile(gotDir)
		if err != nil {
			t.Fatal(err)
		}
		want, err := profile.ReadFile(wantDir)
		if err != nil {
			t.Fatal(err)
		}
		// Value sketches' heavy-hitter lists depend on the order a leaf
		// merges its ranks' batches in once they truncate, with any broker
		// (see TestRunUnderMpirun): compared within their error bounds,
		// everything else byte for byte.
		checkSketches(t, got, want)
		if !bytes.Equal(got.Encode(), want.Encode()) {
			t.Fatalf("%s: profile differs from the embedded broker's; first difference:\n%s", name, firstDiff(got.String(), want.String(), name, "embedded"))
		}
	}

	embedded := run("embedded", nil, nil, nil)
	onCluster := run("cluster", clusterArgs, nil, nil)
	same("cluster", onCluster, embedded)

	// The same job again, on a clean slate, killing a node mid-run.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := broker.Connect(cl.ClientOptions(job, broker.RoleReducer, "test"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	killed := run("cluster, node killed", clusterArgs, []string{"GATE=" + gate}, func() {
		deadline := time.Now().Add(90 * time.Second)
		for {
			if _, err := os.Stat(gate + ".half"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the first half of the ranks did not finish")
			}
			time.Sleep(20 * time.Millisecond)
		}
		s, err := admin.Stream(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leader := cl.Index(info.Cluster.Leader)
		if leader < 0 {
			t.Fatalf("stream leader %q is not a node", info.Cluster.Leader)
		}
		t.Logf("killing %s, the stream's leader, after %d messages stored (last sequence %d)", info.Cluster.Leader, info.State.Msgs, info.State.LastSeq)
		if info.State.LastSeq < 10 {
			t.Errorf("only %d messages stored before the kill: the fault is not mid-run", info.State.LastSeq)
		}
		cl.Kill(leader)
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	same("cluster, node killed", killed, embedded)
}

// firstDiff shows the first differing line of two texts, with context.
func firstDiff(a, b, aName, bName string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			ctx := ""
			if i > 0 {
				ctx = al[max(i-3, 0)] + "\n"
			}
			return fmt.Sprintf("line %d, after:\n%s--- %s\n%s\n--- %s\n%s", i+1, ctx, aName, x, bName, y)
		}
	}
	return "the texts are equal; the encodings differ"
}

// gpuprof nats-config: files user-only, bad input refused with errors that
// name it.
func TestNATSConfigCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := cmdNATSConfig([]string{"--job", "nc-1", "-o", dir, "--max-file-store", "1073741824"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{broker.AccountsFileName("nc-1"), broker.SeedFileName("nc-1", broker.RoleCollector), broker.SeedFileName("nc-1", broker.RoleReducer)} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, broker.AccountsFileName("nc-1"))); !strings.Contains(string(b), "max_file: 1073741824") {
		t.Errorf("account lacks the storage bound:\n%s", b)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--job", "x"}, "-o DIR is required"},
		{[]string{"--job", "a b", "-o", dir}, `' ' at byte 1`},
		{[]string{"--job", "x", "-o", dir, "--max-file-store", "-1"}, "negative max file store"},
	} {
		if err := cmdNATSConfig(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("nats-config %v: %v, want an error saying %s", tc.args, err, tc.want)
		}
	}
}
