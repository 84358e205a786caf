package analysis

import (
	"fmt"
	"math"

	"gpuprof/analysis/blame"
	"gpuprof/profile"
	"gpuprof/sass"
)

// The block-lifetime floor (docs/validation.md, item 15). A kernel whose
// threads run straight through (no loop) lives, block by block, for its
// chain of dependent global memory round trips: a load, the arithmetic on
// it, the store that must be acknowledged before the block's resources go
// back. With R blocks resident per SM, Little's law gives each SM one
// block per lifetime/R, and never more than one per dispatch time: the
// kernel takes at least blocks/SMs × max(dispatch, chain × L/R), where L
// is the loaded latency at the bandwidth the kernel then moves. A traffic
// estimate (removing bytes from a memory-bound kernel) can go below that;
// the floor keeps it above.

// removal is what an optimisation does to one access: the share of its
// traffic (bytes) and of its round trips (chain; 0 when the access stays,
// narrower) it removes, and the accesses it then waits for (a load made
// conditional on a loaded value waits for that load).
type removal struct {
	bytes, chain float64
	after        []instRef
}

// oneShot reports whether every function of the kernel context is free of
// loops: each thread runs its code once.
func (kv *kernelView) oneShot() bool {
	if len(kv.fns) == 0 {
		return false
	}
	for _, fv := range kv.fns {
		if len(fv.c.F.CFG().Loops) > 0 {
			return false
		}
	}
	return true
}

// oneShotAccess is one global memory instruction of a one-shot kernel with what
// the profile measured of it.
type oneShotAccess struct {
	ref    instRef
	load   bool    // returns data (a load or an atomic)
	p      float64 // share of the warps that execute it
	dram   float64 // share of its bytes that come from DRAM
	bytes  float64 // bytes per warp that executes it (its sectors)
	weight float64 // round trips it adds to a thread's chain
	after  []instRef
}

// oneShotAccesses lists the global memory instructions the redundancy pass
// traced (nil when it traced none), after the removals rm.
func (kv *kernelView) oneShotAccesses(rm map[instRef]removal) []oneShotAccess {
	objs := kv.objectBytes()
	var out []oneShotAccess
	maxWA := 0.0
	for _, fv := range kv.fns {
		for i, in := range fv.c.Model.Insts {
			if in.Kind != blame.KGlobalMem {
				continue
			}
			id := kv.nodeOf(fv, i)
			if id == 0 {
				continue
			}
			vs := kv.x.P.Nodes[id].Metrics
			wa, sec := float64(vs.Get(profile.MemWarpAccess)), float64(vs.Get(profile.MemSectors))
			if wa == 0 || sec == 0 {
				continue
			}
			op := fv.c.F.Insts[i].Mem.Op
			a := oneShotAccess{ref: instRef{fv, i}, load: op == sass.MemLoad || op == sass.MemAtomic, p: wa, dram: 1, bytes: 32 * sec / wa}
			if a.load {
				// Every byte of a data object comes from DRAM once at most
				// while it stays cached: a load that touches more bytes than
				// its objects hold (a lookup table) mostly hits.
				if ob := objs[profile.PC{Func: fv.fid, Offset: uint32(fv.c.F.Insts[i].Offset)}]; ob > 0 {
					a.dram = math.Min(1, ob/(32*sec))
				}
			}
			maxWA = math.Max(maxWA, wa)
			out = append(out, a)
		}
	}
	for k := range out {
		a := &out[k]
		a.p /= maxWA // the most executed access runs in every warp
		r := rm[a.ref]
		a.bytes *= a.p * a.dram * (1 - r.bytes)
		a.weight = a.p * a.dram * (1 - r.chain)
		a.after = r.after
		if !a.load {
			a.weight = a.p * (1 - r.chain) // a store is acknowledged from wherever it lands
		}
	}
	return out
}

// objectBytes is, per instruction of the kernel context, the size of the
// data objects the redundancy pass saw it access (computed once per
// kernel view: every redundancy advice on the kernel asks).
func (kv *kernelView) objectBytes() map[profile.PC]float64 {
	if kv.objBytes != nil {
		return kv.objBytes
	}
	kv.objBytes = map[profile.PC]float64{}
	for key := range kv.x.P.Spatial {
		if key.Context != kv.k {
			continue
		}
		if o := kv.x.P.Objects[key.Object]; o != nil && o.Space == 0 {
			kv.objBytes[key.PC] += float64(o.Size)
		}
	}
	return kv.objBytes
}

