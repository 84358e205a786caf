package online

import (
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// Kernels run as nodes of a CUDA graph launch (LAUNCH flag bit 1) are
// counted at their kernel node, beside all its launches; one without times
// (the redundancy pass lists graph kernels untimed) adds no time.
func TestGraphLaunchesCounted(t *testing.T) {
	a := New(Options{Job: "j", Rank: 0, Workers: 1})
	defer a.Close()
	cubin := []byte("cubin bytes")
	frames := []rawstream.Frame{
		&rawstream.Hello{Version: rawstream.Version, Mode: rawstream.ModeRedundancy, Device: 1, Props: rawstream.DeviceProps{SMs: 132}},
		&rawstream.Module{ModuleID: 5, ContentKey: 1, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin},
		&rawstream.Function{FunctionID: 2, ModuleID: 5, Name: "_Z1kv"},
		&rawstream.Launch{LaunchID: 1, FunctionID: 2, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{32, 1, 1}, Host: []uint64{0x10}},
		&rawstream.KernelEnd{LaunchID: 1, StartNS: 100, EndNS: 300, BlocksTotal: 4},
	}
	for i := uint64(2); i <= 4; i++ {
		frames = append(frames,
			&rawstream.Launch{LaunchID: i, FunctionID: 2, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{32, 1, 1}, Graph: true, Host: []uint64{0x10}},
			&rawstream.KernelEnd{LaunchID: i, BlocksTotal: 4})
	}
	for i, f := range frames {
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := a.Flush(0)
	if err != nil {
		t.Fatal(err)
	}
	var kernels int
	for _, n := range p.Nodes {
		if n.Frame.Kind != profile.KindKernel {
			continue
		}
		kernels++
		if l, g, tm := n.Metrics.Get(profile.GPULaunches), n.Metrics.Get(profile.GPUGraph), n.Metrics.Get(profile.GPUTime); l != 4 || g != 3 || tm != 200 {
			t.Errorf("kernel node: %d launches, %d from graphs, %d ns; want 4, 3, 200", l, g, tm)
		}
	}
	if kernels != 1 {
		t.Errorf("%d kernel nodes, want 1", kernels)
	}
	if ri := p.Ranks[0]; ri == nil || ri.Device != "1" || ri.Props.SMs != 132 {
		t.Errorf("rank provenance %+v, want device 1", ri)
	}
}
