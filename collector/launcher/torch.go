// Package launcher recognises the launchers that start several ranks as
// processes of one command (PyTorch's torchrun and its module forms) and
// reads how many ranks they start. `gpuprof run` uses it to plan the
// reduction tree; `gpuprof collect` to know which ranks a command it wraps
// should produce. See docs/launchers.md.
package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Torch is what a torch launcher command line says.
type Torch struct {
	// Args are the launcher's own arguments (after torchrun, or after
	// python ... -m torch.distributed.run).
	Args []string
	// World is the number of ranks it starts (nnodes × nproc per node),
	// 0 when the command does not say (elastic node ranges, nproc "cpu");
	// Unknown then says why.
	World   int
	Unknown string
}

// torchModules are the module names `python -m` runs a torch launcher by.
var torchModules = map[string]bool{"torch.distributed.run": true, "torch.distributed.launch": true}

var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

// ParseTorch reports whether cmd starts a torch launcher (torchrun,
// python -m torch.distributed.run, python -m torch.distributed.launch) and
// reads its rank count. getenv supplies torchrun's PET_ variables and
// CUDA_VISIBLE_DEVICES (nil: os.Getenv).
func ParseTorch(cmd []string, getenv func(string) string) (Torch, bool) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if len(cmd) == 0 {
		return Torch{}, false
	}
	args, ok := torchArgs(cmd)
	if !ok {
		return Torch{}, false
	}
	t := Torch{Args: args}
	t.World, t.Unknown = torchWorld(args, getenv)
	return t, true
}

// torchArgs returns the launcher's own arguments if cmd is a torch launcher.
func torchArgs(cmd []string) ([]string, bool) {
	base := filepath.Base(cmd[0])
	if base == "torchrun" {
		return cmd[1:], true
	}
	if !pythonName.MatchString(base) {
		return nil, false
	}
	// The interpreter's own options come before -m.
	for i := 1; i < len(cmd); i++ {
		a := cmd[i]
		switch {
		case a == "-m" && i+1 < len(cmd):
			return cmd[i+2:], torchModules[cmd[i+1]]
		case strings.HasPrefix(a, "-m"):
			return cmd[i+1:], torchModules[a[2:]]
		case a == "-X" || a == "-W":
			i++ // a value follows
		case a == "-c" || a == "-" || !strings.HasPrefix(a, "-"):
			return nil, false // a command string, stdin or a script
		}
	}
	return nil, false
}

// torchValueOpts are torchrun's options that take a value (underscores
// written as hyphens). Options not listed take none.
var torchValueOpts = map[string]bool{
	"--nnodes": true, "--nproc-per-node": true, "--rdzv-backend": true, "--rdzv-endpoint": true, "--rdzv-id": true,
	"--rdzv-conf": true, "--max-restarts": true, "--monitor-interval": true, "--start-method": true,
	"--event-log-handler": true, "--role": true, "--log-dir": true, "-r": true, "--redirects": true, "-t": true, "--tee": true,
	"--local-ranks-filter": true, "--node-rank": true, "--master-addr": true, "--master-port": true, "--local-addr": true,
	"--logs-specs": true, "--numa-binding": true, "--signals-to-handle": true,
}

// torchFlags are torchrun's options that take no value.
var torchFlags = map[string]bool{
	"--standalone": true, "-m": true, "--module": true, "--no-python": true, "--run-path": true, "--use-env": true,
	"--virtual-local-rank": true, "-h": true, "--help": true,
}

// torchWorld reads nnodes and nproc-per-node (options, else torchrun's
// PET_ environment variables, else its defaults of 1 and 1).
func torchWorld(args []string, getenv func(string) string) (int, string) {
	nnodes, nproc := getenv("PET_NNODES"), getenv("PET_NPROC_PER_NODE")
	if nnodes == "" {
		nnodes = "1"
	}
	if nproc == "" {
		nproc = "1"
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "--" {
			break // the training script: the rest is its own
		}
		name, val, hasEq := strings.Cut(a, "=")
		if strings.HasPrefix(name, "--") {
			name = "--" + strings.ReplaceAll(name[2:], "_", "-")
		}
		switch {
		case torchFlags[name]:
			continue
		case torchValueOpts[name]:
			if !hasEq {
				if i+1 >= len(args) {
					return 0, fmt.Sprintf("torch launcher option %s has no value", name)
				}
				i++
				val = args[i]
			}
		default:
			return 0, fmt.Sprintf("torch launcher option %s is not one gpuprof knows", name)
		}
		switch name {
		case "--nnodes":
			nnodes = val
		case "--nproc-per-node":
			nproc = val
		}
	}
	nodes, why := nodeCount(nnodes)
	if nodes == 0 {
		return 0, why
	}
	per, why := procCount(nproc, getenv)
	if per == 0 {
		return 0, why
	}
	return nodes * per, ""
}

func nodeCount(s string) (int, string) {
	lo, hi, isRange := strings.Cut(s, ":")
	a, err1 := strconv.Atoi(lo)
	b := a
	var err2 error
	if isRange {
		b, err2 = strconv.Atoi(hi)
	}
	switch {
	case err1 != nil || err2 != nil || a <= 0:
		return 0, fmt.Sprintf("--nnodes %q is not a node count", s)
	case a != b:
		return 0, fmt.Sprintf("--nnodes %s is an elastic range: the rank count is known only at run time", s)
	}
	return a, ""
}

// procCount reads --nproc-per-node: a number, or "gpu"/"auto", the GPUs
// this node shows the job.
func procCount(s string, getenv func(string) string) (int, string) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 {
			return 0, fmt.Sprintf("--nproc-per-node %d", n)
		}
		return n, ""
	}
	if s == "gpu" || s == "auto" || s == "cuda" {
		if n := VisibleGPUs(getenv); n > 0 {
			return n, ""
		}
		return 0, fmt.Sprintf("--nproc-per-node %s: no GPU found (CUDA_VISIBLE_DEVICES, /dev/nvidia*)", s)
	}
	return 0, fmt.Sprintf("--nproc-per-node %q: not a GPU process count", s)
}

var nvidiaDev = regexp.MustCompile(`^nvidia[0-9]+$`)

// VisibleGPUs counts the GPUs a CUDA process on this node would see:
// the entries of CUDA_VISIBLE_DEVICES when it is set, else the
// /dev/nvidiaN device files (no CUDA library needed).
func VisibleGPUs(getenv func(string) string) int {
	if v := getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		n := 0
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d == "" || d == "-1" {
				break // CUDA stops at the first invalid entry
			}
			n++
		}
		return n
	}
	ents, err := os.ReadDir("/dev")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if nvidiaDev.MatchString(e.Name()) {
			n++
		}
	}
	return n
}
