package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"gpuprof/broker"
	"gpuprof/collector"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
	export "gpuprof/viewer-export"
)

// run checks everything it can before it starts anything (broker,
// reduction tree, launcher): a run that cannot measure fails at once, in
// one line naming the problem, instead of after the rank timeout with an
// empty report.

// runChecks holds what run's flags asked for beyond jobConfig.
type runChecks struct {
	mode                          string
	blockSampling, kernelSampling int
	reuseSampling                 int
	batchInterval                 time.Duration
	replay                        string
	force                         bool
	injectLib                     string // --inject ("": collector.DefaultInjectLib())
	hostSymbols                   string // --host-symbols
}

// modes are the values --mode takes.
var modes = []string{"redundancy", "pcsampling", "hybrid", "all"}

// checkMode accepts "" (the library's default, redundancy) and modes.
func checkMode(m string) error {
	if m == "" {
		return nil
	}
	if m == "all" {
		return nil
	}
	if _, err := rawstream.ParseMode(m); err != nil {
		return fmt.Errorf("--mode %q: want %s", m, strings.Join(modes, ", "))
	}
	return nil
}

// checkRun validates run's configuration and sets cfg.Ranks from the
// launcher when --ranks was not given.
func checkRun(cfg *jobConfig, c runChecks) error {
	if len(cfg.Launcher) == 0 {
		return errors.New("no command to profile: give the launcher and application after --, as in 'gpuprof run -o out -- mpirun -np 4 ./app'")
	}
	if err := checkMode(c.mode); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
		min  int64
	}{
		{"--fan-in", int64(cfg.FanIn), 2}, {"--ranks", int64(cfg.Ranks), 0}, {"--replicas", int64(cfg.Replicas), 0},
		{"--block-sampling", int64(c.blockSampling), 0}, {"--kernel-sampling", int64(c.kernelSampling), 0},
		{"--reuse-sampling", int64(c.reuseSampling), 0}, {"--stream-max-bytes", cfg.StreamMaxBytes, 0},
	} {
		if f.v < f.min {
			return fmt.Errorf("%s %d: want at least %d", f.name, f.v, f.min)
		}
	}
	if cfg.AnalysisWait < 0 {
		return fmt.Errorf("--analysis-timeout %v: want a duration, 0 for no bound", cfg.AnalysisWait)
	}
	if cfg.RankWait <= 0 {
		return fmt.Errorf("--rank-timeout %v: want a positive duration", cfg.RankWait)
	}
	if cfg.StopWait <= 0 {
		return fmt.Errorf("--stop-timeout %v: want a positive duration", cfg.StopWait)
	}
	if cfg.Listen != "" {
		if _, _, _, err := brokerAddress(cfg.Listen, false); err != nil {
			return err
		}
	}
	if err := checkCollectorCreds(cfg); err != nil {
		return err
	}
	if c.batchInterval < 0 {
		return fmt.Errorf("--batch-interval %v: want a positive duration", c.batchInterval)
	}
	if cfg.Job != "" {
		if err := broker.ValidateJob(cfg.Job); err != nil {
			return fmt.Errorf("--job: %w", err)
		}
	}
	if err := checkOutDir(cfg.Out, c.force); err != nil {
		return err
	}
	for _, f := range []struct{ flag, list string }{{"--sass", cfg.SASS}, {"--host-symbols", c.hostSymbols}, {"--collector-nkey", cfg.CollectorNKey}, {"--collector-creds", cfg.CollectorCreds}} {
		if err := checkFiles(f.flag, f.list); err != nil {
			return err
		}
	}
	lookPath := exec.LookPath
	var ranks int
	var err error
	if c.replay != "" {
		// The collectors replay: nothing after the launcher's options runs.
		if err := checkReplay(c.replay); err != nil {
			return err
		}
		_, ranks, err = wrapLauncher(append(append([]string{}, cfg.Launcher...), "replay"), []string{"collect"})
		if err != nil {
			return err
		}
		if err := checkCommand("launcher", cfg.Launcher[0], "", lookPath); err != nil {
			return err
		}
	} else {
		if err := checkInjectLib(c.injectLib, c.mode); err != nil {
			return err
		}
		var app, dir string
		app, dir, ranks, err = applicationOf(cfg.Launcher)
		if err != nil {
			return err
		}
		if app != cfg.Launcher[0] {
			if err := checkCommand("launcher", cfg.Launcher[0], "", lookPath); err != nil {
				return err
			}
		}
		if err := checkCommand("application", app, dir, lookPath); err != nil {
			return err
		}
	}
	if cfg.Ranks == 0 {
		cfg.Ranks = ranks
	}
	if cfg.Ranks == 0 {
		return fmt.Errorf("%s does not say how many ranks it starts: give --ranks N", cfg.Launcher[0])
	}
	return checkBroker(cfg.Broker.URLs, time.Second)
}

