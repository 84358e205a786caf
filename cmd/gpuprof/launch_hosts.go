package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gpuprof/collector/launcher"
)

// Ranks on other hosts: which launchers place them there, how the job's
// broker is offered to them (a routable address, TLS with the job's own
// CA, the job's keys), and how the launcher forwards the environment that
// carries it (docs/cluster.md, "Ranks on other hosts").

// launcherName is the launcher's base name, and for any torch launcher
// (python -m torch.distributed.run or .launch) torchrun.
func launcherName(cmd []string) string {
	if len(cmd) == 0 {
		return ""
	}
	if _, ok := launcher.ParseTorch(cmd, func(string) string { return "" }); ok {
		return "torchrun"
	}
	return filepath.Base(cmd[0])
}

// optionValue returns the values of a launcher option in cmd's options
// (before the application): "-H a,b" and "--host=a,b" forms.
func optionValues(cmd []string, names ...string) []string {
	var out []string
	for i := 1; i < len(cmd); i++ {
		a := cmd[i]
		if a == "--" {
			break
		}
		for _, n := range names {
			switch {
			case a == n && i+1 < len(cmd):
				out = append(out, cmd[i+1])
			case strings.HasPrefix(a, n+"="):
				out = append(out, strings.TrimPrefix(a, n+"="))
			}
		}
	}
	return out
}

// multiHost reports whether the launcher command places ranks on hosts
// other than this one: a host list or hostfile naming another host
// (mpirun), more than one node (srun -N, a Slurm allocation of several
// nodes, torchrun --nnodes).
func multiHost(cmd []string, getenv func(string) string) bool {
	slurmNodes, _ := strconv.Atoi(getenv("SLURM_JOB_NUM_NODES"))
	switch name := launcherName(cmd); {
	case launchers[name] && name != "srun":
		for _, list := range optionValues(cmd, "-H", "--host", "-host") {
			for _, h := range strings.Split(list, ",") {
				if !localHost(h) {
					return true
				}
			}
		}
		for _, f := range optionValues(cmd, "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f", "--default-hostfile") {
			if !localHostfile(f) {
				return true
			}
		}
		// Without a host list mpirun uses the batch system's allocation.
		return slurmNodes > 1 || getenv("PBS_NODEFILE") != "" && !localHostfile(getenv("PBS_NODEFILE"))
	case name == "srun":
		for _, n := range optionValues(cmd, "-N", "--nodes") {
			if maxCount(n) > 1 {
				return true
			}
		}
		for _, list := range optionValues(cmd, "-w", "--nodelist") {
			for _, h := range strings.Split(list, ",") {
				if !localHost(h) {
					return true
				}
			}
		}
		return slurmNodes > 1
	case name == "torchrun":
		for _, n := range optionValues(cmd, "--nnodes") {
			if maxCount(n) > 1 {
				return true
			}
		}
	}
	return false
}

// maxCount reads "4", "2-4" (srun) or "1:4" (torchrun) as its largest
// count.
func maxCount(s string) int {
	s = s[strings.LastIndexAny(s, "-:")+1:]
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return math.MaxInt // a form we do not know: assume several
	}
	return n
}

// localHost reports whether a host name or address is this machine.
func localHost(h string) bool {
	h, _, _ = strings.Cut(strings.TrimSpace(h), ":") // mpirun's host:slots
	if h == "" || h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1" {
		return true
	}
	if name, err := os.Hostname(); err == nil {
		short, _, _ := strings.Cut(name, ".")
		if h == name || h == short {
			return true
		}
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return false
	}
	for _, a := range localAddrs() {
		if a.Equal(ip) {
			return true
		}
	}
	return false
}

// localHostfile reports whether every host of an mpirun hostfile is this
// machine (an unreadable file is taken for other hosts).
func localHostfile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if f := strings.Fields(line); len(f) > 0 && !localHost(f[0]) {
			return false
		}
	}
	return true
}

func localAddrs() []net.IP {
	addrs, _ := net.InterfaceAddrs()
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out
}

