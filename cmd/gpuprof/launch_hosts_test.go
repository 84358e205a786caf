package main

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMultiHost(t *testing.T) {
	dir := t.TempDir()
	local, remote := filepath.Join(dir, "local"), filepath.Join(dir, "remote")
	os.WriteFile(local, []byte("# this host only\nlocalhost slots=4\n127.0.0.1\n"), 0o600)
	os.WriteFile(remote, []byte("localhost slots=2\nnode7 slots=4 # another\n"), 0o600)
	name, _ := os.Hostname()
	none := func(string) string { return "" }
	slurm3 := func(k string) string { return map[string]string{"SLURM_JOB_NUM_NODES": "3"}[k] }
	for _, c := range []struct {
		cmd    string
		getenv func(string) string
		want   bool
	}{
		{"mpirun -np 4 ./app", none, false},
		{"mpirun -np 4 ./app", slurm3, true},
		{"mpirun --host localhost:4 -np 4 ./app", none, false},
		{"mpirun -H " + name + ",127.0.0.1 -np 2 ./app", none, false},
		{"mpirun --host nodea:2,nodeb:2 -np 4 ./app", none, true},
		{"mpirun --hostfile " + local + " -np 4 ./app", none, false},
		{"mpiexec -hostfile=" + remote + " -np 4 ./app", none, true},
		{"mpirun --hostfile /nonexistent -np 4 ./app", none, true},
		{"srun -N 1 -n 4 ./app", none, false},
		{"srun -N 2 -n 8 ./app", none, true},
		{"srun --nodes=1-2 ./app", none, true},
		{"srun -w " + name + " ./app", none, false},
		{"srun -n 8 ./app", slurm3, true},
		{"torchrun --nnodes 2 --nproc_per_node 4 train.py", none, true},
		{"torchrun --nnodes=1:4 train.py", none, true},
		{"torchrun --nnodes 1 --nproc_per_node 4 train.py", none, false},
		{"python3 -m torch.distributed.run --nnodes 2 train.py", none, true},
		{"./app -H nodea", none, false},
	} {
		if got := multiHost(strings.Fields(c.cmd), c.getenv); got != c.want {
			t.Errorf("%s: multi-host %v, want %v", c.cmd, got, c.want)
		}
	}
}

func TestForwardEnv(t *testing.T) {
	names := []string{"GPUPROF_JOB", "GPUPROF_NKEY_SEED"}
	for _, c := range []struct{ cmd, want string }{
		{"orterun -np 2 app", "orterun -x GPUPROF_JOB -x GPUPROF_NKEY_SEED -np 2 app"},
		{"srun -n 2 app", "srun -n 2 app"}, // srun passes everything by default
		{"srun --export=ALL -n 2 app", "srun --export=ALL -n 2 app"},
		{"srun --export=NONE -n 2 app", "srun --export=GPUPROF_JOB,GPUPROF_NKEY_SEED -n 2 app"},
		{"srun --export=PATH,HOME -n 2 app", "srun --export=PATH,HOME,GPUPROF_JOB,GPUPROF_NKEY_SEED -n 2 app"},
		{"./app", "./app"},
	} {
		if got := strings.Join(forwardEnv(strings.Fields(c.cmd), names), " "); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.cmd, got, c.want)
		}
	}
	if got := launcherEnv([]string{"orterun"}, 10*time.Second); !reflect.DeepEqual(got, []string{"OMPI_MCA_odls_base_sigkill_timeout=2"}) {
		t.Errorf("Open MPI's kill delay for a 10 s stop timeout: %v", got)
	}
	if got := launcherEnv([]string{"srun"}, 10*time.Second); got != nil {
		t.Errorf("srun: %v", got)
	}
}

func TestBrokerAddress(t *testing.T) {
	name, _ := os.Hostname()
	host, port, tlsHosts, err := brokerAddress("", false)
	if err != nil || host != "127.0.0.1" || port != 0 || tlsHosts != nil {
		t.Errorf("one host: %s:%d TLS %v, %v; want the loopback address without TLS", host, port, tlsHosts, err)
	}
	host, port, tlsHosts, err = brokerAddress("10.1.2.3:4222", true)
	if err != nil || host != "10.1.2.3" || port != 4222 || !reflect.DeepEqual(tlsHosts, []string{"10.1.2.3", name}) {
		t.Errorf("--broker-listen 10.1.2.3:4222: %s:%d TLS %v, %v", host, port, tlsHosts, err)
	}
	if _, _, _, err := brokerAddress("127.0.0.1", true); err == nil {
		t.Error("a loopback broker for ranks on other hosts was accepted")
	}
	if _, _, _, err := brokerAddress("10.1.2.3:99999", false); err == nil {
		t.Error("a bad port was accepted")
	}
	if ip, err := routableAddress(); err == nil {
		host, _, tlsHosts, err = brokerAddress("", true)
		if err != nil || host != ip.String() || net.ParseIP(host).IsLoopback() || len(tlsHosts) < 2 || tlsHosts[0] != host {
			t.Errorf("other hosts: %s TLS %v, %v", host, tlsHosts, err)
		}
	}
	_, _, tlsHosts, err = brokerAddress("0.0.0.0:0", true)
	if err != nil || len(tlsHosts) == 0 || tlsHosts[len(tlsHosts)-1] != name {
		t.Errorf("every interface: TLS %v, %v", tlsHosts, err)
	}
}
