package launcher

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RankVar is an environment variable a launcher gives each rank, with the
// variable that holds the rank count beside it.
type RankVar struct {
	Rank, Size string
	// NeedsSize: the rank variable counts only when Size is set too
	// (RANK is a common enough name to be set for other reasons).
	NeedsSize bool
}

// RankVars are read in this order: torchrun and torch.distributed.launch
// (RANK, WORLD_SIZE), Open MPI, PMIx, MPICH/Hydra (PMI), Slurm. RANK
// comes first because under `srun torchrun` a worker has both, and
// SLURM_PROCID is then the node's task, not the worker's rank.
var RankVars = []RankVar{
	{Rank: "RANK", Size: "WORLD_SIZE", NeedsSize: true},
	{Rank: "OMPI_COMM_WORLD_RANK", Size: "OMPI_COMM_WORLD_SIZE"},
	{Rank: "PMIX_RANK", Size: "OMPI_COMM_WORLD_SIZE"},
	{Rank: "PMI_RANK", Size: "PMI_SIZE"},
	{Rank: "SLURM_PROCID", Size: "SLURM_NTASKS"},
}

// maxRank bounds a rank read from outside (ids are int32 and summaries
// keep ranks in 31 bits).
const maxRank = 1 << 30

// Rank is a rank read from an environment.
type Rank struct {
	Rank int32
	Size int    // the rank count beside it, 0 if not set
	Var  string // the variable it came from
}

// RankOf returns the first of RankVars set in getenv. ok is false when
// none is; err names a variable whose value is not a rank.
func RankOf(getenv func(string) string) (r Rank, ok bool, err error) {
	return rankOf(getenv, nil)
}

// OwnRankOf is RankOf for a process started under the collector: a
// variable with the same value in the collector's own environment (self)
// was inherited from the launcher that started the collector, so it says
// which rank the collector is, not which the process is, and is skipped.
func OwnRankOf(proc, self func(string) string) (r Rank, ok bool, err error) {
	return rankOf(proc, self)
}

func rankOf(getenv, self func(string) string) (Rank, bool, error) {
	for _, v := range RankVars {
		s := getenv(v.Rank)
		if s == "" || (v.NeedsSize && getenv(v.Size) == "") {
			continue
		}
		if self != nil && self(v.Rank) == s {
			continue
		}
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r < 0 || r > maxRank {
			return Rank{Var: v.Rank}, false, fmt.Errorf("environment %s=%q is not a rank", v.Rank, s)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(getenv(v.Size)))
		if n < 0 || n > maxRank {
			n = 0
		}
		return Rank{Rank: int32(r), Size: n, Var: v.Rank}, true, nil
	}
	return Rank{}, false, nil
}

// ProcessEnv reads the environment a process was started with
// (/proc/PID/environ: the variables its launcher gave it; later changes
// the process made itself are not there).
func ProcessEnv(pid int) (func(string) string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, err
	}
	return EnvOf(b), nil
}

// EnvOf parses NUL-separated NAME=VALUE entries (the /proc environ form).
func EnvOf(b []byte) func(string) string {
	m := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte{'='}); ok && len(k) > 0 {
			m[string(k)] = string(v)
		}
	}
	return func(k string) string { return m[k] }
}
