package launcher

import (
	"strings"
	"testing"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseTorch(t *testing.T) {
	for _, c := range []struct {
		cmd   string
		env   func(string) string
		torch bool
		world int
		why   string // part of Unknown when world is 0
	}{
		{"torchrun --standalone --nproc_per_node 2 ddp.py", env(), true, 2, ""},
		{"torchrun --standalone --nproc-per-node=4 ddp.py --nproc-per-node 9", env(), true, 4, ""},
		{"/opt/venv/bin/torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint h:29500 train.py", env(), true, 16, ""},
		{"torchrun --nnodes=2:2 --nproc_per_node=4 -m pkg.train", env(), true, 8, ""},
		{"torchrun train.py", env(), true, 1, ""},
		{"torchrun train.py", env("PET_NPROC_PER_NODE", "3", "PET_NNODES", "2"), true, 6, ""},
		{"torchrun --nproc-per-node gpu train.py", env("CUDA_VISIBLE_DEVICES", "0,1,2"), true, 3, ""},
		{"torchrun --nproc-per-node gpu train.py", env("CUDA_VISIBLE_DEVICES", "0,-1,2"), true, 1, ""},
		{"torchrun --nnodes 1:4 --nproc-per-node 2 train.py", env(), true, 0, "elastic"},
		{"torchrun --nproc-per-node cpu train.py", env(), true, 0, "cpu"},
		{"torchrun --frobnicate 3 train.py", env(), true, 0, "--frobnicate"},
		{"torchrun --nproc-per-node", env(), true, 0, "no value"},
		{"python -m torch.distributed.run --nproc-per-node 2 ddp.py", env(), true, 2, ""},
		{"python3 -u -X perf -m torch.distributed.launch --nproc_per_node=2 --use-env ddp.py", env(), true, 2, ""},
		{"python3.12 -mtorch.distributed.run --nproc-per-node 2 ddp.py", env(), true, 2, ""},
		{"python train.py --nproc-per-node 2", env(), false, 0, ""},
		{"python -m pkg.train", env(), false, 0, ""},
		{"python -c 'import torch'", env(), false, 0, ""},
		{"./app -np 3", env(), false, 0, ""},
		{"mpirun -np 2 torchrun x.py", env(), false, 0, ""},
	} {
		got, ok := ParseTorch(strings.Fields(c.cmd), c.env)
		if ok != c.torch || got.World != c.world || (c.why != "" && !strings.Contains(got.Unknown, c.why)) {
			t.Errorf("%s: torch %v world %d (%q), want %v %d (%q)", c.cmd, ok, got.World, got.Unknown, c.torch, c.world, c.why)
		}
	}
}

func TestRankOf(t *testing.T) {
	for _, c := range []struct {
		env  func(string) string
		want Rank
		ok   bool
		bad  bool
	}{
		{env("RANK", "3", "WORLD_SIZE", "4"), Rank{3, 4, "RANK"}, true, false},
		{env("RANK", "3"), Rank{}, false, false},
		{env("RANK", "3", "WORLD_SIZE", "4", "SLURM_PROCID", "1", "SLURM_NTASKS", "2"), Rank{3, 4, "RANK"}, true, false},
		{env("OMPI_COMM_WORLD_RANK", "7", "OMPI_COMM_WORLD_SIZE", "8", "PMIX_RANK", "7"), Rank{7, 8, "OMPI_COMM_WORLD_RANK"}, true, false},
		{env("PMI_RANK", "2", "PMI_SIZE", "x"), Rank{2, 0, "PMI_RANK"}, true, false},
		{env("SLURM_PROCID", "-1"), Rank{Var: "SLURM_PROCID"}, false, true},
		{env("SLURM_PROCID", "99999999999"), Rank{Var: "SLURM_PROCID"}, false, true},
	} {
		got, ok, err := RankOf(c.env)
		if got != c.want || ok != c.ok || (err != nil) != c.bad {
			t.Errorf("%+v: %+v %v %v", c.want, got, ok, err)
		}
	}
}

func TestEnvOf(t *testing.T) {
	e := EnvOf([]byte("A=1\x00B=x=y\x00\x00NOEQ\x00=v\x00C=\x00"))
	if e("A") != "1" || e("B") != "x=y" || e("C") != "" || e("NOEQ") != "" || e("") != "" {
		t.Errorf("parsed wrong: A=%q B=%q", e("A"), e("B"))
	}
}

// The environ of a process can come from anywhere: it must parse without
// panicking, and a rank read from it is always in range.
func FuzzEnvRank(f *testing.F) {
	f.Add([]byte("RANK=1\x00WORLD_SIZE=2\x00"))
	f.Add([]byte("OMPI_COMM_WORLD_RANK=\x00=\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok, err := RankOf(EnvOf(b))
		if ok && (err != nil || r.Rank < 0 || r.Rank > maxRank || r.Size < 0) {
			t.Fatalf("%+v %v", r, err)
		}
	})
}
