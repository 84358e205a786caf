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

// Kinds of GVProf's Table II insights.
const (
	KindConstant     = "constant replacement"    // spatial, one value
	KindConditional  = "conditional load/store"  // spatial, a dominant value
	KindCompression  = "compression"             // spatial, few distinct values
	KindNarrowType   = "narrower type"           // few distinct integers in a small range
	KindApproximate  = "approximate computing"   // spatial, close values
	KindScalarRepl   = "scalar replacement"      // temporal, inside a loop
	KindInlining     = "function inlining"       // temporal, callee prologue/epilogue
	KindRedundantPCs = "redundant value at a PC" // one PC reading one value (no object)
)

// RedundancyThresholds decide when a redundancy becomes an insight; the
// defaults and their reasons are in docs/insights.md.
type RedundancyThresholds struct {
	MinAccesses   uint64  // lane accesses below which value statistics are noise
	MinShare      float64 // share of the kernel's accesses of that kind
	DominantShare float64 // lower bound of the top value's share for "dominant"
	FewDistinct   float64 // distinct values that still fit an 8-bit code
	CloseRelRange float64 // (max-min)/max(|min|,|max|) for "close values"
	MinSpatial    float64 // eq. 2 ratio for the few-distinct and close classes
	MinTemporal   float64 // eq. 1 ratio of the later PC of a temporal pair
}

// DefaultRedundancy are the thresholds documented in docs/insights.md.
var DefaultRedundancy = RedundancyThresholds{
	MinAccesses:   64,
	MinShare:      0.01,
	DominantShare: 0.5,
	FewDistinct:   256,
	CloseRelRange: 0.1,
	MinSpatial:    0.5,
	MinTemporal:   0.3,
}

// InstInfo is what the redundancy and divergence analyses want to know
// about a PC from the SASS, when it is available.
type InstInfo struct {
	Opcode     string // e.g. "LDG.E.128"
	Text       string
	Local      bool // LDL/STL
	InPrologue bool // among the callee's saves or restores at entry/exit
	Bytes      int  // bytes per lane (vector width × unit), 0 if unknown
}

// InstLookup gives SASS facts about a PC (nil-safe: may return false).
type InstLookup func(pc profile.PC) (InstInfo, bool)

// Redundancy derives GVProf's Table II insights from p.
func Redundancy(x *Index, th RedundancyThresholds, insts InstLookup) []Advice {
	var out []Advice
	covered := map[InstKey]string{} // PCs already named by an object insight
	out = append(out, spatialInsights(x, th, covered)...)
	out = append(out, pcValueInsights(x, th, covered)...)
	out = append(out, temporalInsights(x, th, insts)...)
	return out
}

// kernelAccesses is the kernel context's measured lane accesses of kind a:
// its inclusive mem.loads/mem.stores, else the sum of its PCs' accesses.
func kernelAccesses(x *Index, k profile.NodeID, a profile.Access) uint64 {
	m := profile.MemLoads
	if a == profile.Store {
		m = profile.MemStores
	}
	if v := x.Inclusive(k).Get(m); v > 0 {
		return v
	}
	if x.pcAccesses == nil {
		x.pcAccesses = map[profile.PCKey]uint64{}
		for key, st := range x.P.PCs {
			x.pcAccesses[profile.PCKey{Context: key.Context, Access: key.Access}] += st.Accesses
		}
	}
	return x.pcAccesses[profile.PCKey{Context: k, Access: a}]
}

func redMetric(temporal bool, a profile.Access) profile.MetricID {
	switch {
	case temporal && a == profile.Load:
		return profile.RedTempLoad
	case temporal:
		return profile.RedTempStore
	case a == profile.Load:
		return profile.RedSpatLoad
	}
	return profile.RedSpatStore
}

// valueClass is the Table II class of a value distribution.
type valueClass struct {
	kind, hint, detail string
	frac               float64 // share of the flagged accesses' cost the optimisation removes
}

