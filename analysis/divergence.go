package analysis

import (
	"fmt"
	"math"
	"sort"

	"gpuprof/profile"
	"gpuprof/sass"
)

// InstThreadExecuted is the thread-level execution count per instruction
// (hybrid mode: CUPTI's thread_inst_executed), beside inst.executed.
var InstThreadExecuted = profile.Metric("inst.thread_executed")

// Divergence thresholds (docs/insights.md).
const (
	// MaxCoalescing: an instruction touching more than 1/MaxCoalescing
	// times the sectors a coalesced warp access needs is divergent.
	MaxCoalescing = 0.5
	// MaxSIMT: code running with fewer than this share of a warp's lanes
	// active is divergent.
	MaxSIMT = 0.75
)

// MemDivergence is CUDAAdvisor's memory divergence of one instruction (or
// a whole kernel context): distinct 32-byte sectors per warp access.
type MemDivergence struct {
	Node         profile.NodeID
	WarpAccesses uint64
	Sectors      uint64
	Lanes        uint64  // lane accesses
	Bytes        int     // bytes per lane access (0 if unknown; 4 assumed)
	Degree       float64 // sectors per warp access
	Ideal        float64 // sectors a coalesced access of the same lanes needs
}

// Efficiency is Ideal/Degree (1 when coalesced).
func (d MemDivergence) Efficiency() float64 {
	if d.Degree == 0 {
		return 1
	}
	return math.Min(1, d.Ideal/d.Degree)
}

// MemoryDivergence returns the memory divergence of every instruction of
// kernel context k with traced warp accesses, and the kernel's total.
func MemoryDivergence(x *Index, k profile.NodeID, insts InstLookup) ([]MemDivergence, MemDivergence) {
	var out []MemDivergence
	tot := MemDivergence{Node: k}
	var idealSum float64
	for _, id := range x.InstNodes(k) {
		vs := x.P.Nodes[id].Metrics
		w, s := vs.Get(profile.MemWarpAccess), vs.Get(profile.MemSectors)
		if w == 0 || s == 0 {
			continue
		}
		d := MemDivergence{Node: id, WarpAccesses: w, Sectors: s, Lanes: vs.Get(profile.MemLoads) + vs.Get(profile.MemStores)}
		if insts != nil {
			if info, ok := insts(x.PCOf[id]); ok {
				d.Bytes = info.Bytes
			}
		}
		if d.Bytes == 0 {
			d.Bytes = sketchBytes(x, k, x.PCOf[id])
		}
		b := d.Bytes
		if b == 0 {
			b = 4
		}
		lanes := 32.0
		if d.Lanes > 0 {
			lanes = float64(d.Lanes) / float64(w)
		}
		d.Degree = float64(s) / float64(w)
		d.Ideal = math.Max(1, math.Ceil(lanes*float64(b)/32))
		out = append(out, d)
		tot.WarpAccesses += w
		tot.Sectors += s
		tot.Lanes += d.Lanes
		idealSum += d.Ideal * float64(w)
	}
	if tot.WarpAccesses > 0 {
		tot.Degree = float64(tot.Sectors) / float64(tot.WarpAccesses)
		tot.Ideal = idealSum / float64(tot.WarpAccesses)
	}
	return out, tot
}

func sketchBytes(x *Index, k profile.NodeID, pc profile.PC) int {
	for _, a := range []profile.Access{profile.Load, profile.Store} {
		if st := x.P.PCs[profile.PCKey{Context: k, PC: pc, Access: a}]; st != nil && st.Values != nil && st.Values.Bits > 0 {
			return int(st.Values.Bits) / 8
		}
	}
	return 0
}

// Divergence reports CUDAAdvisor's memory and branch divergence as advice:
// uncoalesced global accesses (GPA's global memory access adjustment) and
// code running with part of its warps' lanes; with PC samples, each gets
// eq. 3's estimate from the samples the divergence costs.
func Divergence(x *Index, views map[profile.NodeID]*kernelView, opts Options) []Advice {
	var out []Advice
	for _, k := range x.Kernels {
		kv := views[k]
		var insts InstLookup
		if kv != nil {
			insts = instLookup(x, kvModules(kv))
		}
		if a := memDivergenceAdvice(x, k, kv, insts, opts); a != nil {
			out = append(out, *a)
		}
		if a := branchDivergenceAdvice(x, k, kv, opts); a != nil {
			out = append(out, *a)
		}
	}
	return out
}

