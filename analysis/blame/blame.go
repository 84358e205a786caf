package blame

import (
	"sort"
)

// Samples are one instruction's PC samples by stall reason name, and its
// executed count when instrumentation measured it (hybrid mode).
type Samples struct {
	ByReason map[string]float64
	Executed float64 // warp-level executions; < 0 when not measured
}

// Total is the instruction's samples over all reasons.
func (s Samples) Total() float64 {
	t := 0.0
	for _, v := range s.ByReason {
		t += v
	}
	return t
}

// Issued is the instruction's active-issue samples ("selected").
func (s Samples) Issued() float64 { return s.ByReason["selected"] }

// Options tune the blamer.
type Options struct {
	// Hybrid apportions by executed instructions (eq. 2) and keeps edges
	// only from executed sources; otherwise by issue samples (eq. 1).
	Hybrid bool
	// VarLatency bounds the latency of variable-latency producers by kind
	// for the latency rule (GPA: "their upper bound"); nil uses defaults.
	VarLatency map[Kind]int
}

// DefaultVarLatency are conservative upper bounds in cycles: beyond them a
// producer's result is assumed ready.
var DefaultVarLatency = map[Kind]int{
	KGlobalMem: 2000, KLocalMem: 2000, KGenericMem: 2000, KTextureMem: 2000,
	KSharedMem: 200, KConstMem: 400, KArithVar: 200, KSpecial: 200,
}

// Edge is a blamed dependency: Samples of Dst's stalls of Reason are
// attributed to Src.
type Edge struct {
	Src, Dst int
	Reason   string
	Class    string // GPA Fig. 3 class, e.g. "memory dependency: global memory"
	Samples  float64
	Distance float64 // mean issue distance in cycles from Src to Dst over the paths
}

// Pruned counts dependency-graph edges removed by each rule.
type Pruned struct {
	Opcode, Dominator, Latency, Cold int
}

// Result is the blamer's output for one function.
type Result struct {
	F     *Func
	Edges []Edge // by descending samples
	// Self[i] holds instruction i's samples that stay with it (reason ->
	// samples): non-dependency reasons, active samples, and dependency
	// stalls left without a source.
	Self []map[string]float64
	// SelfClass[i] classifies the dependency stalls left at i without a
	// source: "address calculation" or "scheduler" (GPA §3.2.3).
	SelfClass []map[string]string
	Pruned    Pruned
	// Stalled counts instructions with dependency stalls and Single those
	// whose remaining incoming edges all differ in reason (GPA's single
	// dependency coverage = Single/Stalled).
	Stalled, Single int
}

// Blame attributes the samples s (indexed like f.Insts) to their causes.
func Blame(f *Func, s []Samples, o Options) *Result {
	if o.VarLatency == nil {
		o.VarLatency = DefaultVarLatency
	}
	n := len(f.Insts)
	r := &Result{F: f, Self: make([]map[string]float64, n), SelfClass: make([]map[string]string, n)}
	for j := 0; j < n; j++ {
		var single = true
		var stalledHere bool
		seenReasons := 0
		for _, name := range sortedReasons(s[j].ByReason) {
			v := s[j].ByReason[name]
			if v == 0 {
				continue
			}
			rs, _ := LookupReason(name)
			if rs.Dep == DepNone {
				r.addSelf(j, name, v)
				continue
			}
			stalledHere = true
			seenReasons++
			edges := r.candidates(f, s, j, rs, o)
			if len(edges) == 0 {
				r.addSelf(j, name, v)
				cls := "scheduler"
				if f.Insts[j].Indirect {
					cls = "address calculation"
				}
				if r.SelfClass[j] == nil {
					r.SelfClass[j] = map[string]string{}
				}
				r.SelfClass[j][name] = cls
				continue
			}
			if len(edges) > 1 {
				single = false
			}
			// Eq. 1/2: S_i = R_path_i R_issue_i / sum_k(R_path_k R_issue_k) × S_j.
			var sum float64
			for _, e := range edges {
				sum += e.w
			}
			for _, e := range edges {
				r.Edges = append(r.Edges, Edge{Src: e.src, Dst: j, Reason: name,
					Class: Class(rs, f.Insts[e.src].Kind, e.war), Samples: v * e.w / sum, Distance: e.dist})
			}
		}
		if stalledHere {
			r.Stalled++
			if single {
				r.Single++
			}
		}
	}
	sort.SliceStable(r.Edges, func(a, b int) bool {
		ea, eb := r.Edges[a], r.Edges[b]
		if ea.Samples != eb.Samples {
			return ea.Samples > eb.Samples
		}
		if ea.Dst != eb.Dst {
			return ea.Dst < eb.Dst
		}
		return ea.Src < eb.Src
	})
	return r
}