// classify returns the spatial class of the values in s (ok false if none
// applies). ratio is the eq. 2 (or eq. 1) redundancy ratio of the accesses.
func classify(s *profile.ValueSketch, ratio float64, th RedundancyThresholds, what string) (valueClass, bool) {
	if s == nil || s.Total < th.MinAccesses {
		return valueClass{}, false
	}
	top := s.Heaviest()
	if s.Exact() && len(top) == 1 {
		return valueClass{KindConstant,
			fmt.Sprintf("every access to %s reads/writes %s: replace it by a constant or a scalar kernel argument and drop the memory traffic.", what, fmtValue(s, top[0].Value)),
			fmt.Sprintf("single value %s in %d accesses", fmtValue(s, top[0].Value), s.Total), 1}, true
	}
	share := float64(top[0].Count-top[0].Err) / float64(s.Total)
	d := s.Distinct()
	narrow := func() (valueClass, bool) {
		if s.Kind == profile.ValFloat || s.Kind == profile.ValHashed || ratio < th.MinSpatial || d > th.FewDistinct || s.Bits <= 8 {
			return valueClass{}, false
		}
		need := intBits(s.AsInt(s.Min), s.AsInt(s.Max))
		if need >= int(s.Bits) {
			return valueClass{}, false
		}
		return valueClass{KindNarrowType,
			fmt.Sprintf("%s holds %.0f distinct integers in [%d, %d]: a %d-bit type halves (or better) its memory traffic.", what, d, s.AsInt(s.Min), s.AsInt(s.Max), need),
			fmt.Sprintf("%.0f distinct values, range [%d, %d] fits %d bits of %d; top value %s in >= %.1f%%", d, s.AsInt(s.Min), s.AsInt(s.Max), need, s.Bits, fmtValue(s, top[0].Value), 100*share),
			1 - float64(need)/float64(s.Bits)}, true
	}
	// A few small integers in a wide type shrink every access whatever
	// their distribution; that comes before a dominant value when the type
	// can lose half its width or more.
	if c, ok := narrow(); ok && intBits(s.AsInt(s.Min), s.AsInt(s.Max)) <= int(s.Bits)/2 { // (no range of hashes: narrow refuses them)
		return c, true
	}
	if share >= th.DominantShare {
		return valueClass{KindConditional,
			fmt.Sprintf("%.0f%% of the accesses to %s see %s: test for it and skip the load/store (or the computation on it) in that case.", 100*share, what, fmtValue(s, top[0].Value)),
			fmt.Sprintf("dominant value %s in >= %.1f%% of %d accesses", fmtValue(s, top[0].Value), 100*share, s.Total), share}, true
	}
	if c, ok := narrow(); ok {
		return c, true
	}
	// An index into a table of the values takes 8 bits: it saves nothing
	// on 8-bit data.
	if ratio >= th.MinSpatial && d <= th.FewDistinct && s.Bits > 8 {
		return valueClass{KindCompression,
			fmt.Sprintf("%s holds only %.0f distinct values: store an 8-bit index into a table of them (or a sparse format).", what, d),
			fmt.Sprintf("%.0f distinct values (%s), redundancy %.1f%%", d, distinctNote(s), 100*ratio), max(0, 1-8/float64(max(s.Bits, 8)))}, true
	}
	if s.Kind == profile.ValFloat && ratio >= th.MinSpatial/2 {
		lo, hi := s.AsFloat(s.Min), s.AsFloat(s.Max)
		scale := math.Max(math.Abs(lo), math.Abs(hi))
		if scale > 0 && !math.IsInf(scale, 0) && !math.IsNaN(scale) && (lo > 0) == (hi > 0) && (hi-lo)/scale <= th.CloseRelRange {
			return valueClass{KindApproximate,
				fmt.Sprintf("the values of %s stay within %.1f%% of each other ([%g, %g]): if the algorithm tolerates it, reuse a nearby value instead of recomputing or reloading it.", what, 100*(hi-lo)/scale, lo, hi),
				fmt.Sprintf("range [%g, %g], relative width %.3f, ~%.0f distinct", lo, hi, (hi-lo)/scale, d), 0}, true
		}
	}
	return valueClass{}, false
}

func distinctNote(s *profile.ValueSketch) string {
	if s.Exact() {
		return "exact"
	}
	return fmt.Sprintf("HyperLogLog estimate, ±%.0f%%", 100*profile.HLLRelErr)
}