// kvModules serves the modules a kernel view already holds.
func kvModules(kv *kernelView) ModuleSource {
	ms := Modules{}
	for _, fv := range kv.fns {
		for _, f := range kv.x.P.Funcs {
			if f.Name == fv.c.F.Name {
				ms[f.Module] = fv.c.M
			}
		}
	}
	return ms
}

func memDivergenceAdvice(x *Index, k profile.NodeID, kv *kernelView, insts InstLookup, opts Options) *Advice {
	per, tot := MemoryDivergence(x, k, insts)
	if tot.WarpAccesses == 0 {
		return nil
	}
	var bad []MemDivergence
	var badW uint64
	for _, d := range per {
		if d.Efficiency() >= MaxCoalescing {
			continue
		}
		if kv != nil {
			if r, ok := kv.byNode[d.Node]; ok && r.fv.c.F.Insts[r.i].Mem.Space == sass.SpaceShared {
				continue // sectors say nothing about shared-memory banks
			}
		}
		bad = append(bad, d)
		badW += d.WarpAccesses
	}
	share := float64(badW) / float64(tot.WarpAccesses)
	if len(bad) == 0 || share < opts.MinImportance {
		return nil
	}
	sort.Slice(bad, func(i, j int) bool {
		ci, cj := float64(bad[i].Sectors)-bad[i].Ideal*float64(bad[i].WarpAccesses), float64(bad[j].Sectors)-bad[j].Ideal*float64(bad[j].WarpAccesses)
		if ci != cj {
			return ci > cj
		}
		return bad[i].Node < bad[j].Node
	})
	a := &Advice{Kind: OptGlobalAdjust, Category: CatDivergence, Importance: share, KernelShare: x.KernelShare(k), Ranks: x.KernelRanks(k)}
	m, excess := 0.0, 0.0
	chained, priced := 0, 0
	// Only the share of a load's saving that DRAM traffic accounts for is
	// kept (served.go, item 31); GPA's rules alone keep all of it.
	var rate servedRate
	rateNA := ""
	if kv != nil && !kv.gpaOnly {
		rate, rateNA = kv.servedRate()
	}
	unknown, loads := 0, 0
	minF, maxF, minNs, maxNs := 1.0, 0.0, math.Inf(1), 0.0
	for i, d := range bad {
		w := x.Where(d.Node)
		w.Amount = float64(d.Sectors)
		if kv != nil {
			if r, ok := kv.byNode[d.Node]; ok {
				w.SASS = kv.where(r.fv, r.i).SASS
				if c, _ := kv.chainedLoads([]instRef{r}); len(c) > 0 {
					chained++ // its waits are round trips, not bandwidth (chains.go)
				} else {
					priced++
					f := 1.0
					if !kv.gpaOnly && r.fv.c.F.Insts[r.i].Mem.Op == sass.MemLoad {
						var ns float64
						var ok bool
						if rateNA == "" {
							f, ns, ok = kv.dramShare(r, rate)
						}
						if !ok {
							unknown++
						} else {
							loads++
							minF, maxF = math.Min(minF, f), math.Max(maxF, f)
							minNs, maxNs = math.Min(minNs, ns), math.Max(maxNs, ns)
						}
					}
					m += r.fv.cost(r.i) * (1 - d.Efficiency()) * f
					excess += 32 * (float64(d.Sectors) - d.Ideal*float64(d.WarpAccesses)) * f
				}
			}
		}
		if i < 5 {
			a.Hotspots = append(a.Hotspots, w)
		}
	}
	how := "cost of the divergent accesses × (1 - efficiency)"
	if kv != nil && kv.memoryBound() {
		// Memory bound: coalescing saves the excess sectors' share of the
		// traffic.
		m, how = kv.trafficCost(excess), fmt.Sprintf("memory stall samples × excess traffic %.0f of %.0f bytes", excess, kv.kernelBytes())
	}
	h := a.Hotspots[0]
	a.Hint = fmt.Sprintf("the warp accesses %s touch %.1f 32-byte sectors where %.0f would do: make consecutive lanes access consecutive addresses (structure of arrays, transposed indexing, or staging through shared memory).",
		at(h.File, h.Line), bad[0].Degree, bad[0].Ideal)
	a.Evidence = fmt.Sprintf("memory divergence: kernel %.2f sectors per warp access (ideal %.2f); %d divergent instructions, %.1f%% of the warp accesses; worst %.1f sectors/access at efficiency %.2f",
		tot.Degree, tot.Ideal, len(bad), 100*share, bad[0].Degree, bad[0].Efficiency())
	if kv != nil && chained > 0 {
		a.Evidence += fmt.Sprintf("; %d of the divergent loads depend on their own earlier results (a dependent chain): each waits a full round trip whatever its sectors, and what fewer sectors save of it is not in the profile", chained)
		if priced == 0 {
			a.SpeedupNA = "the divergent loads form a dependent chain (each load's address comes from its previous result): coalescing them shortens their round trips only by the queueing, which the profile does not measure"
			return a
		}
		a.Evidence += "; the estimate counts the other divergent accesses"
	}
	if kv != nil && unknown > 0 {
		why := rateNA
		if why == "" {
			why = fmt.Sprintf("%d of the divergent loads have no consumer in their basic block that waited on them, or no counts on the way to it", unknown)
		}
		a.SpeedupNA = "where the divergent loads' sectors come from (L1, L2 or DRAM) is not known: " + why + "; coalescing saves the excess sectors' cost only where they come from DRAM (item 31)"
		return a
	}
	if kv != nil && loads > 0 {
		a.Evidence += servedNote(loads, minF, maxF, minNs, maxNs, rate)
	}
	if kv != nil && m > 0 {
		a.Speedup = StallElimination(kv.T, m)
		a.Evidence += fmt.Sprintf("; M = %.0f of T = %.0f samples (%s), eq. 3 = %.3f", m, kv.T, how, a.Speedup)
	}
	return a
}

