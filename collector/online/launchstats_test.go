package online

import (
	"bytes"
	"math/big"
	"os"
	"strconv"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

func TestTimeBucket(t *testing.T) {
	for _, tc := range []struct {
		t    uint64
		want int
	}{{1, 0}, {2, 4}, {3, 6}, {4, 8}, {5, 9}, {7, 11}, {8, 12}, {1000, 4*9 + 3}, {1 << 40, 160}} {
		if got := TimeBucket(tc.t); got != tc.want {
			t.Errorf("TimeBucket(%d) = %d, want %d", tc.t, got, tc.want)
		}
	}
	// Every time lies in [low(i), low(i+1)) of its bucket.
	for x := uint64(1); x < 5000; x += 7 {
		i := TimeBucket(x)
		if lo, hi := TimeBucketLow(i), TimeBucketLow(i+1); float64(x) < lo || float64(x) >= hi {
			t.Fatalf("%d in bucket %d = [%g, %g)", x, i, lo, hi)
		}
	}
}

// Launch configurations, cubin attributes (the real spill cubin) and the
// instances' times reach the kernel context as sums whose quotients are
// the per-launch means, and the squares give the exact variance.
func TestLaunchStats(t *testing.T) {
	cubin, err := os.ReadFile("../../testdata/sass/spill/spill.cubin")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := rawstream.NewWriter(&buf)
	put := func(f rawstream.Frame) {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	put(&rawstream.Hello{Version: 1, Mode: rawstream.ModePCSampling, Rank: 0})
	put(&rawstream.Module{ModuleID: 1, ContentKey: 7, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin})
	put(&rawstream.Function{FunctionID: 1, ModuleID: 1, Name: "_Z20accumulators_spilledPKfPfii"})
	put(&rawstream.Function{FunctionID: 2, ModuleID: 1, Name: "_Z9not_therev"})
	times := []uint64{1000, 3000, 3001, 5_000_000_000} // the last one's square overflows 64 bits
	for i, d := range times {
		id := uint64(i + 1)
		put(&rawstream.Launch{LaunchID: id, FunctionID: 1, Grid: [3]uint32{uint32(100 * (i + 1)), 2, 1}, Block: [3]uint32{128, 2, 1}, SharedBytes: uint32(1024 * i), Host: []uint64{0x400000}})
		put(&rawstream.KernelEnd{LaunchID: id, StartNS: 10, EndNS: 10 + d})
	}
	put(&rawstream.Launch{LaunchID: 9, FunctionID: 2, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Host: []uint64{0x400000}})
	put(&rawstream.KernelEnd{LaunchID: 9, StartNS: 10, EndNS: 20})
	put(&rawstream.End{})
	p := analyse(t, buf.Bytes(), 2, 3, nil)
	var k, other *profile.Node
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindKernel {
			if n.Frame.Function == "_Z20accumulators_spilledPKfPfii" {
				k = n
			} else {
				other = n
			}
		}
	}
	if k == nil || other == nil {
		t.Fatal("kernel nodes missing")
	}
	m := k.Metrics
	for _, c := range []struct {
		m    profile.MetricID
		want uint64
	}{
		{profile.LaunchBlockThreads, 4 * 256}, {profile.LaunchGridBlocks, 2 * (100 + 200 + 300 + 400)}, {profile.LaunchSharedDynamic, 1024 * (0 + 1 + 2 + 3)},
		{profile.LaunchWithAttrs, 4}, {profile.LaunchRegs, 4 * 32}, {profile.LaunchMaxRegs, 4 * 32}, {profile.LaunchFrameBytes, 4 * 80}, {profile.LaunchSharedStatic, 0},
	} {
		if got := m.Get(c.m); got != c.want {
			t.Errorf("%s = %d, want %d", c.m.Name(), got, c.want)
		}
	}
	// A function the cubin does not have: configuration only.
	if other.Metrics.Get(profile.LaunchWithAttrs) != 0 || other.Metrics.Get(profile.LaunchBlockThreads) != 32 {
		t.Errorf("unknown function: %v", other.Metrics)
	}
	sq := new(big.Int).Lsh(new(big.Int).SetUint64(m.Get(GPUTimeSqHi)), 32)
	sq.Add(sq, new(big.Int).SetUint64(m.Get(GPUTimeSqLo)))
	want := new(big.Int)
	for _, d := range times {
		x := new(big.Int).SetUint64(d)
		want.Add(want, x.Mul(x, x))
	}
	if sq.Cmp(want) != 0 {
		t.Errorf("sum of squares %v, want %v", sq, want)
	}
	var inHist uint64
	for _, d := range times {
		if m.Get(profile.Metric(TimeHistPrefix+strconv.Itoa(TimeBucket(d)))) == 0 {
			t.Errorf("no histogram count for %d ns", d)
		}
	}
	for _, mv := range m {
		if strings.HasPrefix(mv.ID.Name(), TimeHistPrefix) {
			inHist += mv.V
		}
	}
	if inHist != uint64(len(times)) {
		t.Errorf("%d instances in the histogram, want %d", inHist, len(times))
	}
}