// intBits is the width of the smallest of 8/16/32 bits holding [lo, hi].
func intBits(lo, hi int64) int {
	for _, b := range []int{8, 16, 32} {
		if lo >= 0 && hi < 1<<b {
			return b // unsigned
		}
		if lo >= -(1<<(b-1)) && hi < 1<<(b-1) {
			return b
		}
	}
	return 64
}

func fmtValue(s *profile.ValueSketch, raw uint64) string {
	if s.Kind == profile.ValHashed {
		return fmt.Sprintf("one value (hidden by --no-values, hash #%08x)", uint32(raw))
	}
	if s.Kind == profile.ValFloat {
		return fmt.Sprintf("%g", s.AsFloat(raw))
	}
	if s.Kind == profile.ValInt {
		return fmt.Sprintf("%d", s.AsInt(raw))
	}
	return fmt.Sprintf("%#x", raw)
}

type pcCount struct {
	pc profile.PC
	n  uint64
}

func spatialInsights(x *Index, th RedundancyThresholds, covered map[InstKey]string) []Advice {
	p := x.P
	pairs := map[profile.ObjectKey][]pcCount{}
	for k, n := range p.Spatial {
		ok := profile.ObjectKey{Context: k.Context, Object: k.Object, Access: k.Access}
		pairs[ok] = append(pairs[ok], pcCount{k.PC, n})
	}
	keys := make([]profile.ObjectKey, 0, len(p.ObjStats))
	for k := range p.ObjStats {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return objKeyLess(keys[i], keys[j]) })
	var out []Advice
	for _, key := range keys {
		st := p.ObjStats[key]
		if st.Accesses < th.MinAccesses {
			continue
		}
		var sc uint64
		for _, pc := range pairs[key] {
			sc += pc.n
		}
		ratio := float64(sc) / float64(st.Accesses)
		kacc := kernelAccesses(x, key.Context, key.Access)
		share := 0.0
		if kacc > 0 {
			share = float64(st.Accesses) / float64(kacc)
		}
		if share < th.MinShare {
			continue
		}
		what := objectName(x, key.Object)
		cls, ok := classify(st.Values, ratio, th, what)
		if !ok {
			continue
		}
		a := Advice{
			Kind:        cls.kind,
			Category:    CatRedundancy,
			Hint:        cls.hint,
			Importance:  share,
			KernelShare: x.KernelShare(key.Context),
			red:         &redInfo{frac: cls.frac, byKernel: map[profile.NodeID]float64{p.KernelOf(key.Context): cls.frac}},
		}
		hs := pairs[key]
		sort.Slice(hs, func(i, j int) bool { return hs[i].n > hs[j].n || (hs[i].n == hs[j].n && pcLess(hs[i].pc, hs[j].pc)) })
		alloc := x.AllocSite(key.Object)
		for i, h := range hs {
			if i == 5 {
				break
			}
			w := x.whereInst(key.Context, h.pc)
			o := key.Object
			w.Object, w.Alloc, w.Amount = &o, alloc, float64(h.n)
			a.Hotspots = append(a.Hotspots, w)
			covered[InstKey{key.Context, h.pc}] = cls.kind
		}
		if len(a.Hotspots) == 0 {
			a.Hotspots = []Where{x.WhereObject(key.Context, key.Object)}
		}
		node := a.Hotspots[0].Context
		ranks, note := x.nodeRanks(key.Context, node, redMetric(false, key.Access))
		a.Ranks = ranks
		a.Evidence = fmt.Sprintf("%s %ss of %s: %s; spatial redundancy %.1f%% (eq. 2: %d of %d accesses); %.1f%% of the kernel's %ss",
			symname.Short(p.Nodes[key.Context].Frame.Function), key.Access, what, cls.detail, 100*ratio, sc, st.Accesses, 100*share, key.Access)
		if note != "" {
			a.Evidence += "; " + note
		}
		out = append(out, a)
	}
	return out
}

func objectName(x *Index, o profile.ObjectID) string {
	obj := x.P.Objects[o]
	if obj == nil {
		return fmt.Sprintf("object %#x", uint64(o))
	}
	switch obj.Space {
	case 2:
		return "shared memory"
	case 3:
		return "local memory"
	}
	site := x.AllocSite(o)
	if i := strings.Index(site, " <- "); i >= 0 {
		site = site[:i]
	}
	return fmt.Sprintf("the %d-byte array allocated at %s", obj.Size, site)
}