// simt returns each instruction node's share of active lanes, measured
// (thread/warp executions) where the profile has it, else from the lanes
// of the memory accesses at the same kernel source line.
func simt(x *Index, k profile.NodeID, kv *kernelView) (map[profile.NodeID]float64, string) {
	out := map[profile.NodeID]float64{}
	nodes := x.InstNodes(k)
	for _, id := range nodes {
		vs := x.P.Nodes[id].Metrics
		if e, t := vs.Get(profile.InstExecuted), vs.Get(InstThreadExecuted); e > 0 && t > 0 {
			out[id] = float64(t) / (32 * float64(e))
		}
	}
	if len(out) > 0 {
		return out, "thread/warp executions"
	}
	// Outermost source line of each instruction (its line in the kernel,
	// the call site for inlined code). The least active memory access of a
	// line stands for it: code inlined at a call inside a branch runs with
	// the branch's lanes, while loads hoisted above the branch (attributed
	// to the same line) still run with all of them. Where the kernel's
	// code is known, an access does not stand for code that lanes can
	// leave the kernel from before they reach the access (item 47): code
	// whose block dominates the access's, which does not post-dominate it,
	// with no block after it that every lane passes (it post-dominates
	// nothing but the kernel's exit). That code runs with more lanes than
	// the access: the steps of a block reduction whose threads exit one
	// step after another, its last store made by one lane.
	type access struct {
		c   *code
		b   int
		eff float64
	}
	blockOf := func(id profile.NodeID) (*code, int, bool) {
		if kv == nil {
			return nil, -1, false
		}
		r, ok := kv.byNode[id]
		if !ok {
			return nil, -1, false
		}
		b := r.fv.c.F.CFG().BlockOf(r.i)
		return r.fv.c, b, b >= 0
	}
	lineAcc := map[string][]access{}
	lineOf := map[profile.NodeID]string{}
	for _, id := range nodes {
		l := outerLine(x, id)
		lineOf[id] = l
		vs := x.P.Nodes[id].Metrics
		if w := vs.Get(profile.MemWarpAccess); w > 0 {
			lanes := vs.Get(profile.MemLoads) + vs.Get(profile.MemStores)
			if lanes == 0 {
				continue
			}
			c, b, _ := blockOf(id)
			lineAcc[l] = append(lineAcc[l], access{c, b, math.Min(1, float64(lanes)/(32*float64(w)))})
		}
	}
	for _, id := range nodes {
		c, b, known := blockOf(id)
		best, found := 0.0, false
		for _, a := range lineAcc[lineOf[id]] {
			if known && a.c == c && a.b >= 0 {
				if g := c.F.CFG(); g.Dominates(b, a.b) && !g.PostDominates(a.b, b) && g.IPDom[b] < 0 {
					continue
				}
			}
			if !found || a.eff < best {
				best, found = a.eff, true
			}
		}
		if found {
			out[id] = best
		}
	}
	return out, "active lanes of the memory accesses at the same source line"
}

