package analysis

import (
	"fmt"

	"gpuprof/profile"
	"gpuprof/sass"
)

// The DRAM floor (docs/validation.md, item 35). A kernel whose data
// objects together exceed the L2 cache and which sweeps them every launch
// reads them from DRAM every launch: a sweep of more than the cache holds
// evicts its own lines before the next launch comes back to them. Such a
// launch takes at least its footprint over the streaming bandwidth the
// probes measured, whatever the change: reordering, unrolling or more
// warps hide latency, but they move the same bytes. Only an advice that
// shrinks the objects themselves (a narrower type, an index, a constant)
// lowers the floor, by the bytes it takes off. The floor is drawn only
// where the profile says the sweep happens: the objects' bytes over the
// launch's measured time must not exceed the streaming bandwidth (a
// kernel that touches part of its objects would), and the objects are
// those the value-tracing pass saw the kernel access.

// footprint is the bytes of the global-memory objects kernel context k
// accessed, by object (item 38). The value-tracing pass may have run a smaller
// problem than the timed one (its arguments are chosen for the trace's
// size): an object counts with the largest allocation any pass made at
// its allocation site, the timed pass's where it allocated more (a site
// that allocates objects of several sizes counts each at the largest,
// which dramFloor's sweep check bounds).
func (kv *kernelView) footprint() (total float64, by map[profile.ObjectID]float64) {
	if kv.foot != nil {
		return kv.footTotal, kv.foot
	}
	defer func() { kv.foot, kv.footTotal = by, total }() // every estimate of the kernel asks
	by = map[profile.ObjectID]float64{}
	for key := range kv.x.P.ObjStats {
		if kv.x.P.KernelOf(key.Context) != kv.k {
			continue
		}
		if _, done := by[key.Object]; done {
			continue
		}
		if o := kv.x.P.Objects[key.Object]; o != nil && o.Space == 0 && o.Size > 0 {
			size := float64(max(o.Size, kv.x.siteSize(o.Context)))
			by[key.Object] = size
			total += size
		}
	}
	return total, by
}

// dramFloor is the floor of one launch in ns after an advice takes less
// bytes off the kernel's objects (by object; nil: none), with a note for
// the evidence. ok is false where no floor is drawn: no measured GPU, no
// L2 size, no launch time, a footprint the L2 can hold, or one the launch
// cannot have swept at the measured bandwidth.
func (kv *kernelView) dramFloor(less map[profile.ObjectID]float64) (ns float64, note string, ok bool) {
	g := kv.device()
	if g == nil || g.Memory.StreamGBs <= 0 || g.L2Bytes <= 0 {
		return 0, "", false
	}
	launches := float64(kv.x.TimedLaunches(kv.k))
	t := float64(kv.x.KernelTime[kv.k])
	if launches <= 0 || t <= 0 {
		return 0, "", false
	}
	perLaunch := t / launches
	foot, by := kv.footprint()
	after := foot
	for o, b := range less {
		after -= min(b, by[o])
	}
	if ns, ok = sweepFloor(foot, after, float64(g.L2Bytes), perLaunch, g.Memory.StreamGBs); !ok {
		return 0, "", false
	}
	note = fmt.Sprintf("DRAM floor (item 35): the kernel's objects, %.1f MB, exceed the %.0f MB L2 and are swept each launch (%.0f GB/s over its %.1f µs); %.1f MB at the measured %.0f GB/s take at least %.1f µs a launch",
		foot/1e6, float64(g.L2Bytes)/1e6, foot/perLaunch, perLaunch/1000, after/1e6, g.Memory.StreamGBs, ns/1000)
	return ns, note, true
}

// sweepFloor is the DRAM floor of one launch in ns: after of the foot
// bytes the kernel sweeps, at stream GB/s. ok is false where foot fits
// an L2 of l2 bytes or cannot have been swept in perLaunch ns.
func sweepFloor(foot, after, l2, perLaunch, stream float64) (ns float64, ok bool) {
	if foot <= l2 || perLaunch <= 0 || foot/perLaunch > 1.02*stream {
		return 0, false
	}
	return max(0, after) / stream, true
}