// pcValueInsights classifies single PCs' values where no object insight
// covers them (shared, local or unattributed accesses), e.g. a load of a
// loop-invariant value.
func pcValueInsights(x *Index, th RedundancyThresholds, covered map[InstKey]string) []Advice {
	p := x.P
	keys := make([]profile.PCKey, 0, len(p.PCs))
	for k := range p.PCs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return pcKeyLess(keys[i], keys[j]) })
	var out []Advice
	for _, key := range keys {
		st := p.PCs[key]
		if st.Values == nil || st.Accesses < th.MinAccesses {
			continue
		}
		if _, done := covered[InstKey{key.Context, key.PC}]; done {
			continue
		}
		kacc := kernelAccesses(x, key.Context, key.Access)
		if kacc == 0 || float64(st.Accesses)/float64(kacc) < th.MinShare {
			continue
		}
		share := float64(st.Accesses) / float64(kacc)
		w := x.whereInst(key.Context, key.PC)
		what := fmt.Sprintf("the %s %s", key.Access, at(w.File, w.Line))
		// A single PC's values are not redundant in eq. 2's sense (no object),
		// but one value at one PC is the same opportunity.
		cls, ok := classify(st.Values, 1, th, what)
		if !ok || (cls.kind != KindConstant && cls.kind != KindConditional) {
			continue
		}
		w.Amount = float64(st.Accesses)
		ranks, note := x.nodeRanks(key.Context, w.Context, accessMetric(key.Access))
		a := Advice{
			Kind: cls.kind, Category: CatRedundancy, Hint: cls.hint,
			Importance: share, KernelShare: x.KernelShare(key.Context),
			Hotspots: []Where{w}, Ranks: ranks, red: &redInfo{frac: cls.frac},
			Evidence: fmt.Sprintf("PC %#x: %s; %.1f%% of the kernel's %ss", key.PC.Offset, cls.detail, 100*share, key.Access),
		}
		if note != "" {
			a.Evidence += "; " + note
		}
		out = append(out, a)
	}
	return out
}

func accessMetric(a profile.Access) profile.MetricID {
	if a == profile.Store {
		return profile.MemStores
	}
	return profile.MemLoads
}

type pairKey struct {
	ctx      profile.NodeID
	old, new profile.PC
	acc      profile.Access
}

