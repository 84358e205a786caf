package online

import (
	"math/bits"
	"strconv"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
	"gpuprof/sass"
)

// Per-launch-context metrics of the kernel instances' times
// (docs/advice.md); the launch configuration's are profile.Launch*. Every
// value is a sum over launches, so ranks and items merge by addition.
var (
	// The squares of the instances' times (ns²), split so that neither sum
	// overflows: sq_hi adds ⌊t²/2³²⌋, sq_lo adds t² mod 2³² (below 2³² per
	// instance, so 2³² instances fit).
	GPUTimeSqHi = profile.Metric("gpu.time_sq_hi")
	GPUTimeSqLo = profile.Metric("gpu.time_sq_lo")
)

// TimeHistPrefix names the instance-time histogram: metric
// TimeHistPrefix+strconv.Itoa(i) counts instances whose time t (ns) falls
// in bucket i = 4k+s, k = ⌊log2 t⌋ and s the two bits below the leading
// one: [TimeBucketLow(i), TimeBucketLow(i+1)), a quarter octave (at most
// 19% wide), enough to name the fastest and slowest instances.
const TimeHistPrefix = "gpu.time_hist."

// TimeBucket is the histogram bucket of an instance time t > 0 (ns).
func TimeBucket(t uint64) int {
	k := bits.Len64(t) - 1
	var s uint64
	if k >= 2 {
		s = t >> (k - 2) & 3
	} else {
		s = t << (2 - k) & 3
	}
	return 4*k + int(s)
}

// TimeBucketLow is the smallest time of bucket i.
func TimeBucketLow(i int) float64 {
	k, s := i/4, i%4
	return float64(uint64(1)<<k) * (1 + float64(s)/4)
}

// launchCfg accumulates one context's launch configurations and instance
// times since the last item.
type launchCfg struct {
	threads, grid, sharedDyn      uint64
	withAttrs, regs, sharedStatic uint64
	frame, maxRegs, sqHi, sqLo    uint64
	hist                          map[int]uint64
}

// launchStats is the analyzer's state for launchstats.go.
type launchStats struct {
	ctx    map[uint32]*launchCfg
	cubins map[*modInfo]*sass.Cubin // parsed once per module (nil: none or unreadable)
}

func (s *launchStats) cfg(ci uint32) *launchCfg {
	if s.ctx == nil {
		s.ctx = map[uint32]*launchCfg{}
	}
	c := s.ctx[ci]
	if c == nil {
		c = &launchCfg{hist: map[int]uint64{}}
		s.ctx[ci] = c
	}
	return c
}

// attrs returns the cubin attributes of a function (ok false when the
// module's bytes never came or do not parse: then only the launch's own
// configuration is counted).
func (s *launchStats) attrs(fn *funcInfo) (sass.FuncAttr, bool) {
	m := fn.mod
	if s.cubins == nil {
		s.cubins = map[*modInfo]*sass.Cubin{}
	}
	c, seen := s.cubins[m]
	if !seen {
		if m.cubin != nil {
			c, _ = sass.ParseCubin(m.cubin)
		}
		s.cubins[m] = c
	}
	if c == nil {
		return sass.FuncAttr{}, false
	}
	f := c.Func(fn.name)
	if f == nil || f.Attr.Regs == 0 {
		return sass.FuncAttr{}, false
	}
	return f.Attr, true
}

// launch counts a launch's configuration in its context.
func (s *launchStats) launch(ci uint32, fn *funcInfo, f *rawstream.Launch) {
	c := s.cfg(ci)
	c.threads += uint64(f.Block[0]) * uint64(f.Block[1]) * uint64(f.Block[2])
	c.grid += f.Blocks()
	c.sharedDyn += uint64(f.SharedBytes)
	s.addAttrs(ci, fn, 1)
}

// addAttrs counts fn's cubin attributes for n launches of context ci
// (launches of a kernel reported before its module get them once it
// comes, orphans.go).
func (s *launchStats) addAttrs(ci uint32, fn *funcInfo, n uint64) {
	at, ok := s.attrs(fn)
	if !ok || n == 0 {
		return
	}
	c := s.cfg(ci)
	c.withAttrs += n
	c.regs += n * uint64(at.Regs)
	c.sharedStatic += n * uint64(at.SharedStatic)
	c.frame += n * uint64(at.FrameSize)
	c.maxRegs += n * uint64(at.MaxRegs)
}

// kernelEnd counts an instance's time.
func (s *launchStats) kernelEnd(ci uint32, f *rawstream.KernelEnd) {
	if f.StartNS == 0 || f.EndNS <= f.StartNS {
		return
	}
	t := f.EndNS - f.StartNS
	c := s.cfg(ci)
	hi, lo := bits.Mul64(t, t)
	c.sqHi += hi<<32 | lo>>32
	c.sqLo += lo & (1<<32 - 1)
	c.hist[TimeBucket(t)]++
}

// build adds the accumulated metrics to the item's kernel nodes.
func (s *launchStats) build(b *builder) {
	for _, ci := range sortedKeys(s.ctx) {
		c := s.ctx[ci]
		id := b.kernel(ci)
		p := b.p
		p.Add(id, profile.LaunchBlockThreads, c.threads)
		p.Add(id, profile.LaunchGridBlocks, c.grid)
		p.Add(id, profile.LaunchSharedDynamic, c.sharedDyn)
		p.Add(id, profile.LaunchWithAttrs, c.withAttrs)
		p.Add(id, profile.LaunchRegs, c.regs)
		p.Add(id, profile.LaunchSharedStatic, c.sharedStatic)
		p.Add(id, profile.LaunchFrameBytes, c.frame)
		p.Add(id, profile.LaunchMaxRegs, c.maxRegs)
		p.Add(id, GPUTimeSqHi, c.sqHi)
		p.Add(id, GPUTimeSqLo, c.sqLo)
		for i, n := range c.hist {
			p.Add(id, profile.Metric(TimeHistPrefix+strconv.Itoa(i)), n)
		}
	}
	clear(s.ctx)
}