// dramCap bounds a kernel-level speedup s by the DRAM floor of a change
// that keeps the kernel's bytes; it returns s unchanged where no floor is
// drawn or s is below it.
func (kv *kernelView) dramCap(s float64) (float64, string) {
	fl, note, ok := kv.dramFloor(nil)
	if !ok || fl <= 0 || s <= 1 {
		return s, ""
	}
	perLaunch := float64(kv.x.KernelTime[kv.k]) / float64(kv.x.TimedLaunches(kv.k))
	if bound := perLaunch / fl; s > bound {
		return max(1, bound), fmt.Sprintf("; capped at %.3f by the %s", max(1, bound), note)
	}
	return s, ""
}

// Round trips a narrower access does not shorten (docs/validation.md, item
// 36). A narrower type or an index moves fewer bytes per access but makes
// as many round trips. It saves time only where the waits are for
// bandwidth, and the most bandwidth a kernel can ask for is what all its
// resident warps have in flight at once (Little's law): each of its global
// loads outstanding together, over the least latency the probes measured.
// Where even that is below the bandwidth at which the probes' loaded
// latency starts to rise (5% over the least), every wait is a round trip
// at the unloaded latency, which fewer bytes do not shorten.

// demandGBs is that upper bound on the bandwidth kernel context kv can
// ask for, in GB/s, with the numbers behind it; ok is false where the
// launch configuration, the GPU's memory or the loads' sectors are not
// known.
func (kv *kernelView) demandGBs() (gbs, warps, bytesPerWarp, lmin float64, ok bool) {
	p := kv.parallelism()
	if p == nil || kv.gpaOnly || !p.g.Memory.Measured() || p.cfg.GridBlocks <= 0 || p.occ.BlocksPerSM <= 0 {
		return 0, 0, 0, 0, false
	}
	blocks := min(p.cfg.GridBlocks, float64(p.occ.BlocksPerSM*p.g.SMs))
	warps = blocks * max(1, float64(int(p.cfg.Threads+31)/32))
	for _, fv := range kv.fns {
		for i, in := range fv.c.F.Insts {
			if in.Mem.Op != sass.MemLoad || !lsuInst(fv, i) {
				continue
			}
			id := kv.nodeOf(fv, i)
			if id == 0 {
				continue
			}
			vs := kv.x.P.Nodes[id].Metrics
			if wa, sec := vs.Get(profile.MemWarpAccess), vs.Get(profile.MemSectors); wa > 0 && sec > 0 {
				bytesPerWarp += 32 * float64(sec) / float64(wa)
			}
		}
	}
	for _, pt := range p.g.Memory.Loaded {
		if lmin == 0 || pt.Ns < lmin {
			lmin = pt.Ns
		}
	}
	if bytesPerWarp <= 0 || lmin <= 0 {
		return 0, 0, 0, 0, false
	}
	return littleDemand(warps, bytesPerWarp, lmin), warps, bytesPerWarp, lmin, true
}

// littleDemand is Little's law: the bandwidth in GB/s that warps with
// bytesPerWarp each in flight draw at a round trip of lmin ns.
func littleDemand(warps, bytesPerWarp, lmin float64) float64 { return warps * bytesPerWarp / lmin }

// kneeGBs is the bandwidth at which the loaded latency first exceeds the
// least by 5%, from the probes' curve.
func kneeGBs(m MemorySpec) float64 {
	lmin := 0.0
	for _, pt := range m.Loaded {
		if lmin == 0 || pt.Ns < lmin {
			lmin = pt.Ns
		}
	}
	prev := 0.0
	for _, pt := range m.Loaded {
		if pt.Ns > 1.05*lmin {
			return prev
		}
		prev = pt.GBs
	}
	return m.StreamGBs
}

// roundTripBound reports why a narrower access of kernel context kv saves
// no time ("" when it may): the demand bound of item 36 is below the knee.
func (kv *kernelView) roundTripBound() string {
	gbs, warps, bpw, lmin, ok := kv.demandGBs()
	if !ok {
		return ""
	}
	knee := kneeGBs(kv.parallelism().g.Memory)
	if gbs >= knee {
		return ""
	}
	return fmt.Sprintf("round trips, not bandwidth (item 36): %.0f resident warps with all %.0f bytes of their global loads in flight at the unloaded %.0f ns ask for at most %.0f GB/s, below the %.0f GB/s where the loaded latency starts to rise: fewer bytes per access make as many round trips, as long", warps, bpw, lmin, gbs, knee)
}