// temporalInsights finds GVProf's two temporal patterns: redundant
// accesses inside a loop (scalar replacement), grouped per loop, and
// redundant local-memory saves/restores in a callee (inlining).
func temporalInsights(x *Index, th RedundancyThresholds, insts InstLookup) []Advice {
	p := x.P
	// Eq. 1 per later PC: redundant accesses over its accesses.
	perNew := map[profile.PCKey]uint64{}
	for k, n := range p.Temporal {
		perNew[profile.PCKey{Context: k.Context, PC: k.New, Access: k.Access}] += n
	}
	type group struct {
		kind  string
		ctx   profile.NodeID
		scope profile.NodeID // loop or callee function node
		acc   profile.Access
	}
	groups := map[group][]pairKey{}
	counts := map[pairKey]uint64{}
	for k, n := range p.Temporal {
		nk := profile.PCKey{Context: k.Context, PC: k.New, Access: k.Access}
		st := p.PCs[nk]
		if st == nil || st.Accesses < th.MinAccesses || float64(perNew[nk])/float64(st.Accesses) < th.MinTemporal {
			continue
		}
		newNode, ok1 := x.Inst[InstKey{k.Context, k.New}]
		oldNode, ok2 := x.Inst[InstKey{k.Context, k.Old}]
		if !ok1 {
			continue
		}
		pk := pairKey{k.Context, k.Old, k.New, k.Access}
		counts[pk] = n
		if ok2 {
			if l := commonLoop(x, newNode, oldNode); l != profile.RootID {
				groups[group{KindScalarRepl, k.Context, l, k.Access}] = append(groups[group{KindScalarRepl, k.Context, l, k.Access}], pk)
				continue
			}
		}
		if fn := x.Function(newNode); fn != profile.RootID && isCallee(x, k.Context, fn) && prologueAccess(x, k, insts) {
			groups[group{KindInlining, k.Context, fn, k.Access}] = append(groups[group{KindInlining, k.Context, fn, k.Access}], pk)
		}
	}
	gs := make([]group, 0, len(groups))
	for g := range groups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool {
		a, b := gs[i], gs[j]
		if a.ctx != b.ctx {
			return a.ctx < b.ctx
		}
		if a.scope != b.scope {
			return a.scope < b.scope
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.acc < b.acc
	})
	var out []Advice
	for _, g := range gs {
		ps := groups[g]
		sort.Slice(ps, func(i, j int) bool {
			if counts[ps[i]] != counts[ps[j]] {
				return counts[ps[i]] > counts[ps[j]]
			}
			return pcLess(ps[i].new, ps[j].new) || (ps[i].new == ps[j].new && pcLess(ps[i].old, ps[j].old))
		})
		var red uint64
		for _, pk := range ps {
			red += counts[pk]
		}
		kacc := kernelAccesses(x, g.ctx, g.acc)
		if kacc == 0 || float64(red)/float64(kacc) < th.MinShare {
			continue
		}
		share := float64(red) / float64(kacc)
		a := Advice{Kind: g.kind, Category: CatRedundancy, Importance: share, KernelShare: x.KernelShare(g.ctx), red: &redInfo{frac: 1}}
		var ratios []string
		for i, pk := range ps {
			if i == 5 {
				break
			}
			w := x.whereInst(g.ctx, pk.new)
			old := x.whereInst(g.ctx, pk.old)
			w.Pair, w.Amount = &old, float64(counts[pk])
			a.Hotspots = append(a.Hotspots, w)
			nk := profile.PCKey{Context: g.ctx, PC: pk.new, Access: pk.acc}
			a.red.tr = append(a.red.tr, float64(perNew[nk])/float64(p.PCs[nk].Accesses))
			ratios = append(ratios, fmt.Sprintf("%s<-%s %d (TR %.1f%%)", Place(w.File, w.Line), Place(old.File, old.Line), counts[pk],
				100*float64(perNew[nk])/float64(p.PCs[nk].Accesses)))
		}
		h := a.Hotspots[0]
		switch g.kind {
		case KindScalarRepl:
			a.Hint = fmt.Sprintf("the %ss %s in the loop at %s repeat the value of an earlier access to the same address: keep it in a register (hoist it out of the loop or mark the pointer __restrict__) instead of reaccessing memory each iteration.", g.acc, at(h.File, h.Line), h.Loop)
		case KindInlining:
			a.Hint = fmt.Sprintf("%s saves and restores unchanged values in local memory at its entry and exit: inline it (__forceinline__) so the caller's registers are not spilled around the call.", symname.Short(h.Function))
		}
		ranks, note := x.nodeRanks(g.ctx, h.Context, redMetric(true, g.acc))
		a.Ranks = ranks
		a.Evidence = fmt.Sprintf("temporal %s redundancy: %d redundant accesses, %.1f%% of the kernel's %ss; pairs (new<-old count, eq. 1 ratio): %s",
			g.acc, red, 100*share, g.acc, strings.Join(ratios, ", "))
		if note != "" {
			a.Evidence += "; " + note
		}
		out = append(out, a)
	}
	return out
}

// commonLoop returns the innermost loop holding both nodes, or RootID.
func commonLoop(x *Index, a, b profile.NodeID) profile.NodeID {
	la := x.Loops(a)
	in := map[profile.NodeID]bool{}
	for _, l := range x.Loops(b) {
		in[l] = true
	}
	for _, l := range la {
		if in[l] {
			return l
		}
	}
	return profile.RootID
}

// isCallee reports whether function node fn is a device function called by
// the kernel rather than the kernel's own body.
func isCallee(x *Index, k, fn profile.NodeID) bool {
	return x.P.Nodes[fn].Frame.Function != x.P.Nodes[k].Frame.Function
}

