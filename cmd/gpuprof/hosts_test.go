package main

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/broker/brokertest"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// Ranks on other hosts, without a second machine: the real mpirun is told
// its ranks run on hosts nodea and nodeb, and reaches them through a
// stand-in for ssh (plm_rsh_agent) that, as sshd does, starts the remote
// command through a shell with a fresh environment: only what mpirun
// forwards (-x) reaches the ranks. Where the test may create network
// namespaces (root, ip), each host is one, joined to this one by a veth
// pair: the ranks then reach the broker over a real network path, by the
// address gpuprof run chose; otherwise (or with GPUPROF_TEST_NO_NETNS set)
// they run here.

// makeNamespaces creates a network namespace per host, each with a veth
// pair to this namespace and a default route through it, and returns their
// names; an error says why they could not be made.
func makeNamespaces(t *testing.T, hosts []string) (map[string]string, error) {
	if os.Getenv("GPUPROF_TEST_NO_NETNS") != "" {
		return nil, fmt.Errorf("GPUPROF_TEST_NO_NETNS is set")
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("not root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, err
	}
	run := func(args ...string) error {
		if b, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(b))
		}
		return nil
	}
	id := os.Getpid() % 100000
	out := map[string]string{}
	for i, h := range hosts {
		ns := fmt.Sprintf("gpt%d-%s", id, h)
		host, peer := fmt.Sprintf("gpv%d%dh", id, i), fmt.Sprintf("gpv%d%dn", id, i)
		subnet := fmt.Sprintf("172.31.%d.%d", id%250, 4*i)
		hostIP, nsIP := subnet[:strings.LastIndexByte(subnet, '.')+1]+fmt.Sprint(4*i+1), subnet[:strings.LastIndexByte(subnet, '.')+1]+fmt.Sprint(4*i+2)
		if err := run("netns", "add", ns); err != nil {
			return nil, err
		}
		t.Cleanup(func() { exec.Command(ip, "netns", "del", ns).Run() })
		for _, args := range [][]string{
			{"link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns},
			{"addr", "add", hostIP + "/30", "dev", host},
			{"link", "set", host, "up"},
			{"-n", ns, "addr", "add", nsIP + "/30", "dev", peer},
			{"-n", ns, "link", "set", peer, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", ns, "route", "add", "default", "via", hostIP},
		} {
			if err := run(args...); err != nil {
				return nil, err
			}
		}
		out[h] = ns
	}
	return out, nil
}

// rshAgent writes the stand-in for ssh: HOST COMMAND... runs COMMAND in
// HOST's namespace (if any) through sh -c with a cleared environment, as
// sshd gives a login; each fake host gets its own temporary directory (its
// Open MPI daemon's session directory). It logs each launch.
func rshAgent(t *testing.T, dir string, ns map[string]string) string {
	t.Helper()
	var cases strings.Builder
	for h, n := range ns {
		fmt.Fprintf(&cases, "%s) netns=%s ;;\n", h, n)
	}
	script := fmt.Sprintf(`#!/bin/sh
host=$1; shift
netns=
case "$host" in
%s*) ;;
esac
mkdir -p "%[2]s/tmp-$host"
printf 'launch host=%%s netns=%%s cmd=%%s\n' "$host" "$netns" "$*" >> "%[2]s/agent.log"
if [ -n "$netns" ]; then
	exec ip netns exec "$netns" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TMPDIR="%[2]s/tmp-$host" sh -c "$*"
fi
exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" TMPDIR="%[2]s/tmp-$host" sh -c "$*"
`, cases.String(), dir)
	path := filepath.Join(dir, "rsh-agent")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunOnOtherHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || !openMPI([]string{mpirun}) {
		t.Skip("Open MPI's mpirun not installed (scripts/setup-debian installs openmpi-bin)")
	}
	bin := buildGpuprof(t)
	hosts := []string{"nodea", "nodeb"}
	ns, err := makeNamespaces(t, hosts)
	if err != nil {
		t.Logf("no network namespaces (%v): the ranks run on this host, under the stand-in for ssh", err)
		ns = map[string]string{}
	} else {
		t.Logf("hosts %v are network namespaces %v", hosts, ns)
	}
	dir := t.TempDir()
	agent := rshAgent(t, dir, ns)

	const job, ranks, batch = "hosts", 4, 256
	streams := t.TempDir()
	files, err := synth.WriteFiles(streams, synth.Options{Ranks: ranks, Seed: 71, Iterations: 6})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ := filepath.Abs("../../testdata/sass/probe")
	want := profile.New(job)
	for r, f := range files {
		mergeItems(t, want, rankItems(t, job, f, r, batch, sassDir))
	}
	st, err := os.Stat(files[3])
	if err != nil {
		t.Fatal(err)
	}
	held := feedFIFO(t, files[3], int(st.Size()/2)) // the job runs while the test knocks
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", job, "--fan-in", "2", "--rank-timeout", "30s",
		"--batch-records", fmt.Sprint(batch), "--batch-interval", "1h", "--sass", sassDir,
		"--replay", filepath.Join(streams, "rank{rank:4}.gpraw"),
		"--", mpirun, "--allow-run-as-root", "--oversubscribe", "--host", "nodea:2,nodeb:2", "--mca", "plm_rsh_agent", agent, "-np", fmt.Sprint(ranks))
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// The broker's address, as the launcher got it: TLS, not loopback.
	u := brokerURLFromLog(t, out, job)
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "tls" || net.ParseIP(pu.Hostname()) == nil || net.ParseIP(pu.Hostname()).IsLoopback() {
		t.Fatalf("broker URL %q: want tls:// on a routable address", u)
	}
	caPEM, err := os.ReadFile(filepath.Join(out, "broker", "auth", job+".ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	base := broker.Options{URLs: []string{u}, Name: "stranger", ConnectTimeout: 3 * time.Second}
	brokertest.ExpectRefused(t, "a client that does not know the job's CA", base, "x509", "certificate")
	withCA := base
	withCA.CAPEM = caPEM
	brokertest.ExpectRefused(t, "a client with the CA but no key", withCA, "authorization violation")
	plain := base
	plain.URLs = []string{strings.Replace(u, "tls://", "nats://", 1)}
	brokertest.ExpectRefused(t, "a client without TLS", plain, "tls", "secure", "x509", "certificate")

	held.rest(t)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gpuprof run: %v\n%s", err, log.String())
	}
	sameAsLocal(t, completeProfile(t, out, ranks, log.String()), want)

	// Both hosts were reached through the agent, each in its namespace,
	// and no secret travelled on a command line.
	agentLog, err := os.ReadFile(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(out, "broker", "auth", broker.SeedFileName(job, broker.RoleCollector)))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if line := fmt.Sprintf("launch host=%s netns=%s ", h, ns[h]); !bytes.Contains(agentLog, []byte(line)) {
			t.Errorf("no launch on %s through the agent (%q):\n%s", h, line, agentLog)
		}
	}
	if bytes.Contains(agentLog, bytes.TrimSpace(seed)) {
		t.Error("the collectors' seed was on a remote command line")
	}
	if left := jobProcs(job); len(left) > 0 {
		t.Errorf("processes of the job left:\n%s", strings.Join(left, "\n"))
	}

	// The control: the same launch through a script gpuprof cannot tell
	// for Open MPI's mpirun adds no -x, and the agent's fresh environment
	// leaves the ranks nothing to reach the broker with.
	wrapper := filepath.Join(t.TempDir(), "mpirun")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+mpirun+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const job2 = "hosts-unforwarded"
	out2 := filepath.Join(t.TempDir(), "out")
	b, err := exec.Command(bin, "run", "-o", out2, "--job", job2, "--rank-timeout", "30s", "--sass", sassDir,
		"--replay", filepath.Join(streams, "rank{rank:4}.gpraw"),
		"--", wrapper, "--allow-run-as-root", "--oversubscribe", "--host", "nodea:2,nodeb:2", "--mca", "plm_rsh_agent", agent, "-np", fmt.Sprint(ranks)).CombinedOutput()
	p2, rerr := profile.ReadFile(out2)
	if err == nil || rerr != nil || len(p2.Items) != 0 || len(p2.IncompleteRanks()) != ranks || !strings.HasPrefix(p2.Ranks[0].Incomplete, "collector never connected") {
		t.Fatalf("without the launcher's forwarding: %v; profile %v (%v)\n%s", err, p2, rerr, b)
	}
	t.Logf("without forwarding: gpuprof run %v; rank 0 %q", err, p2.Ranks[0].Incomplete)
}
