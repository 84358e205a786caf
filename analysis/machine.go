package analysis

import (
	"fmt"
	"sort"
	"strings"

	"gpuprof/profile"
)

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

// measuredGPU names the GPU whose memory system the probes measured
// (h100Memory); other GPUs of the same architecture get no memory-based
// floor until their own probe log exists.
const measuredGPU = "NVIDIA H100 80GB HBM3"

// DeviceSpec is the spec of the GPU a profile's ranks ran on: the
// architecture's constants (SpecFor) with the SM count, registers,
// threads and shared memory per SM and the clock taken from what the
// library read off the device, so that GPUs of one compute capability (an
// H100 SXM or PCIe, an H200, a GH200) each get their own figures. It
// returns nil for an unknown architecture, and the architecture's spec
// unchanged when no rank carries device properties (older streams).
func DeviceSpec(p *profile.Profile, sm uint16) *GPUSpec {
	base := SpecFor(sm)
	if base == nil {
		return nil
	}
	for _, r := range p.SortedRanks() {
		ri := p.Ranks[r]
		d := ri.Props
		if d.SMs == 0 {
			continue
		}
		g := *base
		g.Name = strings.TrimPrefix(ri.GPU, "NVIDIA ")
		g.SMs = int(d.SMs)
		if d.RegsPerSM > 0 {
			g.RegsPerSM = int(d.RegsPerSM)
		}
		if d.ThreadsPerSM > 0 {
			g.ThreadsPerSM = int(d.ThreadsPerSM)
		}
		if d.SharedPerSM > 0 {
			g.SharedPerSM = int(d.SharedPerSM)
		}
		if d.ClockKHz > 0 {
			g.ClockGHz = float64(d.ClockKHz) / 1e6
		}
		if d.L2Bytes > 0 {
			g.L2Bytes = int(d.L2Bytes)
		}
		if ri.GPU != measuredGPU || g.SMs != base.SMs {
			g.Memory = MemorySpec{}
		}
		return &g
	}
	return base
}

// Describe says which spec an estimate used, for the report.
func (g GPUSpec) Describe() string {
	mem := "memory system not measured on this GPU (no block-lifetime floor)"
	if g.Memory.Measured() {
		mem = "memory system measured by the probes (docs/machine.md)"
	}
	return fmt.Sprintf("%s: %d SMs, %.0f MHz, %d KB shared memory and %d registers per SM; %s",
		g.Name, g.SMs, g.ClockGHz*1000, g.SharedPerSM>>10, g.RegsPerSM, mem)
}

// GPUSpec is what the occupancy calculation needs of a GPU (CUDA
// programming guide, compute capabilities table).
type GPUSpec struct {
	Name              string
	SMs               int
	Schedulers        int // warp schedulers (sub-partitions) per SM
	RegsPerSM         int
	RegUnit           int // register allocation unit per warp
	MaxRegsPerThread  int
	ThreadsPerSM      int
	BlocksPerSM       int
	SharedPerSM       int // bytes usable by blocks
	SharedPerBlock    int // the most one block may have (opt-in)
	SharedUnit        int // shared memory allocation unit
	SharedReservedBlk int // bytes the system reserves per block
	// ClockGHz is the top SM clock (boost): the fastest any instruction
	// count can issue, for floors in time.
	ClockGHz float64
	// L2Bytes is the L2 cache's size, from the device where the library
	// read it.
	L2Bytes int
	// Memory is the measured memory system (machine.go); zero when not
	// measured.
	Memory MemorySpec
}

// H100 (sm_90, SXM5): 132 SMs, 64K registers, 2048 threads, 32 blocks and
// 228 KB of shared memory per SM, registers allocated 256 per warp, 1980
// MHz boost clock.
var H100 = GPUSpec{Name: "H100", SMs: 132, Schedulers: 4, RegsPerSM: 65536, RegUnit: 256, MaxRegsPerThread: 255,
	ThreadsPerSM: 2048, BlocksPerSM: 32, SharedPerSM: 228 << 10, SharedPerBlock: 227 << 10, SharedUnit: 128, SharedReservedBlk: 1024,
	ClockGHz: 1.98, L2Bytes: 50 << 20, Memory: h100Memory}

// A100 (sm_80, SXM4): 108 SMs, 164 KB of shared memory per SM, 1410 MHz
// boost clock.
var A100 = GPUSpec{Name: "A100", SMs: 108, Schedulers: 4, RegsPerSM: 65536, RegUnit: 256, MaxRegsPerThread: 255,
	ThreadsPerSM: 2048, BlocksPerSM: 32, SharedPerSM: 164 << 10, SharedPerBlock: 163 << 10, SharedUnit: 128, SharedReservedBlk: 1024,
	ClockGHz: 1.41, L2Bytes: 40 << 20}

// SpecFor returns the spec of a compute capability × 10 (nil if unknown).
func SpecFor(sm uint16) *GPUSpec {
	switch sm {
	case 90:
		return &H100
	case 80:
		return &A100
	}
	return nil
}
