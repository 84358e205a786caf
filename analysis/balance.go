package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Warp balance bounded by the slowest warp's path (docs/validation.md,
// item 28).
//
// Eq. 3 on the barrier samples assumes that every wait at a block-wide
// barrier can go: that the work between two barriers can be spread over
// the block's warps until none waits. Where the waits are structural, it
// cannot: in a tree reduction the active threads halve at each step, the
// warps that hold them do one add each and the others wait, and no
// redistribution makes one add shorter. Whatever the balance, a pass
// through a barrier interval lasts at least as long as the path of the
// warp that runs the most of it.
//
// With instruction counts that path has a cost. A warp that executes
// instruction i once spends e_i = s_i / c_i samples there (its samples
// other than barrier waits over its warp-level executions). The interval
// has P block-passes (the executions of the barriers closing it over the
// block's n warps). A warp on the slowest path runs i at least as often as
// the block's warps do on average, c_i / n (code every warp runs), and,
// where the same warps run guarded code in every pass (the layout
// `if (tid < s)` gives), once in each of the min(P, c_i) passes it can run
// in (at most once per block for code outside the loops that hold the
// barrier); its weight is e_i times the larger. The path is the heaviest
// path of control through the interval (its blocks split at barriers,
// edges that pass a barrier cut), and in every pass the block's n warps
// stay in the interval for it: the interval needs at least F = n × path
// samples, and at least its work W. What balancing can save is then
// W + B - max(W, F), at most the barrier samples B. The heaviest path
// errs high where different warps take different guarded blocks one after
// the other (two ifs on different warps), which makes the bound tighter
// than the truth there.

// balanceFloor returns the samples balancing the work between warps can
// save of the barrier waits ws (warpBalance's hotspots: each the barrier,
// or the instruction the samples are at, with their samples), with a note
// for the evidence, or why it cannot bound them.
func (kv *kernelView) balanceFloor(ws []hot) (saved float64, note, na string) {
	if !kv.hybrid {
		return 0, "", "without instruction counts the path of the slowest warp between the barriers is not known, and waits behind a serial path (a tree reduction's last steps) cannot be told from waits behind work that other warps could take"
	}
	cfg, ok := kv.x.LaunchConfig(kv.k)
	if !ok || cfg.Threads <= 0 {
		return 0, "", "the launch configuration (warps per block) is not known"
	}
	n := math.Ceil(cfg.Threads / 32)
	blocks := kv.countedWarps() / n
	if blocks <= 0 {
		return 0, "", "the kernel's entry was not counted"
	}
	type key struct {
		fv *fnView
		iv int
	}
	type group struct {
		B    float64
		bars map[int]bool
	}
	groups := map[key]*group{}
	var order []key
	empty := 0.0 // waits after no work at all (block start, two barriers in a row)
	for _, w := range ws {
		c := w.fv.c
		if !blockBarrier(&c.F.Insts[w.i]) {
			return 0, "", fmt.Sprintf("barrier waits at %s follow no block-wide barrier", c.F.Name)
		}
		ivs := c.intervalsBefore(w.i)
		if len(ivs) == 0 {
			empty += w.amount
			continue
		}
		if len(ivs) > 1 {
			return 0, "", "a barrier is reached from more than one barrier interval"
		}
		k := key{w.fv, ivs[0]}
		g := groups[k]
		if g == nil {
			g = &group{bars: map[int]bool{}}
			groups[k] = g
			order = append(order, k)
		}
		g.B += w.amount
		g.bars[w.i] = true
	}
	var parts []string
	for _, k := range order {
		g := groups[k]
		fv, c := k.fv, k.fv.c
		iv, _ := c.barrierIntervals()
		// Every barrier closing the interval ends a pass through it.
		passes := 0.0
		for i := range c.F.Insts {
			if blockBarrier(&c.F.Insts[i]) {
				if ivs := c.intervalsBefore(i); len(ivs) == 1 && ivs[0] == k.iv {
					if fv.s[i].Executed <= 0 {
						return 0, "", "a barrier's executions were not counted"
					}
					passes += fv.s[i].Executed
				}
			}
		}
		P := passes / n
		// Loops that hold a barrier closing the interval: code outside
		// them runs in at most one pass per block.
		gr := c.F.CFG()
		barLoop := map[int]bool{}
		for b := range g.bars {
			for _, l := range gr.LoopNest(gr.BlockOf(b)) {
				barLoop[l] = true
			}
		}
		// The interval's work and each instruction's weight: its cost per
		// execution times the executions a warp on the slowest path makes,
		// the block's average per warp (code every warp runs), or one in
		// every pass it can run in (guarded code that the same warps run in
		// each pass).
		W := 0.0
		weight := make(map[int]float64)
		for i := range c.F.Insts {
			if iv[i] != k.iv {
				continue
			}
			s := fv.s[i]
			w := s.Total() - s.ByReason["barrier"]
			W += w
			if w <= 0 {
				continue
			}
			if s.Executed <= 0 {
				return 0, "", fmt.Sprintf("samples at an instruction whose executions were not counted (%s+%#x)", c.F.Name, c.F.Insts[i].Offset)
			}
			runs := math.Min(P, s.Executed)
			inLoop := false
			for _, l := range gr.LoopNest(gr.BlockOf(i)) {
				inLoop = inLoop || barLoop[l]
			}
			if !inLoop {
				runs = math.Min(runs, blocks)
			}
			weight[i] = w / s.Executed * math.Max(s.Executed/n, runs)
		}
		if W <= 0 {
			empty += g.B
			continue
		}
		path := c.heaviestPath(k.iv, weight)
		F := n * path
		s := math.Max(0, math.Min(g.B, W+g.B-math.Max(W, F)))
		saved += s
		bars := make([]int, 0, len(g.bars))
		for b := range g.bars {
			bars = append(bars, b)
		}
		sort.Ints(bars)
		parts = append(parts, fmt.Sprintf("at %#x: B = %.0f, W = %.0f, F = %.0f (%g warps a block, %.0f passes of a block through it), %.0f can go", c.F.Insts[bars[0]].Offset, g.B, W, F, n, P, s))
	}
	note = "; bounded by the slowest warp's path between the barriers (item 28): an interval needs at least max(W, F) samples, W its work, F its block's warps times the heaviest path a warp takes through it, from the instruction counts; " + strings.Join(parts, "; ")
	if empty > 0 {
		note += fmt.Sprintf("; %.0f samples wait after no work (the block's start or another barrier) and none can go", empty)
	}
	return saved, note, ""
}

