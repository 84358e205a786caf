package analysis

import "sort"

// MemorySpec is what the block-lifetime floor (lifetime.go) needs of a
// GPU's memory system. Its values are measured, not taken from data
// sheets: testdata/cuda/machine.cu probes the GPU and
// testdata/machine/<gpu>.log holds what it printed (docs/machine.md). The
// zero value means "not measured": no floor is drawn.
type MemorySpec struct {
	// DispatchNs is the time an SM takes to start one block of 256
	// threads: a grid of blocks that do nothing runs for blocks/SMs ×
	// DispatchNs (probe "dispatch").
	DispatchNs float64
	// Loaded is the latency of a coalesced load, one 128-byte line per
	// warp, against the bandwidth the whole GPU moves meanwhile, ascending
	// in bandwidth (probe "loaded" with one line per warp, from 2 to 64
	// warps per SM).
	Loaded []LatencyPoint
	// StreamGBs is the streaming read ceiling in GB/s (probe "stream").
	StreamGBs float64
}

// LatencyPoint is one point of a loaded-latency curve.
type LatencyPoint struct {
	GBs float64 // bandwidth in GB/s (bytes per ns)
	Ns  float64 // latency of a load at that bandwidth
}

// Measured reports whether the spec holds measurements.
func (m MemorySpec) Measured() bool { return m.DispatchNs > 0 && len(m.Loaded) >= 2 && m.StreamGBs > 0 }

// LatencyAt is the loaded latency at bandwidth gbs: interpolated between
// the measured points, held at the first one below them, and extended along
// the last two above them (queueing grows there; the bandwidth itself stays
// under StreamGBs wherever the floor asks).
func (m MemorySpec) LatencyAt(gbs float64) float64 {
	c := m.Loaded
	if len(c) == 0 {
		return 0
	}
	if gbs <= c[0].GBs || len(c) == 1 {
		return c[0].Ns
	}
	i := sort.Search(len(c), func(i int) bool { return c[i].GBs >= gbs })
	if i == len(c) {
		i = len(c) - 1
	}
	a, b := c[i-1], c[i]
	return a.Ns + (b.Ns-a.Ns)*(gbs-a.GBs)/(b.GBs-a.GBs)
}

// h100Memory was measured on an H100 80GB HBM3 (SXM5, 132 SMs, driver
// 580, CUDA 13.0) by testdata/cuda/machine.cu: testdata/machine/h100.log,
// which TestH100MemoryMatchesMachineLog checks these numbers against.
var h100Memory = MemorySpec{
	DispatchNs: 80.90,
	Loaded: []LatencyPoint{
		{83.7, 403.8}, {168.7, 400.7}, {339.3, 398.4}, {669.5, 403.8},
		{1291.3, 418.7}, {1827.2, 443.8}, {2246.3, 481.4},
	},
	StreamGBs: 3068.4,
}