// outerLine is the kernel-level source line of an instruction node: the
// outermost inlined call site, or its own line.
func outerLine(x *Index, id profile.NodeID) string {
	line := ""
	for cur := id; cur != profile.RootID; {
		n := x.P.Nodes[cur]
		if n == nil || n.Frame.Kind == profile.KindKernel {
			break
		}
		switch n.Frame.Kind {
		case profile.KindLine:
			if line == "" {
				line = Place(n.Frame.File, n.Frame.Line)
			}
		case profile.KindInlined:
			line = Place(n.Frame.File, n.Frame.Line)
		}
		cur = n.Parent
	}
	return line
}

func branchDivergenceAdvice(x *Index, k profile.NodeID, kv *kernelView, opts Options) *Advice {
	eff, how := simt(x, k, kv)
	if len(eff) == 0 {
		return nil
	}
	type item struct {
		id       profile.NodeID
		eff, amt float64
	}
	var items []item
	var total, div, m, memKept float64
	for _, id := range x.InstNodes(k) {
		vs := x.P.Nodes[id].Metrics
		weight := float64(vs.Get(profile.InstExecuted))
		// Regrouping lanes packs the same lanes' work into fewer warp
		// instructions: the issue and the dependency waits of partly idle
		// warps shrink with the idle share, the memory waits do not (item
		// 39): every lane still makes its own accesses, so the sectors and
		// the round trips stay.
		mem := 0.0
		if kv != nil {
			if r, ok := kv.byNode[id]; ok {
				weight = r.fv.total(r.i)
				if !kv.gpaOnly {
					mem = r.fv.memAt(r.i)
				}
			}
		}
		total += weight
		e, ok := eff[id]
		if !ok || e >= MaxSIMT || weight == 0 {
			continue
		}
		div += weight
		m += (weight - mem) * (1 - e)
		memKept += mem * (1 - e)
		items = append(items, item{id, e, weight * (1 - e)})
	}
	if total == 0 || div/total < opts.MinImportance {
		return nil
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].amt != items[j].amt {
			return items[i].amt > items[j].amt
		}
		return items[i].id < items[j].id
	})
	a := &Advice{Kind: OptBranchDivergence, Category: CatDivergence, Importance: div / total, KernelShare: x.KernelShare(k), Ranks: x.KernelRanks(k)}
	for i, it := range items {
		if i == 5 {
			break
		}
		w := x.Where(it.id)
		w.Amount = it.amt
		if kv != nil {
			if r, ok := kv.byNode[it.id]; ok {
				w.SASS = kv.where(r.fv, r.i).SASS
			}
		}
		a.Hotspots = append(a.Hotspots, w)
	}
	h := a.Hotspots[0]
	a.Hint = fmt.Sprintf("the code %s runs with %.0f%% of each warp's lanes: lanes of one warp take different paths. Map work to threads so that a warp's lanes agree (sort or regroup by the branch condition).", at(h.File, h.Line), 100*items[0].eff)
	a.Evidence = fmt.Sprintf("branch divergence (%s): %.1f%% of the kernel's %s in code below %.0f%% SIMT efficiency", how, 100*div/total, map[bool]string{true: "samples", false: "executions"}[kv != nil], 100*MaxSIMT)
	if kv != nil {
		a.Speedup = StallElimination(kv.T, m)
		a.Evidence += fmt.Sprintf("; M = %.0f of T = %.0f samples (samples × idle-lane share", m, kv.T)
		if memKept > 0 {
			a.Evidence += fmt.Sprintf("; the memory waits' %.0f stay: regrouped lanes make the same accesses (item 39)", memKept)
		}
		a.Evidence += fmt.Sprintf("), eq. 3 = %.3f", a.Speedup)
	}
	return a
}