// routableAddress is the address other hosts reach this one by: the host
// name's address if it is not a loopback one, else the first address of
// an interface that is up and not a loopback.
func routableAddress() (net.IP, error) {
	if name, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(name); err == nil {
			for _, ip := range ips {
				if ip.To4() != nil && !ip.IsLoopback() {
					return ip, nil
				}
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
				return n.IP, nil
			}
		}
	}
	return nil, errors.New("no routable address found for the embedded broker: give --broker-listen ADDRESS[:PORT]")
}

// brokerAddress is where the embedded broker listens (host, port 0 for
// any) and, for an address other hosts may dial, the names and addresses
// its certificate must carry (nil: a loopback broker, no TLS).
func brokerAddress(listen string, multi bool) (host string, port int, tlsHosts []string, err error) {
	host = "127.0.0.1"
	if listen != "" {
		h, p, err := net.SplitHostPort(listen)
		if err != nil {
			h, p = listen, "0" // a host without a port
		}
		if port, err = strconv.Atoi(p); err != nil || port < 0 || port > 65535 {
			return "", 0, nil, fmt.Errorf("--broker-listen %q: bad port", listen)
		}
		host = h
	} else if multi {
		ip, err := routableAddress()
		if err != nil {
			return "", 0, nil, err
		}
		host = ip.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		if multi {
			return "", 0, nil, fmt.Errorf("the launcher places ranks on other hosts, which cannot reach a broker on %s: give --broker-listen a routable address", host)
		}
		return host, port, nil, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// Every interface: the certificate names each address.
		for _, a := range localAddrs() {
			if !a.IsLoopback() && !a.IsLinkLocalUnicast() {
				tlsHosts = append(tlsHosts, a.String())
			}
		}
	} else {
		tlsHosts = append(tlsHosts, host)
	}
	if name, err := os.Hostname(); err == nil {
		tlsHosts = append(tlsHosts, name)
	}
	return host, port, tlsHosts, nil
}

// openMPI reports whether the launcher is Open MPI's (mpirun, mpiexec,
// orterun or prterun), whose ranks on other hosts see only the variables
// passed with -x. MPICH's and Intel's (Hydra) pass the whole environment.
func openMPI(cmd []string) bool {
	name := launcherName(cmd)
	if name == "orterun" || name == "prterun" {
		return true
	}
	if name != "mpirun" && name != "mpiexec" {
		return false
	}
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		return false
	}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		path = r
	}
	b := filepath.Base(path)
	return strings.Contains(b, "orterun") || strings.Contains(b, "prterun") || strings.Contains(b, "openmpi")
}

// forwardEnv adds to a launcher command what makes it pass the variables
// names to every rank: -x NAME for Open MPI; srun passes the whole
// environment unless --export restricts it, then the names are added to
// its list. Other launchers pass the environment as they are.
func forwardEnv(cmd []string, names []string) []string {
	switch {
	case openMPI(cmd):
		out := []string{cmd[0]}
		for _, n := range names {
			out = append(out, "-x", n)
		}
		return append(out, cmd[1:]...)
	case launcherName(cmd) == "srun":
		out := append([]string{}, cmd...)
		for i := 1; i < len(out); i++ {
			a := out[i]
			if a == "--" || !strings.HasPrefix(a, "-") {
				break
			}
			val, ok := strings.CutPrefix(a, "--export=")
			if !ok {
				continue
			}
			switch {
			case val == "ALL" || strings.HasPrefix(val, "ALL,"):
			case val == "NONE" || val == "NIL":
				out[i] = "--export=" + strings.Join(names, ",")
			default:
				out[i] = "--export=" + val + "," + strings.Join(names, ",")
			}
		}
		return out
	}
	return cmd
}

// launcherEnv is what the launcher itself needs to give the collectors
// time to publish once interrupted. Open MPI's mpirun, signalled, waits
// its kill delay (1 s by default), sends the ranks SIGTERM, waits it again
// and kills them: a fifth of the stop timeout each puts the SIGTERM early
// and leaves the collectors as long to publish, well before run ends the
// launcher (at two thirds).
func launcherEnv(cmd []string, stop time.Duration) []string {
	const v = "OMPI_MCA_odls_base_sigkill_timeout"
	if !openMPI(cmd) || os.Getenv(v) != "" {
		return nil
	}
	s := max(1, int(math.Round(stop.Seconds()/5)))
	slog.Debug("Open MPI's kill delay", v, s)
	return []string{fmt.Sprintf("%s=%d", v, s)}
}
