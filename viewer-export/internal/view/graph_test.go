package view

import (
	"testing"

	"gpuprof/profile"
)

// A kernel context's graph launches are named in its label, and said to be
// untimed where the pass could not time them.
func TestGraphMark(t *testing.T) {
	k := func(launches, graph, time uint64) Kernel {
		v := profile.Values{}.Add(profile.GPULaunches, launches).Add(profile.GPUGraph, graph)
		return Kernel{Name: "k", Inclusive: v, Time: time}
	}
	for _, c := range []struct {
		k    Kernel
		want string
	}{
		{k(10, 0, 5), "k"},
		{k(10, 10, 5), "k [CUDA graph]"},
		{k(11, 10, 5), "k [CUDA graph: 10 of 11 launches]"},
		{k(10, 10, 0), "k [CUDA graph: 10 of 10 launches, not timed]"},
	} {
		if got := c.k.Label(); got != c.want {
			t.Errorf("label %q, want %q", got, c.want)
		}
	}
}
