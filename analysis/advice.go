// Package analysis turns a merged profile into advice: GVProf's value
// redundancy insights, GPA's stall blaming, optimizers and speedup
// estimators, GPUscout's static SASS checks, CUDAAdvisor's divergence and
// reuse metrics, and whole-cluster imbalance.
package analysis

import (
	"fmt"
	"math"
	"sort"

	"gpuprof/profile"
	"gpuprof/sass"
)

// Where locates a finding in the program.
type Where struct {
	Context  profile.NodeID // calling context (kernel, loop, line or instruction node)
	Kernel   string         // kernel function (demangled where possible)
	Function string         // GPU function holding the hotspot
	File     string
	Line     uint32
	Loop     string // loop header file:line, "" if not in a loop
	PC       *profile.PC
	Object   *profile.ObjectID // data object, for data-centric findings
	Alloc    string            // Object's allocation context, innermost frame first
	SASS     string            // the instruction text, where known
	// Amount is what this hotspot contributes: stall samples blamed on it,
	// redundant accesses, or flagged executions (see the advice's Evidence).
	Amount float64
	// Pair is the other end of an instruction pair: the instruction a
	// stall is blamed on (Where is the stalled one), or the earlier access
	// of a temporal redundancy pair.
	Pair *Where
}

// Advice is one ranked finding.
type Advice struct {
	Kind       string  // optimizer or insight name, e.g. "constant replacement", "memory coalescing"
	Category   string  // "redundancy", "stall", "static", "divergence", "imbalance"
	Hint       string  // what to do, in a sentence or two
	Importance float64 // share of the kernel's samples/accesses/time it concerns (0..1)
	Speedup    float64 // estimated speedup of the kernel (1 = none); 0 if not estimated
	Hotspots   []Where // the first is the main one
	Ranks      []int32 // ranks it applies to; nil means all
	Evidence   string  // the measured numbers behind it
	// KernelShare is the share of the job's GPU time spent in the kernel
	// context the advice is about (0 if unknown, e.g. static advice).
	KernelShare float64
	// Phase is the framework phase that launched the advice's kernel
	// (PhaseAutotuning, PhaseCompile; "" for the program's own, repeated
	// work): such advice ranks after the rest.
	Phase string
	// SpeedupNA says why no speedup is shown although the model gave one
	// (the estimate exceeded what the model can justify; Speedup is 0).
	SpeedupNA string
	// SampledRanks are the ranks whose PC samples the advice rests on,
	// for advice built from PC samples when the profile records which
	// ranks' GPUs were sampled (one process per GPU is: the others give
	// kernel times only).
	SampledRanks []int32

	red    *redInfo    // what the speedup estimate of a redundancy insight needs
	static []staticRef // the instructions a static finding flags
}

// redInfo carries a redundancy insight's numbers to its speedup estimate.
type redInfo struct {
	frac float64   // share of the flagged accesses' cost the optimisation removes
	tr   []float64 // eq. 1 ratio of each temporal hotspot
	// byKernel is frac per kernel context where an insight about one
	// object merges several kernels (mergeObjectInsights): each kernel
	// accesses the object with its own width and values, so a narrower
	// type or an index saves each of them its own share.
	byKernel map[profile.NodeID]float64
}

// fracIn is the share the optimisation removes in kernel context k.
func (r *redInfo) fracIn(k profile.NodeID) float64 {
	if f, ok := r.byKernel[k]; ok {
		return f
	}
	return r.frac
}

// Categories.
const (
	CatRedundancy = "redundancy"
	CatStall      = "stall"
	CatStatic     = "static"
	CatDivergence = "divergence"
	CatImbalance  = "imbalance"
)

// Note reports whether the entry is a note about a kernel (a waiting
// kernel) rather than advice: viewers show notes apart.
func (a Advice) Note() bool { return a.Category == CatWaiting }

