package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"gpuprof/profile"
	"gpuprof/sass"
	"gpuprof/symname"
)

// mergeObjectInsights joins the spatial insights of one kind about one
// data object in several kernel contexts into one advice about the object,
// for the changes that act on the object itself (its values or its type:
// a constant written by one kernel and read by another goes away in both).
// A conditional load or store is a change to one kernel's code and stays
// per kernel context.
func mergeObjectInsights(as []Advice) []Advice {
	type key struct {
		kind string
		obj  profile.ObjectID
	}
	idx := map[key]int{}
	var out []Advice
	for _, a := range as {
		if len(a.Hotspots) == 0 || a.Hotspots[0].Object == nil || a.Kind == KindConditional {
			out = append(out, a)
			continue
		}
		k := key{a.Kind, *a.Hotspots[0].Object}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, a)
			continue
		}
		m := &out[i]
		m.Hotspots = append(m.Hotspots, a.Hotspots...)
		sort.SliceStable(m.Hotspots, func(x, y int) bool { return m.Hotspots[x].Amount > m.Hotspots[y].Amount })
		m.Importance = max(m.Importance, a.Importance)
		m.KernelShare += a.KernelShare
		m.Evidence += " | " + a.Evidence
		if m.Ranks != nil && a.Ranks != nil {
			m.Ranks = unionRanks(m.Ranks, a.Ranks)
		} else {
			m.Ranks = nil
		}
		if a.red != nil && m.red != nil {
			m.red.frac = max(m.red.frac, a.red.frac)
			for k, f := range a.red.byKernel {
				if m.red.byKernel == nil {
					m.red.byKernel = map[profile.NodeID]float64{}
				}
				m.red.byKernel[k] = f
			}
		}
	}
	return out
}

