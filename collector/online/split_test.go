package online

import (
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// Shares follow the threads launched: 128 and 384 threads give a quarter
// and three quarters; single samples add up to the shares exactly.
func TestSampleSplitShares(t *testing.T) {
	s := newSampleSplit()
	s.launched(7, 128)
	if s.several() {
		t.Fatal("one context: nothing to split")
	}
	s.launched(3, 384)
	if !s.several() {
		t.Fatal("two contexts: several")
	}
	s.begin()
	got := map[uint32]uint64{}
	add := func(c uint32, k uint64) { got[c] += k }
	s.take(4, add)
	if got[7] != 1 || got[3] != 3 {
		t.Fatalf("4 samples split %v, want 1 to context 7 and 3 to context 3", got)
	}
	for i := 0; i < 8; i++ {
		s.take(1, add)
	}
	if got[7] != 3 || got[3] != 9 {
		t.Fatalf("4 + 8 single samples split %v, want 3 and 9", got)
	}
	// Every count in one sample each: within one of the share at any point.
	for i := 1; i <= 101; i++ {
		s.take(1, add)
		due := float64(12+i) * 0.25
		if d := float64(got[7]) - due; d > 1 || d < -1 {
			t.Fatalf("after %d more: context 7 has %d, due %.2f", i, got[7], due)
		}
	}
}

// The shares come from the launches since the last split; with none since,
// the last shares hold.
func TestSampleSplitWindow(t *testing.T) {
	s := newSampleSplit()
	s.launched(1, 100)
	s.launched(2, 100)
	s.begin() // half and half
	s.launched(2, 50)
	s.begin() // only context 2 launched since
	got := map[uint32]uint64{}
	s.take(10, func(c uint32, k uint64) { got[c] += k })
	if got[1] != 0 || got[2] != 10 {
		t.Fatalf("after a window of context 2 alone: %v, want all 10 to context 2", got)
	}
	s.begin() // nothing launched since: the same shares
	s.take(10, func(c uint32, k uint64) { got[c] += k })
	if got[2] != 20 {
		t.Fatalf("with no launch since: %v, want the previous shares", got)
	}
}

// A kernel launched from two call sites under continuous PC sampling: the
// samples, which carry no launch, go to the two calling contexts by the
// threads each launched (4 and 12 blocks of 128: a quarter and three
// quarters), and kernel times stay with their launches.
func TestContinuousSamplesSplitOverContexts(t *testing.T) {
	cubin := spillCubin(t)
	a, b := []uint64{0x401234}, []uint64{0x405678}
	frames := []rawstream.Frame{
		&rawstream.Hello{Version: 3, Mode: rawstream.ModePCSampling, Flags: rawstream.HelloPCSContinuous},
		&rawstream.Module{ModuleID: 5, ContentKey: 1, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin},
		&rawstream.Function{FunctionID: 2, ModuleID: 5, Name: spillKernel},
		&rawstream.Launch{LaunchID: 1, FunctionID: 2, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, Host: a},
		&rawstream.Launch{LaunchID: 2, FunctionID: 2, Grid: [3]uint32{12, 1, 1}, Block: [3]uint32{128, 1, 1}, Host: b},
		&rawstream.PCSamples{LaunchID: 0, PCs: []rawstream.PCSample{
			{FunctionID: 2, Offset: 0x10, Stalls: []rawstream.StallCount{{Reason: 0, Samples: 16}}},
			{FunctionID: 2, Offset: 0x20, Stalls: []rawstream.StallCount{{Reason: 0, Samples: 1}, {Reason: 1, Samples: 3}}},
		}},
		&rawstream.KernelEnd{LaunchID: 1, StartNS: 100, EndNS: 200},
		&rawstream.KernelEnd{LaunchID: 2, StartNS: 300, EndNS: 600},
		&rawstream.End{},
	}
	p, _ := analyseFrames(t, frames, nil, 0, 0)
	ks := kernels(p)
	if len(ks) != 2 {
		t.Fatalf("%d kernel nodes, want one per call site", len(ks))
	}
	samples := map[uint64]uint64{} // kernel time -> its instructions' samples
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindInstruction {
			samples[p.Nodes[p.KernelOf(n.ID)].Metrics.Get(profile.GPUTime)] += n.Metrics.Get(profile.InstSamples)
		}
	}
	if samples[100] != 5 || samples[300] != 15 {
		t.Errorf("samples by kernel time %v: want 5 with the 4-block launch (100 ns), 15 with the 12-block one (300 ns)", samples)
	}
}

// A sample that names a function never launched (CUPTI names a sample's
// function by its module, the launch by name: two loaded modules with a
// kernel of one name) goes to the function launched under that name, not
// skipped as inconsistent.
func TestContinuousSampleOfAnotherModulesFunction(t *testing.T) {
	cubin := spillCubin(t)
	other := append([]byte(nil), cubin...)
	other[len(other)-1] ^= 0xff // another module's content, the same kernel name
	frames := []rawstream.Frame{
		&rawstream.Hello{Version: 3, Mode: rawstream.ModePCSampling, Flags: rawstream.HelloPCSContinuous},
		&rawstream.Module{ModuleID: 5, ContentKey: 1, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin},
		&rawstream.Function{FunctionID: 2, ModuleID: 5, Name: spillKernel},
		&rawstream.Module{ModuleID: 6, ContentKey: 2, Size: uint32(len(other)), HasBytes: true, Bytes: other},
		&rawstream.Function{FunctionID: 3, ModuleID: 6, Name: spillKernel},
		&rawstream.Launch{LaunchID: 1, FunctionID: 3, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, Host: []uint64{0x401234}},
		&rawstream.PCSamples{LaunchID: 0, PCs: []rawstream.PCSample{
			{FunctionID: 2, Offset: 0x10, Stalls: []rawstream.StallCount{{Reason: 0, Samples: 7}}},
		}},
		&rawstream.KernelEnd{LaunchID: 1, StartNS: 100, EndNS: 200},
		&rawstream.End{},
	}
	a := New(Options{Job: "j", Rank: 0, Workers: 1})
	defer a.Close()
	for i, f := range frames {
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, first := a.Anomalies(); n != 0 {
		t.Fatalf("%d inconsistent frames skipped: %s", n, first)
	}
	p, _ := analyseFrames(t, frames, nil, 0, 0)
	var samples uint64
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindInstruction {
			samples += n.Metrics.Get(profile.InstSamples)
		}
	}
	if samples != 7 {
		t.Errorf("%d samples in the profile, want the 7 of the sample", samples)
	}
}