// prologueAccess reports whether the pair's accesses are local-memory
// saves/restores: the SASS says so, or, without SASS, the PCs touch the
// kernel's local-memory pseudo object.
func prologueAccess(x *Index, k profile.TemporalKey, insts InstLookup) bool {
	if insts != nil {
		ni, ok1 := insts(k.New)
		oi, ok2 := insts(k.Old)
		if ok1 && ok2 {
			return ni.Local && oi.Local && (ni.InPrologue || oi.InPrologue)
		}
	}
	if x.localPCs == nil {
		x.localPCs = map[InstKey]bool{}
		for sk := range x.P.Spatial {
			if o := x.P.Objects[sk.Object]; o != nil && o.Space == 3 {
				x.localPCs[InstKey{sk.Context, sk.PC}] = true
			}
		}
	}
	return x.localPCs[InstKey{k.Context, k.New}]
}

// whereInst locates PC pc of kernel context k (its instruction node if the
// profile has one).
func (x *Index) whereInst(k profile.NodeID, pc profile.PC) Where {
	if id, ok := x.Inst[InstKey{k, pc}]; ok {
		return x.Where(id)
	}
	w := Where{Context: k, PC: &pc}
	if n := x.P.Nodes[k]; n != nil {
		w.Kernel = symname.Demangle(n.Frame.Function)
	}
	if f := x.P.Funcs[pc.Func]; f != nil {
		w.Function = symname.Demangle(f.Name)
	}
	return w
}

func pcLess(a, b profile.PC) bool {
	if a.Func != b.Func {
		return a.Func < b.Func
	}
	return a.Offset < b.Offset
}

func objKeyLess(a, b profile.ObjectKey) bool {
	if a.Context != b.Context {
		return a.Context < b.Context
	}
	if a.Object != b.Object {
		return a.Object < b.Object
	}
	return a.Access < b.Access
}

func pcKeyLess(a, b profile.PCKey) bool {
	if a.Context != b.Context {
		return a.Context < b.Context
	}
	if a.PC != b.PC {
		return pcLess(a.PC, b.PC)
	}
	return a.Access < b.Access
}

// instLookup gives SASS facts about profile PCs for the redundancy
// analysis (nil without modules).
func instLookup(x *Index, mods ModuleSource) InstLookup {
	if mods == nil {
		return nil
	}
	return func(pc profile.PC) (InstInfo, bool) {
		fn := x.P.Funcs[pc.Func]
		if fn == nil {
			return InstInfo{}, false
		}
		m, err := mods.Module(fn.Module)
		if err != nil || m == nil {
			return InstInfo{}, false
		}
		f, i := instIndex(m, fn.Name, uint64(pc.Offset))
		if f == nil {
			return InstInfo{}, false
		}
		in := &f.Insts[i]
		info := InstInfo{Opcode: in.Opcode, Text: in.Text(), Local: in.Class == sass.ClassMemory && in.Mem.Space == sass.SpaceLocal}
		if k := f.AccessKinds()[i]; k.Vec > 0 {
			info.Bytes = k.Bits() / 8
		} else if in.Class == sass.ClassMemory {
			info.Bytes = in.Mem.Bits / 8
		}
		info.InPrologue = info.Local && prologueLocal(f, i)
		return info, true
	}
}

// prologueLocal reports whether local access i is among a function's
// register saves or restores: a store before any other memory access at
// entry, or a load after the last one before a return.
func prologueLocal(f *sass.Function, i int) bool {
	in := &f.Insts[i]
	if in.Mem.Op == sass.MemStore {
		for j := 0; j < i; j++ {
			if f.Insts[j].Class == sass.ClassMemory && f.Insts[j].Mem.Space != sass.SpaceLocal && f.Insts[j].Mem.Space != sass.SpaceConstant {
				return false
			}
			if f.Insts[j].Class == sass.ClassControl {
				return false
			}
		}
		return true
	}
	for j := i + 1; j < len(f.Insts); j++ {
		o := &f.Insts[j]
		if o.Flow == sass.FlowReturn {
			return true
		}
		if o.Class == sass.ClassMemory && o.Mem.Space != sass.SpaceLocal && o.Mem.Space != sass.SpaceConstant || o.Flow == sass.FlowBranch || o.Flow == sass.FlowCall {
			return false
		}
	}
	return false
}