// intervalsBefore returns the barrier intervals control comes from into
// instruction i: that of the instruction before it in its basic block, or
// those of its block's predecessors' last instructions (barriers and
// empty blocks give none).
func (c *code) intervalsBefore(i int) []int {
	iv, _ := c.barrierIntervals()
	g := c.F.CFG()
	b := g.BlockOf(i)
	if b < 0 {
		return nil
	}
	if i > g.Blocks[b].Start {
		if iv[i-1] < 0 {
			return nil
		}
		return []int{iv[i-1]}
	}
	seen := map[int]bool{}
	var out []int
	for _, p := range g.Blocks[b].Preds {
		blk := g.Blocks[p]
		if blk.End <= blk.Start || iv[blk.End-1] < 0 || seen[iv[blk.End-1]] {
			continue
		}
		seen[iv[blk.End-1]] = true
		out = append(out, iv[blk.End-1])
	}
	sort.Ints(out)
	return out
}

// heaviestPath is the largest sum of weight along a path of control
// through barrier interval iv of c's function: its basic blocks, split at
// barriers, linked by the edges that pass no barrier; an edge back to a
// block still on the path (a loop without a barrier in it) is not
// followed.
func (c *code) heaviestPath(iv int, weight map[int]float64) float64 {
	ivs, _ := c.barrierIntervals()
	g := c.F.CFG()
	type seg struct{ start, end int } // instructions [start, end) of one block
	var segs []seg
	first := make([]int, len(g.Blocks)) // the block's first segment, if it opens the block
	last := make([]int, len(g.Blocks))  // the block's last segment, if it closes the block
	for b, blk := range g.Blocks {
		first[b], last[b] = -1, -1
		for i := blk.Start; i < blk.End; {
			if ivs[i] != iv {
				i++
				continue
			}
			j := i
			for j < blk.End && ivs[j] == iv {
				j++
			}
			if i == blk.Start {
				first[b] = len(segs)
			}
			if j == blk.End {
				last[b] = len(segs)
			}
			segs = append(segs, seg{i, j})
			i = j
		}
	}
	cost := make([]float64, len(segs))
	next := make([][]int, len(segs))
	for k, sg := range segs {
		for i := sg.start; i < sg.end; i++ {
			cost[k] += weight[i]
		}
	}
	for b, blk := range g.Blocks {
		if last[b] < 0 {
			continue
		}
		for _, s := range blk.Succs {
			if first[s] >= 0 {
				next[last[b]] = append(next[last[b]], first[s])
			}
		}
	}
	best := make([]float64, len(segs))
	state := make([]int8, len(segs)) // 0 unvisited, 1 on the path, 2 done
	var walk func(k int) float64
	walk = func(k int) float64 {
		if state[k] == 2 {
			return best[k]
		}
		state[k] = 1
		m := 0.0
		for _, n := range next[k] {
			if state[n] != 1 {
				m = math.Max(m, walk(n))
			}
		}
		state[k] = 2
		best[k] = cost[k] + m
		return best[k]
	}
	out := 0.0
	for k := range segs {
		out = math.Max(out, walk(k))
	}
	return out
}