// memoryChain is the longest chain of dependent global memory round trips
// through a thread of a one-shot kernel: over the reaching definitions, a
// load adds its weight to every instruction that reads its result, and a
// chain ends at a memory instruction (a store waits for its data and
// address, then for its acknowledgement).
func (kv *kernelView) memoryChain(as []oneShotAccess) float64 {
	w := map[instRef]float64{}
	after := map[instRef][]instRef{}
	for _, a := range as {
		w[a.ref] = a.weight
		after[a.ref] = a.after
	}
	longest := 0.0
	for _, fv := range kv.fns {
		in := map[int]float64{}
		state := map[int]uint8{} // 1 visiting, 2 done
		var into func(i int) float64
		into = func(i int) float64 {
			switch state[i] {
			case 1:
				return 0 // a cycle: none in loop-free code, but the defs may say so
			case 2:
				return in[i]
			}
			state[i] = 1
			best := 0.0
			from := func(j int) {
				v := into(j)
				if a, ok := w[instRef{fv, j}]; ok && fv.c.F.Insts[j].Mem.Op != sass.MemStore {
					v += a
				}
				best = math.Max(best, v)
			}
			for _, d := range fv.c.Model.Insts[i].Deps {
				for _, j := range d.Defs {
					if j >= 0 {
						from(j)
					}
				}
			}
			for _, r := range after[instRef{fv, i}] {
				if r.fv == fv {
					from(r.i)
				}
			}
			state[i], in[i] = 2, best
			return best
		}
		for _, a := range as {
			if a.ref.fv == fv {
				longest = math.Max(longest, into(a.ref.i)+a.weight)
			}
		}
	}
	return longest
}

// lifetimeFloor is the least time, in ns over the kernel context's timed
// launches, that a one-shot kernel takes after the removals rm; ok is
// false where the floor does not apply (loops, no measured memory system,
// no launch configuration, no traced accesses).
func (kv *kernelView) lifetimeFloor(rm map[instRef]removal) (ns float64, note string, ok bool) {
	p := kv.parallelism()
	if p == nil || kv.gpaOnly || !p.g.Memory.Measured() || !kv.oneShot() || p.cfg.GridBlocks <= 0 {
		return 0, "", false
	}
	as := kv.oneShotAccesses(rm)
	if len(as) == 0 {
		return 0, "", false
	}
	var bytesPerWarp float64
	for _, a := range as {
		bytesPerWarp += a.bytes
	}
	chain := kv.memoryChain(as)
	warps := p.cfg.GridBlocks * math.Ceil(p.cfg.Threads/32)
	perLaunch, gbs, lat := blockFloor(p.g, p.cfg.GridBlocks, float64(p.occ.BlocksPerSM), chain, bytesPerWarp*warps)
	launches := float64(kv.x.TimedLaunches(kv.k))
	if launches == 0 {
		launches = p.cfg.Launches
	}
	note = fmt.Sprintf("block-lifetime floor: %.0f blocks on %d SMs, %d resident, a chain of %.2f round trips at %.0f ns (%.0f GB/s), dispatch %.0f ns: %.1f µs per launch",
		p.cfg.GridBlocks, p.g.SMs, p.occ.BlocksPerSM, chain, lat, gbs, p.g.Memory.DispatchNs, perLaunch/1000)
	return perLaunch * launches, note, true
}

// blockFloor solves the floor of one launch of grid blocks, resident per
// SM at a time, each a chain of round trips, moving bytes in all:
//
//	T = grid/SMs × max(dispatch, chain × L(bytes/T) / resident),
//
// at least one lifetime, and at least bytes over the streaming ceiling. L
// grows with the bandwidth, so the right side falls as T grows and
// bisection finds the one crossing. It returns T in ns, the bandwidth and
// the latency there.
func blockFloor(g GPUSpec, grid, resident, chain, bytes float64) (t, gbs, lat float64) {
	m := g.Memory
	perSM := grid / float64(g.SMs)
	f := func(t float64) float64 {
		life := chain * m.LatencyAt(math.Min(bytes/t, m.StreamGBs))
		return math.Max(life, perSM*math.Max(m.DispatchNs, life/resident)) // a grid of one wave still takes a lifetime
	}
	lo := perSM * m.DispatchNs
	hi := f(lo)
	for k := 0; k < 200 && hi-lo > 1e-13*hi; k++ {
		mid := (lo + hi) / 2
		if f(mid) > mid {
			lo = mid
		} else {
			hi = mid
		}
	}
	t = math.Max(hi, bytes/m.StreamGBs)
	gbs = math.Min(bytes/t, m.StreamGBs)
	return t, gbs, m.LatencyAt(gbs)
}