// JobGain is the share of the job's GPU time the advice would save: the
// kernel's share times 1-1/Speedup, or times Importance when no speedup is
// estimated.
func (a Advice) JobGain() float64 {
	if a.Note() {
		return 0
	}
	share := a.KernelShare
	if share == 0 {
		share = 1
	}
	if a.Speedup > 1 {
		return share * (1 - 1/a.Speedup)
	}
	return share * a.Importance * 0.01 // unestimated findings rank below estimated ones
}

// SortAdvice orders advice across the job: advice on the program's
// repeated work first, then advice on kernels of a framework's compile or
// autotuning phase, then notes; within each, by JobGain, then speedup,
// importance and kind, so the order is deterministic.
func SortAdvice(as []Advice) {
	sort.SliceStable(as, func(i, j int) bool {
		a, b := as[i], as[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if ga, gb := a.JobGain(), b.JobGain(); ga != gb && !nearlyEqual(ga, gb) {
			return ga > gb
		}
		if a.Speedup != b.Speedup {
			return a.Speedup > b.Speedup
		}
		if a.Importance != b.Importance {
			return a.Importance > b.Importance
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if la, lb := firstLine(a), firstLine(b); la != lb {
			return la < lb
		}
		// Advice built from maps arrives in any order: the rest of the
		// main hotspot and the evidence decide ties, so reports repeat.
		if ka, kb := hotspotKey(a), hotspotKey(b); ka != kb {
			return ka < kb
		}
		return a.Evidence < b.Evidence
	})
}

// hotspotKey names an advice's main hotspot for ordering ties.
func hotspotKey(a Advice) string {
	if len(a.Hotspots) == 0 {
		return ""
	}
	h := a.Hotspots[0]
	return fmt.Sprintf("%s\x00%s\x00%016x\x00%s\x00%d", h.Kernel, h.Function, uint64(h.Context), h.SASS, len(a.Hotspots))
}

// rank groups advice for SortAdvice: repeated work, framework phases, notes.
func rank(a Advice) int {
	switch {
	case a.Note():
		return 2
	case a.Phase != "":
		return 1
	}
	return 0
}

func nearlyEqual(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b)) }

func firstLine(a Advice) uint64 {
	if len(a.Hotspots) == 0 {
		return 0
	}
	h := a.Hotspots[0]
	if h.PC != nil {
		return uint64(h.PC.Func)<<20 ^ uint64(h.PC.Offset)
	}
	return uint64(h.Line)
}

// ByKernel groups advice by the kernel of its main hotspot, each group
// ordered by estimated speedup (then importance).
func ByKernel(as []Advice) map[string][]Advice {
	out := map[string][]Advice{}
	for _, a := range as {
		k := ""
		if len(a.Hotspots) > 0 {
			k = a.Hotspots[0].Kernel
		}
		out[k] = append(out[k], a)
	}
	for _, g := range out {
		sort.SliceStable(g, func(i, j int) bool {
			if g[i].Speedup != g[j].Speedup {
				return g[i].Speedup > g[j].Speedup
			}
			return g[i].Importance > g[j].Importance
		})
	}
	return out
}

// NoGainShare is the share of the job's GPU time below which the best
// estimated advice is not worth a change: the report then says there is
// nothing big to gain.
const NoGainShare = 0.05

// NothingBigToGain returns the estimated advice on the program's repeated
// work that would save the most of the job's GPU time, and whether even
// that one saves less than NoGainShare (true also when nothing is
// estimated).
func NothingBigToGain(as []Advice) (*Advice, bool) {
	var best *Advice
	for i := range as {
		a := &as[i]
		if a.Speedup <= 0 || a.Phase != "" {
			continue
		}
		if best == nil || a.JobGain() > best.JobGain() {
			best = a
		}
	}
	return best, best == nil || best.JobGain() < NoGainShare
}

// staticRef ties a static finding's hotspot to its instruction.
type staticRef struct {
	f *sass.Function
	i int
}

// CatWaiting is the category of the note Advise adds for a waiting kernel
// (KindWaiting); it is no advice, and viewers show it apart.
const (
	CatWaiting  = "waiting"
	KindWaiting = "waiting kernel"
)
