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
