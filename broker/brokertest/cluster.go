package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpuprof/broker"
)

// Options configure a test cluster.
type Options struct {
	// Nodes in the cluster (default 3).
	Nodes int
	// Jobs to generate accounts for (broker.WriteJobConfig into Dir/jobs),
	// with JobOptions[job] if given.
	Jobs       []string
	JobOptions map[string]broker.JobConfigOptions
	// AccountsFiles are further job accounts to include, written by
	// another generator (gpuprof nats-config); their seeds are looked for
	// beside them by broker.SeedFileName.
	AccountsFiles []string
	// VerifyClients makes the servers require a client certificate signed
	// by the test CA (mutual TLS); ClientOptions then carry one.
	VerifyClients bool
}

// Cluster is a running test cluster.
type Cluster struct {
	t testing.TB
	// Dir holds the configuration, certificates, stores and node logs.
	Dir string
	// CA signed the servers' certificates; CAFile holds it.
	CA     *CA
	CAFile string
	// ClientCert and ClientKey are a client certificate from CA (for
	// VerifyClients).
	ClientCert, ClientKey string
	verifyClients         bool
	// Host is the name clients dial (the certificates are issued for it
	// and nothing else, so a client dialling another name fails
	// verification).
	Host string
	// Seeds are the client nkey seed files per job and role.
	Seeds map[string]map[broker.Role]string

	mu    sync.Mutex
	nodes []*node
}

type node struct {
	name                   string
	conf, log              string
	port, routePort, mPort int
	cmd                    *exec.Cmd
	exited                 chan struct{}
	killed                 bool
}