// checkOutDir refuses an output directory that already holds anything,
// unless force is set: then gpuprof's own outputs in it are removed (and
// nothing else), so a new run cannot be mixed with an old one.
func checkOutDir(dir string, force bool) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) && !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("output %s is not a directory", dir)
		}
		return fmt.Errorf("output directory: %w", err)
	case len(ents) == 0:
		return nil
	case !force:
		return fmt.Errorf("output directory %s exists and is not empty: give --force to replace gpuprof's outputs in it, or another -o", dir)
	}
	for _, name := range outputNames {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("--force: %w", err)
		}
	}
	return nil
}

// outputNames are the files and directories run and demo write into an
// output directory (--force removes these, and only these).
var outputNames = []string{profile.FileName, profile.FileName + ".tmp", export.DatabaseDir, export.PprofFile, export.JSONFile,
	export.HTMLFile, export.TextFile, ModulesDir, "broker", "synthetic-streams"}

// checkFiles checks that every file of a comma-separated list exists.
func checkFiles(flag, list string) error {
	if list == "" {
		return nil
	}
	for _, f := range strings.Split(list, ",") {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s %s: %w", flag, f, unwrapPath(err))
		}
	}
	return nil
}

// checkReplay checks rank 0's recorded stream (every rank's path has the
// same form).
func checkReplay(pattern string) error {
	for _, f := range strings.Split(pattern, ",") {
		p := collector.ExpandRank(f, 0)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("--replay %s: %w", p, unwrapPath(err))
		}
	}
	return nil
}

// checkInjectLib finds the injection library the collectors will load
// (and, for value tracing, the device patches beside it).
func checkInjectLib(lib, mode string) error {
	how := "give --inject FILE, set GPUPROF_INJECT, or build it with 'make inject' (needs the CUDA toolkit)"
	if lib == "" {
		lib = collector.DefaultInjectLib()
	}
	st, err := os.Stat(lib)
	if err != nil {
		return fmt.Errorf("injection library %s not found: %s", lib, how)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("injection library %s is not a file: %s", lib, how)
	}
	if mode == "" || mode == "redundancy" || mode == "all" {
		if os.Getenv("GPUPROF_PATCH_FATBIN") == "" {
			patch := filepath.Join(filepath.Dir(lib), "gpuprof_patch.fatbin")
			if _, err := os.Stat(patch); err != nil {
				return fmt.Errorf("value tracing needs %s beside the injection library: rebuild with 'make inject', or use --mode pcsampling", patch)
			}
		}
	}
	return nil
}

// applicationOf finds the application in a launcher command line (what
// wrapLauncher wraps), the working directory the launcher gives it (""
// for the current one) and the rank count the launcher asks for.
func applicationOf(cmd []string) (app, dir string, ranks int, err error) {
	const mark = "\x00gpuprof"
	out, ranks, err := wrapLauncher(cmd, []string{mark})
	if err != nil {
		return "", "", 0, err
	}
	for i, a := range out {
		if a == mark && i+1 < len(out) {
			app = out[i+1]
			for j := 1; j < i; j++ {
				switch o, v, eq := strings.Cut(out[j], "="); o {
				case "--wdir", "-wdir", "--chdir", "-D":
					if eq {
						dir = v
					} else if j+1 < i {
						dir = out[j+1]
					}
				}
			}
			return app, dir, ranks, nil
		}
	}
	return "", "", 0, fmt.Errorf("%s: no application found after the launcher's options", cmd[0])
}

// checkCommand checks that what names a program that can be started: a
// path (relative to dir, if given) to an executable file, or a name found
// on PATH.
func checkCommand(what, name, dir string, lookPath func(string) (string, error)) error {
	if !strings.Contains(name, "/") {
		if _, err := lookPath(name); err != nil {
			return fmt.Errorf("%s %q not found on PATH", what, name)
		}
		return nil
	}
	p := name
	if dir != "" && !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %v", what, p, unwrapPath(err))
	case st.IsDir():
		return fmt.Errorf("%s %s is a directory", what, p)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s %s is not executable (chmod +x %s?)", what, p, p)
	}
	return nil
}

// unwrapPath drops the *fs.PathError's operation and path (the caller
// names the file): "no such file or directory".
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkBroker dials every given broker URL (none: the embedded broker,
// nothing to check) and fails when none answers.
func checkBroker(urls []string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = time.Second
	}
	var list []string
	for _, u := range urls {
		list = append(list, strings.Split(u, ",")...)
	}
	var errs []string
	for _, u := range list {
		addr, err := brokerAddr(u)
		if err != nil {
			return fmt.Errorf("--nats %s: %w", u, err)
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			c.Close()
			return nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", u, unwrapNet(err)))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("NATS broker unreachable (%s)", strings.Join(errs, "; "))
}

// brokerAddr is a NATS URL's host:port (port 4222 if none).
func brokerAddr(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Hostname() == "" {
		return "", errors.New("no host")
	}
	port := u.Port()
	if port == "" {
		port = "4222"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

func unwrapNet(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}
