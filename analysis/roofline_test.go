package analysis

import (
	"math"
	"testing"

	"gpuprof/profile"
)

func TestSweepFloor(t *testing.T) {
	const mb = 1e6
	stream := h100Memory.StreamGBs // 3068.4 GB/s = bytes per ns
	// BlackScholes-like: five 16 MB arrays, 28.3 µs a launch, 50 MiB L2:
	// 80e6 / 3068.4 = 26,072 ns, so nothing that keeps the bytes beats
	// 28,300 / 26,072 = 1.085x.
	ns, ok := sweepFloor(80*mb, 80*mb, 50<<20, 28300, stream)
	if !ok || math.Abs(ns-26072) > 1 {
		t.Fatalf("floor %.0f ns (ok %v), want 26072", ns, ok)
	}
	// A narrower type for one of the five arrays (a quarter of its
	// bytes stay): 68e6 bytes, 22,161 ns.
	if ns, _ := sweepFloor(80*mb, 68*mb, 50<<20, 28300, stream); math.Abs(ns-22161) > 1 {
		t.Fatalf("floor after %.0f ns, want 22161", ns)
	}
	// Objects the L2 holds: no floor.
	if _, ok := sweepFloor(40*mb, 40*mb, 50<<20, 28300, stream); ok {
		t.Fatal("a footprint within the L2 drew a floor")
	}
	// 80 MB in 20 µs would be 4,000 GB/s, above the stream: the kernel
	// cannot be sweeping all of it, so no floor.
	if _, ok := sweepFloor(80*mb, 80*mb, 50<<20, 20000, stream); ok {
		t.Fatal("a footprint the launch cannot have swept drew a floor")
	}
}

func TestKnee(t *testing.T) {
	// The H100's curve: least latency 398.4 ns; 5% over it is 418.3 ns,
	// first passed at 1291.3 GB/s (418.7 ns): the knee is the point
	// before, 669.5 GB/s.
	if k := kneeGBs(h100Memory); k != 669.5 {
		t.Fatalf("knee %.1f GB/s, want 669.5", k)
	}
	// A curve that never rises 5% has its knee at the stream ceiling.
	flat := MemorySpec{Loaded: []LatencyPoint{{100, 400}, {2000, 410}}, StreamGBs: 3000}
	if k := kneeGBs(flat); k != 3000 {
		t.Fatalf("flat curve's knee %.1f, want 3000", k)
	}
}

func TestRoundTripDemand(t *testing.T) {
	// reduce7-like: 64 blocks of 256 threads (under one block an SM), two
	// 128-byte loads a warp in flight: 512 × 256 / 398.4 = 329 GB/s, far
	// below the H100's knee of 669.5 GB/s: a narrower type saves nothing.
	gbs := littleDemand(512, 256, 398.4)
	if math.Abs(gbs-329.0) > 0.5 || gbs >= kneeGBs(h100Memory) {
		t.Fatalf("demand %.1f GB/s against knee %.1f", gbs, kneeGBs(h100Memory))
	}
	// wide_type-like: 132 SMs × 8 blocks × 8 warps with 512 bytes of
	// 8-byte loads each ask for 8448 × 512 / 398.4 = 10,857 GB/s: the
	// waits can be for bandwidth, and the byte model stands.
	if gbs := littleDemand(8448, 512, 398.4); gbs < kneeGBs(h100Memory) {
		t.Fatalf("full-occupancy demand %.0f GB/s below the knee", gbs)
	}
}

func TestMergedObjectAdviceKeepsEachKernelsShare(t *testing.T) {
	obj := profile.ObjectID(7)
	mk := func(k profile.NodeID, frac float64) Advice {
		return Advice{Kind: KindCompression, Hotspots: []Where{{Context: k, Object: &obj}}, red: &redInfo{frac: frac, byKernel: map[profile.NodeID]float64{k: frac}}}
	}
	// One array read as 8-bit values by kernel 1 (an index saves
	// nothing) and as 32-bit values by kernel 2 (1 - 8/32 = 0.75).
	out := mergeObjectInsights([]Advice{mk(1, 0), mk(2, 0.75)})
	if len(out) != 1 {
		t.Fatalf("%d advices, want the two merged", len(out))
	}
	r := out[0].red
	if r.fracIn(1) != 0 || r.fracIn(2) != 0.75 || r.frac != 0.75 {
		t.Fatalf("shares %v %v (max %v), want 0, 0.75 and 0.75", r.fracIn(1), r.fracIn(2), r.frac)
	}
}