// Start starts the cluster and waits until JetStream has a meta leader and
// every node is healthy. The nodes are stopped when the test ends; if the
// test failed, the tail of each node's log is shown.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	c := &Cluster{t: t, Dir: t.TempDir(), Host: "localhost", Seeds: map[string]map[broker.Role]string{}, verifyClients: o.VerifyClients}
	var err error
	if c.CA, err = NewCA("gpuprof test CA"); err != nil {
		t.Fatal(err)
	}
	c.CAFile = filepath.Join(c.Dir, "ca.pem")
	certFile, keyFile := filepath.Join(c.Dir, "server.pem"), filepath.Join(c.Dir, "server-key.pem")
	if err := c.CA.WriteFiles(c.CAFile, certFile, keyFile, []string{c.Host}); err != nil {
		t.Fatal(err)
	}
	c.ClientCert, c.ClientKey = filepath.Join(c.Dir, "client.pem"), filepath.Join(c.Dir, "client-key.pem")
	if err := c.CA.WriteFiles(c.CAFile, c.ClientCert, c.ClientKey, []string{"gpuprof-client"}); err != nil {
		t.Fatal(err)
	}
	includes := append([]string{}, o.AccountsFiles...)
	for _, job := range o.Jobs {
		jc, err := broker.WriteJobConfig(filepath.Join(c.Dir, "jobs"), job, o.JobOptions[job])
		if err != nil {
			t.Fatal(err)
		}
		includes = append(includes, jc.AccountsFile)
	}
	for _, f := range includes {
		job := strings.TrimSuffix(filepath.Base(f), ".accounts.conf")
		c.Seeds[job] = map[broker.Role]string{}
		for _, r := range broker.Roles {
			c.Seeds[job][r] = filepath.Join(filepath.Dir(f), broker.SeedFileName(job, r))
		}
	}
	ports := freePorts(t, 3*o.Nodes)
	for i := 0; i < o.Nodes; i++ {
		c.nodes = append(c.nodes, &node{name: fmt.Sprintf("n%d", i+1), port: ports[3*i], routePort: ports[3*i+1], mPort: ports[3*i+2]})
	}
	var routes []string
	for _, n := range c.nodes {
		routes = append(routes, strconv.Quote(fmt.Sprintf("nats-route://%s:%d", c.Host, n.routePort)))
	}
	for _, n := range c.nodes {
		dir := filepath.Join(c.Dir, n.name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// The server resolves includes relative to the including file.
		var acc strings.Builder
		for _, f := range includes {
			rel, err := filepath.Rel(dir, f)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&acc, "  include %q\n", rel)
		}
		n.conf, n.log = filepath.Join(dir, "server.conf"), filepath.Join(dir, "server.log")
		conf := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
max_pending: 268435456
jetstream {
  store_dir: %q
  # A limit, not an allocation: streams reserve their byte limit from it.
  max_file_store: 68719476736
  max_memory_store: 268435456
}
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: %v
  timeout: 5
}
cluster {
  name: "gpuprof-test"
  listen: "127.0.0.1:%d"
  routes: [%s]
  tls {
    cert_file: %q
    key_file: %q
    ca_file: %q
    verify: true
    timeout: 5
  }
}
system_account: SYS
accounts {
  SYS: { users: [ { user: "sys", password: %q } ] }
%s}
`, n.name, n.port, n.mPort, filepath.Join(dir, "js"), certFile, keyFile, c.CAFile, o.VerifyClients, n.routePort, strings.Join(routes, ", "),
			certFile, keyFile, c.CAFile, randomHex(16), acc.String())
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stop)
	start := time.Now()
	for i := range c.nodes {
		c.startNode(i)
	}
	for i := range c.nodes {
		c.WaitHealthy(i)
	}
	c.waitMetaPeers()
	t.Logf("brokertest: %d-node cluster up in %v", len(c.nodes), time.Since(start).Round(time.Millisecond))
	return c
}

// waitMetaPeers waits until the JetStream meta leader sees every other
// node current and online: before that, placing a stream with a replica
// per node fails ("no suitable peers for placement").
func (c *Cluster) waitMetaPeers() {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := "no meta leader"
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			var jsz struct {
				Meta *struct {
					Leader   string `json:"leader"`
					Replicas []struct {
						Name    string `json:"name"`
						Current bool   `json:"current"`
						Offline bool   `json:"offline"`
					} `json:"replicas"`
				} `json:"meta_cluster"`
			}
			if err := getJSON(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.mPort), &jsz); err != nil || jsz.Meta == nil || jsz.Meta.Leader != n.name {
				continue
			}
			ok := 0
			for _, r := range jsz.Meta.Replicas {
				if r.Current && !r.Offline {
					ok++
				}
			}
			if ok == len(c.nodes)-1 {
				return
			}
			last = fmt.Sprintf("leader %s sees %d of %d peers current", n.name, ok, len(c.nodes)-1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("brokertest: cluster not formed after a minute: %s", last)
}

func getJSON(url string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *Cluster) startNode(i int) {
	c.t.Helper()
	self, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	n := c.nodes[i]
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	fmt.Fprintf(logf, "--- brokertest: starting %s at %s\n", n.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), nodeEnv+"="+n.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("brokertest: start node %s: %v", n.name, err)
	}
	logf.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c.mu.Lock()
	n.cmd, n.exited, n.killed = cmd, exited, false
	c.mu.Unlock()
}

// URLs are the client URLs of every node (killed ones included, as a
// client's server list would be).
func (c *Cluster) URLs() []string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, fmt.Sprintf("tls://%s:%d", c.Host, n.port))
	}
	return u
}

// URL is URLs joined by commas, as --nats takes them.
func (c *Cluster) URL() string { return strings.Join(c.URLs(), ",") }

// Port is node i's client port.
func (c *Cluster) Port(i int) int { return c.nodes[i].port }

// Nodes is the number of nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Name is node i's server name, as stream and consumer infos give leaders.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index returns the node of server name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// ClientOptions returns options for a client of job in role: the
// cluster's URLs, the role's nkey seed, the test CA, the role's inbox
// prefix, and the client certificate if the servers verify clients.
func (c *Cluster) ClientOptions(job string, role broker.Role, name string) broker.Options {
	c.t.Helper()
	seed := c.Seeds[job][role]
	if seed == "" {
		c.t.Fatalf("brokertest: no %s credentials for job %s", role, job)
	}
	o := broker.Options{URLs: c.URLs(), NKeySeedFile: seed, CAFile: c.CAFile, Name: name,
		InboxPrefix: broker.InboxPrefix(job, role), ConnectTimeout: 5 * time.Second}
	if c.verifyClients {
		o.CertFile, o.KeyFile = c.ClientCert, c.ClientKey
	}
	return o
}

// Kill sends SIGKILL to node i and waits until it is gone: no shutdown,
// no goodbye to its peers, as a machine that fails.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[i]
	n.killed = true
	cmd, exited := n.cmd, n.exited
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Restart starts node i again on its store (after Kill) and waits until it
// is healthy.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Kill(i)
	start := time.Now()
	c.startNode(i)
	c.WaitHealthy(i)
	c.t.Logf("brokertest: node %s restarted and healthy in %v", c.nodes[i].name, time.Since(start).Round(time.Millisecond))
}

// WaitHealthy waits until node i reports healthy on its monitoring port
// (JetStream enabled, meta leader known, its streams and consumers
// current), for at most a minute.
func (c *Cluster) WaitHealthy(i int) {
	c.t.Helper()
	n := c.nodes[i]
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.mPort)
	deadline := time.Now().Add(time.Minute)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-n.exited:
			c.t.Fatalf("brokertest: node %s exited while starting\n%s", n.name, tail(n.log, 30))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		} else {
			last = err.Error()
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("brokertest: node %s not healthy after a minute: %s\n%s", n.name, last, tail(n.log, 30))
}

// stop ends every node (SIGTERM, then SIGKILL) and shows their logs if
// the test failed.
func (c *Cluster) stop() {
	for _, n := range c.nodes {
		c.mu.Lock()
		cmd, exited := n.cmd, n.exited
		c.mu.Unlock()
		if cmd == nil {
			continue
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
	if c.t.Failed() {
		for _, n := range c.nodes {
			c.t.Logf("node %s log (last lines):\n%s", n.name, tail(n.log, 40))
		}
	}
}

// freePorts finds n distinct free loopback ports. Another process may take
// one before a node binds it; the node then fails to start and says so.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
