package analysis

import (
	"gpuprof/analysis/blame"
	"gpuprof/sass"
)

// movableWork is the work code reordering could move between producer p
// and consumer c, for a wait in straight-line code: p and c in one basic
// block, outside every loop (straight false otherwise: there the next
// iteration's work can be moved up, by software pipelining or unrolling,
// which this does not see). The work is the block's instructions that do
// work (not a memory access, not control) and ran (active samples), after
// c and not depending on p (through register and predicate chains), or
// before p and feeding neither p nor a memory access in [p, c] (an
// address), so that they can move below p. Memory accesses are not
// counted as work to move: loads moved among themselves trade one wait
// for another. Instructions already between p and c hide what they can:
// the stall is what is left. Latency can only be hidden behind
// independent work; where none can be moved in, reordering saves nothing
// (item 23), and where some can, no more than it issues (item 45).
func (fv *fnView) movableWork(p, c int) (moved []int, straight bool) {
	f := fv.c.Model
	if p < 0 || c <= p || c >= len(f.Insts) {
		return nil, false
	}
	if fv.c.Loop[p] >= 0 || fv.c.Loop[c] >= 0 {
		return nil, false
	}
	b := f.BlockOf(p)
	if f.BlockOf(c) != b {
		return nil, false
	}
	start, end := f.Blocks[b].Start, f.Blocks[b].End
	// Instructions after c that depend on p.
	dep := make([]bool, end-start)
	dep[p-start] = true
	for i := p + 1; i < end; i++ {
		for _, d := range f.Insts[i].Deps {
			for _, x := range d.Defs {
				if x >= start && x < i && dep[x-start] {
					dep[i-start] = true
				}
			}
		}
	}
	for i := c + 1; i < end; i++ {
		if !dep[i-start] && work(f.Insts[i].Kind) && fv.active(i) > 0 {
			moved = append(moved, i)
		}
	}
	// Instructions before p that feed p or a memory access in [p, c].
	feeds := make([]bool, end-start)
	feeds[p-start] = true
	for i := p; i <= c; i++ {
		if f.Insts[i].Kind.IsMemory() || f.Insts[i].Kind == blame.KSharedMem {
			feeds[i-start] = true
		}
	}
	for i := c; i >= start; i-- {
		if !feeds[i-start] {
			continue
		}
		for _, d := range f.Insts[i].Deps {
			for _, x := range d.Defs {
				if x >= start && x < i {
					feeds[x-start] = true
				}
			}
		}
	}
	for i := start; i < p; i++ {
		if !feeds[i-start] && work(f.Insts[i].Kind) && fv.active(i) > 0 {
			moved = append(moved, i)
		}
	}
	return moved, true
}

// work says whether an instruction of kind k is work that can hide a
// load's latency when moved: not control, not a memory access.
func work(k blame.Kind) bool {
	switch k {
	case blame.KControl, blame.KSync, blame.KSharedMem, blame.KConstMem:
		return false
	}
	return !k.IsMemory()
}

// moveIn is what movableWork says of one wait.
type moveIn struct {
	work     []int
	straight bool
}

// straightBlock is what code reordering can hide of the waits in one
// basic block of straight-line code. The compiler keeps a load below an
// earlier store to memory it cannot prove apart (possible aliasing), so
// the block's loads make one round trip after another, a segment between
// two stores at a time; loading everything first, as the advice asks,
// puts the round trips of loads that depend on no earlier load in flight
// together, and the segments' waits on loads become the longest of them
// (overlap). What is left hides at most behind the active samples of the
// work that can move into the waits (each instruction counted once,
// whichever wait it fills).
type straightBlock struct {
	fv      *fnView
	at      int // an instruction of the block (its barrier interval)
	waits   float64
	work    float64
	overlap float64
	hidden  float64
}

// loadSegment is the segment of load p in its straight-line block: the
// number of stores to global or generic memory before it in the block;
// -1 for an instruction that is no load or depends on an earlier load of
// the block (its round trip cannot start with the others).
func (fv *fnView) loadSegment(p int) int {
	f := fv.c.Model
	in := fv.c.F.Insts
	if !f.Insts[p].Kind.IsMemory() || in[p].Mem.Op != sass.MemLoad {
		return -1
	}
	b := f.BlockOf(p)
	start := f.Blocks[b].Start
	// Does p depend on an earlier load of the block?
	dep := map[int]bool{}
	var walk func(i int) bool
	walk = func(i int) bool {
		for _, d := range f.Insts[i].Deps {
			for _, x := range d.Defs {
				if x < start || x >= i || dep[x] {
					continue
				}
				dep[x] = true
				if f.Insts[x].Kind.IsMemory() && in[x].Mem.Op == sass.MemLoad || walk(x) {
					return true
				}
			}
		}
		return false
	}
	if walk(p) {
		return -1
	}
	g := 0
	for i := start; i < p; i++ {
		if (f.Insts[i].Kind == blame.KGlobalMem || f.Insts[i].Kind == blame.KGenericMem) && in[i].Mem.Op == sass.MemStore {
			g++
		}
	}
	return g
}