func (r *Result) addSelf(j int, name string, v float64) {
	if r.Self[j] == nil {
		r.Self[j] = map[string]float64{}
	}
	r.Self[j][name] += v
}

type cand struct {
	src  int
	war  bool
	dist float64
	w    float64
}

// candidates slices backwards from j for reason rs and returns the pruned,
// weighted sources.
func (r *Result) candidates(f *Func, s []Samples, j int, rs Reason, o Options) []cand {
	in := &f.Insts[j]
	// Scoreboard waits name the variable-latency producers exactly; fixed
	// latency results (and code without control bits) go through registers.
	useSB := false
	if rs.Dep != DepFixed {
		for _, d := range in.Deps {
			if d.SB {
				useSB = true
				break
			}
		}
	}
	type key struct {
		src int
		war bool
	}
	found := map[key]uint32{} // source -> the register or scoreboard linking it
	var order []key
	for _, d := range in.Deps {
		if d.SB != useSB {
			continue
		}
		for _, i := range d.Defs {
			if i < 0 || i == j && !f.inLoopWith(i) {
				continue
			}
			k := key{i, d.WAR}
			if _, ok := found[k]; !ok {
				order = append(order, k)
			}
			found[k] = d.Reg
		}
	}
	var out []cand
	for _, k := range order {
		src := &f.Insts[k.src]
		if !matches(rs.Dep, src.Kind, src.Latency) {
			r.Pruned.Opcode++
			continue
		}
		if f.dominatedUse(k.src, j, found[k]) {
			r.Pruned.Dominator++
			continue
		}
		lat := src.Latency
		if lat == 0 {
			lat = o.VarLatency[src.Kind]
			if lat == 0 {
				lat = 2000
			}
		}
		minD, ok := f.minDistance(k.src, j)
		if !ok {
			r.Pruned.Latency++ // j cannot follow src: no dependency at run time
			continue
		}
		if minD > lat {
			r.Pruned.Latency++
			continue
		}
		avg, _ := f.avgDistance(k.src, j)
		out = append(out, cand{src: k.src, war: k.war, dist: avg})
	}
	if len(out) == 0 {
		return nil
	}
	// Dependency graph creation: keep sources that issued (or executed, in
	// hybrid mode); if none did, each counts as one sample.
	weight := func(i int) float64 {
		if o.Hybrid && s[i].Executed >= 0 {
			return s[i].Executed
		}
		return s[i].Issued()
	}
	any := false
	for _, c := range out {
		if weight(c.src) > 0 {
			any = true
		}
	}
	kept := out[:0]
	for _, c := range out {
		w := weight(c.src)
		if any && w == 0 {
			r.Pruned.Cold++
			continue
		}
		if !any {
			w = 1
		}
		// R_path: a longer path gets less blame; distances of at least one
		// cycle keep the ratio finite.
		c.w = w / max(c.dist, 1)
		kept = append(kept, c)
	}
	return kept
}

// inLoopWith reports whether instruction i can reach itself (a loop-carried
// self dependency such as an accumulator is a real edge).
func (f *Func) inLoopWith(i int) bool {
	_, ok := f.minDistance(i, i)
	return ok
}

// dominatedUse is GPA's dominator rule: the edge i -> j through reg is
// pruned if an unguarded k != j that reads the same definition lies on
// every path from i to j (k would have taken the stall).
func (f *Func) dominatedUse(i, j int, reg uint32) bool {
	if i >= len(f.Users) || f.Users[i] == nil {
		return false
	}
	for _, k := range f.Users[i][reg] {
		if k == j || k == i || f.Insts[k].Guarded {
			continue
		}
		if !f.reachesAvoiding(i, j, k) {
			return true
		}
	}
	return false
}

func sortedReasons(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Blamed sums the samples blamed on each source instruction.
func (r *Result) Blamed() []float64 {
	out := make([]float64, len(r.F.Insts))
	for _, e := range r.Edges {
		out[e.Src] += e.Samples
	}
	return out
}
