package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"

	"gpuprof/collector/launcher"
)

// Launcher options that take a value, for mpirun/mpiexec (Open MPI, MPICH)
// and srun: the wrapper must skip them to find the application.
var launcherValueOpts = map[string]int{
	"-np": 1, "-n": 1, "-c": 1, "--np": 1, "-N": 1, "--npernode": 1, "-npernode": 1, "--npersocket": 1,
	"-H": 1, "--host": 1, "-host": 1, "--hostfile": 1, "-hostfile": 1, "--machinefile": 1, "-machinefile": 1, "-f": 1,
	"--map-by": 1, "--bind-to": 1, "--rank-by": 1, "-x": 1, "--wdir": 1, "-wdir": 1, "--prefix": 1, "--report-bindings": 0,
	"--mca": 2, "-mca": 2, "--gmca": 2, "-gmca": 2, "--output-filename": 1, "--tag-output": 0, "-ppn": 1, "-genv": 2, "-env": 2,
	"--ntasks": 1, "--nodes": 1, "--ntasks-per-node": 1, "--cpus-per-task": 1, "--gpus-per-task": 1, "-p": 1, "--partition": 1,
	"--personality": 1, "--preload-files": 1, "--path": 1, "-path": 1, "--app": 1,
	"-w": 1, "--nodelist": 1, "--export": 1,
}

var launchers = map[string]bool{"mpirun": true, "mpiexec": true, "orterun": true, "prterun": true, "srun": true, "mpiexec.hydra": true}

// wrapLauncher inserts wrap (e.g. gpuprof collect ... --) before the
// application in a launcher command line, after the launcher's own options,
// and returns the new command and the rank count it asks for (0 if it does
// not say). A torch launcher (torchrun, python -m torch.distributed.run or
// .launch) is wrapped whole: one collector measures each of its workers as
// a rank, and the count is nnodes × nproc-per-node; under mpirun or srun
// (one torchrun per node) the count is still torchrun's. Any other command
// runs as one rank, wrap first; each further CUDA process it starts
// becomes a rank of its own beyond the count (docs/launchers.md).
func wrapLauncher(cmd []string, wrap []string) ([]string, int, error) {
	if len(cmd) == 0 {
		return nil, 0, fmt.Errorf("no command after --")
	}
	if !launchers[filepath.Base(cmd[0])] {
		n := 1
		if t, ok := launcher.ParseTorch(cmd, nil); ok {
			n = t.World
			if n == 0 {
				slog.Warn("torch launcher: rank count unknown", "why", t.Unknown)
			}
		}
		return append(append([]string{}, wrap...), cmd...), n, nil
	}
	ranks := 0
	i := 1
	for i < len(cmd) {
		a := cmd[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
		name, val, hasEq := strings.Cut(a, "=")
		n, known := launcherValueOpts[name]
		if !known && strings.HasPrefix(name, "--") && hasEq {
			n = 0
		}
		if hasEq {
			n = max(n-1, 0)
		}
		if name == "-np" || name == "-n" || name == "--np" || name == "--ntasks" {
			v := val
			if !hasEq && i+1 < len(cmd) {
				v = cmd[i+1]
			}
			r, err := strconv.Atoi(v)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: rank count %q is not a number", name, v)
			}
			ranks = r
		}
		i += 1 + n
	}
	if i >= len(cmd) {
		return nil, 0, fmt.Errorf("%s: no application found after the launcher's options", cmd[0])
	}
	if t, ok := launcher.ParseTorch(cmd[i:], nil); ok {
		// One torchrun per node or task: the ranks are its workers.
		ranks = t.World
		if ranks == 0 {
			slog.Warn("torch launcher: rank count unknown", "why", t.Unknown)
		}
	}
	out := append([]string{}, cmd[:i]...)
	out = append(out, wrap...)
	out = append(out, cmd[i:]...)
	return out, ranks, nil
}