// straightLineHiding gathers the waits in straight-line code among the
// edges ok selects (moveOf says which are, and what can move into each),
// per basic block, and records them as hotspots with their hidden share.
func (kv *kernelView) straightLineHiding(ok func(*fnView, blame.Edge) bool, moveOf func(*fnView, blame.Edge) moveIn, h *hotSet) []straightBlock {
	if kv.gpaOnly {
		return nil
	}
	type key struct {
		fv *fnView
		b  int
	}
	idx := map[key]int{}
	var out []straightBlock
	works := []map[int]bool{}
	segs := map[int]map[int]float64{}
	type edgeAt struct {
		blk      int
		src, dst int
		v        float64
	}
	var edges []edgeAt
	for _, fv := range kv.fns {
		for _, e := range fv.r.Edges {
			if !ok(fv, e) {
				continue
			}
			mv := moveOf(fv, e)
			if !mv.straight {
				continue
			}
			k := key{fv, fv.c.Model.BlockOf(e.Src)}
			j, seen := idx[k]
			if !seen {
				j = len(out)
				idx[k] = j
				out = append(out, straightBlock{fv: fv, at: e.Src})
				works = append(works, map[int]bool{})
			}
			v := e.Samples * kv.latShare(fv, e)
			out[j].waits += v
			if g := fv.loadSegment(e.Src); g >= 0 {
				if segs[j] == nil {
					segs[j] = map[int]float64{}
				}
				segs[j][g] += v
			}
			for _, i := range mv.work {
				works[j][i] = true
			}
			edges = append(edges, edgeAt{j, e.Src, e.Dst, v})
		}
	}
	queued := false
	if len(segs) > 0 {
		queued = kv.queueing()
	}
	for j := range out {
		for i := range works[j] {
			out[j].work += out[j].fv.active(i)
		}
		if len(segs[j]) > 1 && !queued {
			sum, longest := 0.0, 0.0
			for _, w := range segs[j] {
				sum += w
				longest = max(longest, w)
			}
			out[j].overlap = sum - longest
		}
		out[j].hidden = out[j].overlap + min(out[j].waits-out[j].overlap, out[j].work)
	}
	for _, e := range edges {
		if sb := out[e.blk]; sb.hidden > 0 {
			h.add(sb.fv, e.src, e.dst, e.v*sb.hidden/sb.waits)
		}
	}
	return out
}

// queueing reports whether kernel context kv moves its sectors at a rate
// where the loaded latency has risen above the least (the probes' knee,
// item 36): its footprint per launch over the launch's time, times the
// sectors its warp accesses touch per sector a coalesced access of the
// same lanes would (MemoryDivergence's kernel total). There the waits are
// for the memory system's throughput, and more round trips in flight
// together do not shorten them. False where the GPU's memory or the
// kernel's traffic is not known.
func (kv *kernelView) queueing() bool {
	g := kv.device()
	if g == nil || !g.Memory.Measured() {
		return false
	}
	launches := float64(kv.x.TimedLaunches(kv.k))
	t := float64(kv.x.KernelTime[kv.k])
	foot, _ := kv.footprint()
	if launches <= 0 || t <= 0 || foot <= 0 {
		return false
	}
	_, tot := MemoryDivergence(kv.x, kv.k, instLookup(kv.x, kvModules(kv)))
	return sectorRate(foot, t/launches, tot.Degree, tot.Ideal) >= kneeGBs(g.Memory)
}

// sectorRate is the GB/s of sectors a kernel moves: its footprint of foot
// bytes in perLaunch ns, times the sectors its accesses touch per sector
// they need (at least 1).
func sectorRate(foot, perLaunch, touched, needed float64) float64 {
	amp := 1.0
	if needed > 0 {
		amp = max(1, touched/needed)
	}
	return foot / perLaunch * amp
}
