package analysis

import (
	"fmt"
	"math"

	"gpuprof/profile"
)

// Limiters of occupancy.
const (
	LimitRegisters = "registers per thread"
	LimitShared    = "shared memory per block"
	LimitThreads   = "threads per block" // the per-SM thread limit with this block size
	LimitBlocks    = "blocks per SM"
)

// Occupancy is how many blocks and warps of a launch configuration an SM
// holds, and what limits it.
type Occupancy struct {
	BlocksPerSM, WarpsPerSM int
	Limiter                 string
	// By limiter: the blocks per SM each resource alone allows.
	ByRegs, ByShared, ByThreads, ByBlocks int
}

// Fraction is the occupancy: resident warps over the SM's maximum.
func (o Occupancy) Fraction(g GPUSpec) float64 {
	return float64(o.WarpsPerSM) / float64(g.ThreadsPerSM/32)
}

// Occupancy computes the resident blocks per SM of blocks of `threads`
// threads using `regs` registers per thread and `shared` bytes of shared
// memory per block (static and dynamic), as the CUDA occupancy calculator
// does.
func (g GPUSpec) Occupancy(threads, regs, shared int) (Occupancy, error) {
	if threads <= 0 || threads > 1024 {
		return Occupancy{}, fmt.Errorf("occupancy: %d threads per block", threads)
	}
	if regs < 0 || regs > g.MaxRegsPerThread || shared < 0 || shared > g.SharedPerBlock {
		return Occupancy{}, fmt.Errorf("occupancy: %d registers per thread, %d bytes of shared memory per block exceed the %s's limits", regs, shared, g.Name)
	}
	warps := (threads + 31) / 32
	o := Occupancy{ByBlocks: g.BlocksPerSM, ByThreads: g.ThreadsPerSM / (32 * warps)}
	o.ByRegs = g.BlocksPerSM
	if regs > 0 {
		perWarp := ceilTo(regs*32, g.RegUnit)
		o.ByRegs = (g.RegsPerSM / perWarp) / warps
	}
	o.ByShared = g.BlocksPerSM
	if shared > 0 {
		o.ByShared = g.SharedPerSM / ceilTo(shared+g.SharedReservedBlk, g.SharedUnit)
	}
	// A resource limits only when it allows strictly fewer blocks than
	// those before it: at full occupancy the per-SM thread limit is named.
	o.BlocksPerSM, o.Limiter = o.ByBlocks, LimitBlocks
	for _, c := range []struct {
		n int
		l string
	}{{o.ByThreads, LimitThreads}, {o.ByShared, LimitShared}, {o.ByRegs, LimitRegisters}} {
		if c.n < o.BlocksPerSM {
			o.BlocksPerSM, o.Limiter = c.n, c.l
		}
	}
	o.WarpsPerSM = o.BlocksPerSM * warps
	return o, nil
}

func ceilTo(x, unit int) int { return (x + unit - 1) / unit * unit }

// LaunchConfig is a kernel context's mean launch configuration, from the
// launch.* metrics the collector adds (docs/advice.md).
type LaunchConfig struct {
	Launches   float64
	Threads    float64 // per block
	GridBlocks float64
	Regs       float64 // per thread; 0 when the cubin was not available
	MaxRegs    float64 // the compiler's register limit (0: none stated)
	FrameBytes float64 // local stack per thread
	Shared     float64 // static + dynamic per block
	HasAttrs   bool
}

// LaunchConfig returns kernel context k's mean launch configuration (ok
// false when the profile has none: no launch.* metrics).
func (x *Index) LaunchConfig(k profile.NodeID) (LaunchConfig, bool) {
	n := x.P.Nodes[k]
	if n == nil {
		return LaunchConfig{}, false
	}
	vs := n.Metrics
	l := float64(vs.Get(profile.GPULaunches))
	th := float64(vs.Get(profile.LaunchBlockThreads))
	if l == 0 || th == 0 {
		return LaunchConfig{}, false
	}
	c := LaunchConfig{Launches: l, Threads: th / l, GridBlocks: float64(vs.Get(profile.LaunchGridBlocks)) / l, Shared: float64(vs.Get(profile.LaunchSharedDynamic)) / l}
	if a := float64(vs.Get(profile.LaunchWithAttrs)); a > 0 {
		c.HasAttrs = true
		c.Regs = float64(vs.Get(profile.LaunchRegs)) / a
		c.MaxRegs = float64(vs.Get(profile.LaunchMaxRegs)) / a
		c.FrameBytes = float64(vs.Get(profile.LaunchFrameBytes)) / a
		c.Shared += float64(vs.Get(profile.LaunchSharedStatic)) / a
	}
	return c, true
}

// Occupancy of the configuration on g.
func (c LaunchConfig) Occupancy(g GPUSpec) (Occupancy, error) {
	return g.Occupancy(int(math.Round(c.Threads)), int(math.Round(c.Regs)), int(math.Round(c.Shared)))
}

// schedulerModel is GPA's parallelism model (eq. 7-11) for one kernel:
// a scheduler with W resident warps, each ready to issue with probability
// rI in a cycle, issues with probability I(W) = 1-(1-rI)^W (eq. 9/10).
// The kernel's work (its warps' instructions) is fixed, so its time is the
// work over the issue rate of all busy schedulers:
//
//	time ∝ work / (busy schedulers × I(W))
//
// This is eq. 11, S = C_I / C_W × f, where the change of warps per
// scheduler C_W cancels against the change in the number of waves (a
// scheduler with fewer resident warps runs more waves of them), and f is
// the change in busy schedulers (a grid of fewer blocks than SMs leaves
// SMs idle; a block of fewer than four warps leaves schedulers idle).
type schedulerModel struct {
	g  GPUSpec
	rI float64
}

// rate is the issue rate of all busy schedulers for a grid of gridBlocks
// blocks of warpsPerBlock warps, blocksPerSM of them resident per SM.
func (m schedulerModel) rate(gridBlocks, warpsPerBlock, blocksPerSM float64) float64 {
	if gridBlocks <= 0 || warpsPerBlock <= 0 || blocksPerSM <= 0 {
		return 0
	}
	sms := float64(m.g.SMs)
	busySMs := math.Min(sms, gridBlocks)
	resident := math.Max(1, math.Min(blocksPerSM, gridBlocks/sms))
	warps := resident * warpsPerBlock
	scheds := math.Min(float64(m.g.Schedulers), warps)
	return busySMs * scheds * IssueRate(m.rI, warps/scheds)
}
