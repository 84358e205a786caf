package main

import (
	"reflect"
	"testing"
)

func TestWrapLauncher(t *testing.T) {
	wrap := []string{"gpuprof", "collect", "--job", "j", "--"}
	cases := []struct {
		cmd   []string
		want  []string
		ranks int
	}{
		{[]string{"mpirun", "-np", "64", "./lmp", "-in", "in.lj"},
			[]string{"mpirun", "-np", "64", "gpuprof", "collect", "--job", "j", "--", "./lmp", "-in", "in.lj"}, 64},
		{[]string{"mpirun", "--oversubscribe", "--mca", "btl", "self", "-n=8", "-x", "A=1", "app"},
			[]string{"mpirun", "--oversubscribe", "--mca", "btl", "self", "-n=8", "-x", "A=1", "gpuprof", "collect", "--job", "j", "--", "app"}, 8},
		{[]string{"./app", "-np", "3"}, []string{"gpuprof", "collect", "--job", "j", "--", "./app", "-np", "3"}, 1},
		{[]string{"srun", "--ntasks", "4", "--", "app"}, []string{"srun", "--ntasks", "4", "--", "gpuprof", "collect", "--job", "j", "--", "app"}, 4},
		// A torch launcher is wrapped whole: one collector, every worker a rank.
		{[]string{"torchrun", "--standalone", "--nproc_per_node", "2", "ddp.py"},
			[]string{"gpuprof", "collect", "--job", "j", "--", "torchrun", "--standalone", "--nproc_per_node", "2", "ddp.py"}, 2},
		{[]string{"python3", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4", "train.py"},
			[]string{"gpuprof", "collect", "--job", "j", "--", "python3", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4", "train.py"}, 4},
		// srun starts one torchrun per node; the ranks are torchrun's workers.
		{[]string{"srun", "-N", "2", "--ntasks-per-node", "1", "torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29500", "t.py"},
			[]string{"srun", "-N", "2", "--ntasks-per-node", "1", "gpuprof", "collect", "--job", "j", "--", "torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29500", "t.py"}, 8},
		// An elastic range: the count is unknown (run then asks for --ranks).
		{[]string{"torchrun", "--nnodes", "1:2", "t.py"}, []string{"gpuprof", "collect", "--job", "j", "--", "torchrun", "--nnodes", "1:2", "t.py"}, 0},
	}
	for _, c := range cases {
		got, ranks, err := wrapLauncher(c.cmd, wrap)
		if err != nil || !reflect.DeepEqual(got, c.want) || ranks != c.ranks {
			t.Errorf("%v:\n got %v ranks %d err %v\nwant %v ranks %d", c.cmd, got, ranks, err, c.want, c.ranks)
		}
	}
	if _, _, err := wrapLauncher([]string{"mpirun", "-np", "x", "app"}, wrap); err == nil {
		t.Error("bad rank count accepted")
	}
	if _, _, err := wrapLauncher([]string{"mpirun", "-np", "2"}, wrap); err == nil {
		t.Error("launcher without application accepted")
	}
}