func unionRanks(a, b []int32) []int32 {
	set := map[int32]bool{}
	for _, r := range append(append([]int32(nil), a...), b...) {
		set[r] = true
	}
	out := make([]int32, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// estimateRedundancy estimates a redundancy insight's speedup with GPA's
// stall-elimination estimator (eq. 3): the matched samples are what the
// accesses the optimisation removes cost (their own samples and the stalls
// blamed on them), per kernel context, and the kernels' times weigh the
// per-kernel estimates together. Without PC samples it stays 0.
func estimateRedundancy(x *Index, views map[profile.NodeID]*kernelView, a *Advice) {
	if a.red == nil || a.red.frac == 0 && a.Kind != KindConditional {
		return
	}
	byKernel := map[profile.NodeID][]int{} // kernel -> hotspot indexes
	var ks []profile.NodeID
	for i, h := range a.Hotspots {
		k := x.P.KernelOf(h.Context)
		if _, ok := byKernel[k]; !ok {
			ks = append(ks, k)
		}
		byKernel[k] = append(byKernel[k], i)
	}
	var before, after float64
	var notes []string
	estimated, timed := false, true // timed: before is in ns, comparable with the job's time
	for _, k := range ks {
		t := float64(x.KernelTime[k])
		kv := views[k]
		if kv == nil {
			before += t
			after += t
			continue
		}
		if t == 0 {
			t = kv.T
			timed = false
		}
		var refs []instRef
		var trs []float64
		for _, hi := range byKernel[k] {
			if r, ok := kv.ref(a.Hotspots[hi]); ok {
				refs = append(refs, r)
				if a.Hotspots[hi].SASS == "" {
					a.Hotspots[hi].SASS = kv.where(r.fv, r.i).SASS
				}
				if hi < len(a.red.tr) {
					trs = append(trs, a.red.tr[hi])
				} else {
					trs = append(trs, 1)
				}
			}
		}
		m, how, na := kv.redundancyCost(a, refs, trs)
		if na != "" {
			a.SpeedupNA = na
			return
		}
		estimated = true
		before += t
		left := t * max(0, 1-m/kv.T) // a kernel whose work all goes away costs nothing
		note := fmt.Sprintf("%s: M = %.0f of T = %.0f samples", symname.Short(x.P.Nodes[k].Frame.Function), m, kv.T)
		if how != "" {
			note += " (" + how + ")"
		}
		if left > 0 && timed {
			if fl, how, ok := kv.lifetimeFloor(kv.removedBy(a, refs)); ok && fl > left {
				left = fl
				note += fmt.Sprintf(", above the %s (%.1f%% of its time)", how, 100*fl/t)
			}
			if fl, how, ok := kv.dramFloor(kv.objectsShrunk(a, byKernel[k])); ok && fl*float64(kv.x.TimedLaunches(k)) > left {
				left = fl * float64(kv.x.TimedLaunches(k))
				note += fmt.Sprintf(", above the %s", how)
			}
		}
		if l, capped := keepKernelTime(left, t); capped {
			left = l
			note += ", no lower than the kernel's own time"
		}
		after += left
		notes = append(notes, note)
	}
	if !estimated {
		return
	}
	if after <= 0 {
		// Every kernel the advice touches goes away (a kernel that only
		// writes a constant, say): their speedup is unbounded, so the
		// estimate is taken over the job's GPU time instead, and the
		// advice's share becomes the whole job so that the time it saves
		// stays the kernels' time.
		job := float64(x.JobTime)
		if !timed || job <= before {
			return
		}
		a.Speedup = job / (job - before)
		a.KernelShare = 1
		a.Evidence += fmt.Sprintf("; estimate: %s, so the kernels' work all goes away; over the job's GPU time (eq. 3) = %.3f", strings.Join(notes, ", "), a.Speedup)
		return
	}
	a.Speedup = before / after
	a.Evidence += fmt.Sprintf("; estimate (eq. 3 per kernel, weighted by kernel time): %s = %.3f", strings.Join(notes, ", "), a.Speedup)
}

// ref finds the SASS instruction of a hotspot.
func (kv *kernelView) ref(w Where) (instRef, bool) {
	if r, ok := kv.byNode[w.Context]; ok {
		return r, true
	}
	if w.PC == nil {
		return instRef{}, false
	}
	fn := kv.x.P.Funcs[w.PC.Func]
	if fn == nil {
		return instRef{}, false
	}
	for _, fv := range kv.fns {
		if fv.c.F.Name == fn.Name {
			if i := fv.c.F.InstAt(uint64(w.PC.Offset)); i >= 0 {
				return instRef{fv, i}, true
			}
		}
	}
	return instRef{}, false
}

// redundancyCost is the samples the insight's optimisation removes in one
// kernel context. The removed accesses' cost is their share of the
// kernel's memory traffic times its memory stall samples when the kernel
// is memory bound (its accesses compete for bandwidth), else their own
// samples and the stalls blamed on them.
//
// When the accesses stay (narrower), a load on a dependent chain keeps its
// round trips whatever its width (chains.go): it is left out, and with
// nothing else left the estimate is n/a (na says why).
func (kv *kernelView) redundancyCost(a *Advice, refs []instRef, trs []float64) (m float64, how, na string) {
	if a.Kind == KindScalarRepl {
		m, how = kv.scalarReplacementCost(refs, trs)
		return m, how, ""
	}
	if a.Kind == KindConstant && kv.onlyStores(refs) {
		return kv.T, "", "" // the kernel only writes the constant: it goes away
	}
	rs, frac, gone := kv.removed(a, refs)
	if !gone && !kv.gpaOnly {
		if why := kv.roundTripBound(); why != "" {
			return 0, why, ""
		}
	}
	if !gone {
		chained, rest := kv.chainedLoads(rs)
		switch {
		case len(chained) > 0 && len(rest) == 0:
			return 0, "", "the accesses are loads on a dependent chain (each address comes from the previous result): a narrower access shortens their round trips only by the queueing, which the profile does not measure"
		case len(chained) > 0:
			rs, how = rest, fmt.Sprintf("%d loads on a dependent chain left out", len(chained))
		}
	}
	if kv.memoryBound() {
		b := 0.0
		for _, r := range rs {
			if id := kv.nodeOf(r.fv, r.i); id != 0 {
				b += kv.bytesAt(id, r.fv.c.F.Insts[r.i].Mem.Bits/8)
			}
		}
		if b > 0 {
			return kv.trafficCost(frac * b), how, ""
		}
	}
	return frac * (sumCost(rs, 1) + kv.throttleRelief(rs)), how, ""
}

// objectsShrunk is the bytes of each object that advice a, through its
// hotspots his, takes off kernel context kv's footprint: a constant all of
// them, a narrower type or an index its share of each.
func (kv *kernelView) objectsShrunk(a *Advice, his []int) map[profile.ObjectID]float64 {
	_, by := kv.footprint()
	out := map[profile.ObjectID]float64{}
	f := a.red.fracIn(kv.k)
	if a.Kind == KindConstant {
		f = 1
	}
	for _, hi := range his {
		if o := a.Hotspots[hi].Object; o != nil {
			out[*o] = f * by[*o]
		}
	}
	return out
}

// removed is what the insight's optimisation takes away in one kernel
// context: the accesses, the share of their traffic, and whether the
// accesses themselves go (a constant, a skipped load) or stay, narrower.
func (kv *kernelView) removed(a *Advice, refs []instRef) (rs []instRef, frac float64, gone bool) {
	switch a.Kind {
	case KindConstant:
		return refs, 1, true
	case KindConditional:
		// Skipping the work on the dominant value saves the loads combined
		// with the flagged value, or the flagged store itself where the
		// thread already holds what the store overwrites (item 46).
		var co []instRef
		for _, r := range refs {
			if r.fv.c.F.Insts[r.i].Mem.Op == sass.MemStore {
				if r.fv.c.loadsStoredAddress(r.i) {
					co = append(co, r)
				}
				continue
			}
			co = append(co, coLoads(r)...)
		}
		return dedupRefs(co), a.red.fracIn(kv.k), true
	}
	return refs, a.red.fracIn(kv.k), false
}

// removedBy is what removed takes from each access, for the block-lifetime
// floor.
func (kv *kernelView) removedBy(a *Advice, refs []instRef) map[instRef]removal {
	rs, frac, gone := kv.removed(a, refs)
	out := map[instRef]removal{}
	for _, r := range rs {
		rm := removal{bytes: frac}
		if gone {
			rm.chain = frac
		}
		out[r] = rm
	}
	if a.Kind == KindConditional {
		// The loads skipped on the dominant value are guarded by a test of
		// the flagged load's value: they now wait for it.
		for _, r := range refs {
			if r.fv.c.F.Insts[r.i].Mem.Op == sass.MemStore {
				continue
			}
			for _, c := range coLoads(r) {
				rm := out[c]
				rm.after = append(rm.after, r)
				out[c] = rm
			}
		}
	}
	return out
}

func sumCost(refs []instRef, frac float64) float64 {
	t := 0.0
	for _, r := range refs {
		t += r.fv.cost(r.i)
	}
	return frac * t
}

func dedupRefs(rs []instRef) []instRef {
	seen := map[instRef]bool{}
	var out []instRef
	for _, r := range rs {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// onlyStores reports whether every global store of the kernel is among refs
// and the kernel loads nothing from global memory: a kernel that only
// writes a constant.
func (kv *kernelView) onlyStores(refs []instRef) bool {
	in := map[instRef]bool{}
	for _, r := range refs {
		in[r] = true
	}
	stores := 0
	for _, fv := range kv.fns {
		for i := range fv.c.F.Insts {
			ins := &fv.c.F.Insts[i]
			if ins.Class != sass.ClassMemory || ins.Mem.Space == sass.SpaceConstant || ins.Mem.Space == sass.SpaceShared {
				continue
			}
			if ins.Mem.Op == sass.MemLoad && ins.Mem.Space != sass.SpaceLocal {
				return false
			}
			if ins.Mem.Op != sass.MemLoad {
				stores++
				if !in[instRef{fv, i}] {
					return false
				}
			}
		}
	}
	return stores > 0
}

// coLoads returns the global loads whose values meet load r's value in an
// instruction (the other operands of its consumers).
func coLoads(r instRef) []instRef {
	f := r.fv.c.F
	du := f.DefUse()
	var out []instRef
	for d, reg := range du.Defs[r.i] {
		if reg.Kind() != sass.KindR {
			continue
		}
		for _, u := range du.DU[r.i][d] {
			for k, ur := range du.Uses[u] {
				if ur.Kind() != sass.KindR {
					continue
				}
				for _, src := range du.UD[u][k] {
					if src < 0 || int(src) == r.i {
						continue
					}
					s := &f.Insts[src]
					if s.Class == sass.ClassMemory && s.Mem.Op == sass.MemLoad && (s.Mem.Space == sass.SpaceGlobal || s.Mem.Space == sass.SpaceGeneric) {
						out = append(out, instRef{r.fv, int(src)})
					}
				}
			}
		}
	}
	return out
}

// scalarReplacementCost: the flagged redundant loads (their eq. 1 share of
// cost), and every access of the loop to a loop-invariant address that
// scalar replacement keeps in a register: its loads, and its stores, which
// go once after the loop. Scalar replacement already assumes that the
// loop's invariant references do not alias (the flagged load is reloaded
// only because a store might change it), and then only the last store to
// an invariant address can be seen, unless a barrier in the loop lets
// other threads read the ones before: without one, every store to an
// invariant address leaves the loop (before, only those whose address
// was also loaded in the loop did: loop_reload's y[i], kept in a
// register by the compiler but stored every iteration, was left in). A
// store before the loop to such an address goes too (deadBeforeLoop).
func (kv *kernelView) scalarReplacementCost(refs []instRef, trs []float64) (float64, string) {
	counted := map[instRef]bool{}
	m := 0.0
	for _, r := range refs {
		li := r.fv.c.Loop[r.i]
		if li < 0 {
			continue
		}
		loads := map[string]bool{}
		var stores []instRef
		barrier := false
		for i := range r.fv.c.F.Insts {
			in := &r.fv.c.F.Insts[i]
			if r.fv.inLoop(i, li) && in.Class == sass.ClassSync && (in.Op == "BAR" || in.Op == "MEMBAR") {
				barrier = true
			}
			if !r.fv.inLoop(i, li) || in.Class != sass.ClassMemory || in.Mem.Space == sass.SpaceConstant || in.Mem.Space == sass.SpaceShared {
				continue
			}
			key, inv := r.fv.c.invariantAddress(i, li)
			if !inv {
				continue
			}
			if in.Mem.Op == sass.MemLoad {
				loads[key] = true
				if !counted[instRef{r.fv, i}] {
					counted[instRef{r.fv, i}] = true
					m += r.fv.cost(i)
				}
			} else if in.Mem.Op == sass.MemStore {
				stores = append(stores, instRef{r.fv, i})
			}
		}
		gone := map[string]bool{}
		for _, s := range stores {
			key, _ := s.fv.c.invariantAddress(s.i, li)
			if (loads[key] || !barrier && !kv.gpaOnly) && !counted[s] {
				counted[s] = true
				gone[key] = true
				m += s.fv.cost(s.i)
			}
		}
		if !barrier && !kv.gpaOnly {
			for _, s := range deadBeforeLoop(r.fv, li, gone) {
				if !counted[s] {
					counted[s] = true
					m += s.fv.cost(s.i)
				}
			}
		}
	}
	var gone []instRef
	for r := range counted {
		gone = append(gone, r)
	}
	m += kv.throttleRelief(gone)
	for k, r := range refs {
		if !counted[r] {
			counted[r] = true
			m += trs[k] * r.fv.cost(r.i)
		}
	}
	if mi, how, ok := kv.issueSavings(kv.scalarReplacementIssue(refs, gone)); ok && mi > m {
		return mi, how + fmt.Sprintf(", more than the %.0f samples of eq. 3", m)
	}
	return m, ""
}

// scalarReplacementIssue is the executions scalar replacement removes, for
// issueSavings: the invariant accesses that leave their loop (gone), and
// for each flagged load in a loop, all but one load per register it needs
// (unrollPeriod) of its executions per warp, with the instructions that
// compute only its address; a loop-variant one needs the loop unrolled by
// that period, whose loop control then runs once in as many iterations.
func (kv *kernelView) scalarReplacementIssue(refs []instRef, gone []instRef) map[instRef]float64 {
	out := map[instRef]float64{}
	for _, r := range gone {
		out[r] = 1
	}
	warps := kv.countedWarps()
	for _, r := range refs {
		li := r.fv.c.Loop[r.i]
		if li < 0 || warps <= 0 {
			continue
		}
		per := r.fv.s[r.i].Executed / warps // executions per warp
		p := kv.unrollPeriod(r.fv, r.i, li)
		if p <= 0 || per <= p {
			continue
		}
		f := 1 - p/per
		ctl := r.fv.loopControl(li)
		for _, j := range append(r.fv.addressSlice(r.i, li, ctl), r.i) {
			out[instRef{r.fv, j}] = math.Max(out[instRef{r.fv, j}], f)
		}
		if p > 1 {
			for j := range ctl {
				out[instRef{r.fv, j}] = math.Max(out[instRef{r.fv, j}], 1-1/p)
			}
		}
	}
	return out
}

// deadBeforeLoop returns the stores before loop li to an address whose
// stores in the loop scalar replacement moves after it (keys): with the
// value in a register from there on, the one store after the loop
// overwrites them (loop_reload's y[i] = x[i] before its loop). Only
// stores in blocks that dominate the loop's header, with no barrier
// between them and the loop, and only when the loop ran (its instructions
// have samples or counts): a loop that never runs leaves them the last.
func deadBeforeLoop(fv *fnView, li int, keys map[string]bool) []instRef {
	if len(keys) == 0 {
		return nil
	}
	g := fv.c.F.CFG()
	header := g.Loops[li].Header
	start := g.Blocks[header].Start
	ran := false
	for i := range fv.s {
		if fv.inLoop(i, li) && (fv.total(i) > 0 || fv.s[i].Executed > 0) {
			ran = true
			break
		}
	}
	if !ran {
		return nil
	}
	var out []instRef
	for i := start - 1; i >= 0; i-- {
		in := &fv.c.F.Insts[i]
		if in.Class == sass.ClassSync && (in.Op == "BAR" || in.Op == "MEMBAR") {
			break
		}
		if fv.inLoop(i, li) || in.Class != sass.ClassMemory || in.Mem.Op != sass.MemStore ||
			in.Mem.Space == sass.SpaceShared || in.Mem.Space == sass.SpaceLocal || !g.Dominates(g.BlockOf(i), header) {
			continue
		}
		if key, ok := fv.c.invariantAddress(i, li); ok && keys[key] {
			out = append(out, instRef{fv, i})
		}
	}
	return out
}

// keepKernelTime caps the time a kernel is estimated to take after a
// change at the time it took before (item 44). A floor above the
// kernel's own time says the floor's model does not fit the kernel, not
// that removing work slows it: held-out set 6 had conditional load/store
// estimates of 0.47x and 0.53x, whose floors exceeded the kernels' times.
func keepKernelTime(left, t float64) (float64, bool) {
	if left > t {
		return t, true
	}
	return left, false
}

// loadsStoredAddress reports whether the function loads, with the same
// base registers (the same definitions reaching them), offset and width,
// the address that store i writes: a read-modify-write, whose old value
// the thread holds. A store skipped where it would write the value
// already there (a silent store) must know that value: without the load
// the test adds one, as many bytes as the store writes, and saves nothing
// the traffic model can see (docs/validation.md, item 46).
func (c *code) loadsStoredAddress(i int) bool {
	f := c.F
	st := &f.Insts[i]
	o, ok := memOperand(st)
	if !ok || !o.Base.Tracked() {
		return false
	}
	key := addrKey(f, i, o)
	for j := range f.Insts {
		in := &f.Insts[j]
		if j == i || !isGlobalLoad(in) || in.Mem.Bits != st.Mem.Bits {
			continue
		}
		if oj, ok := memOperand(in); ok && oj.Offset == o.Offset && addrKey(f, j, oj) == key {
			return true
		}
	}
	return false
}
