package analysis

import (
	"math"
	"sort"

	"gpuprof/analysis/blame"
)

// What every optimizer builds on: the match it reports and the ways it
// gathers samples into one. The optimizers themselves are in
// optimizers.go and parallelism.go; keeping these apart lets the
// parallelism optimizers sit below the list that runs them.

// GPA optimizer names (TPDS 2021, Table 2).
const (
	OptRegisterIncrease   = "register increase"
	OptStrengthReduction  = "strength reduction"
	OptFunctionSplit      = "function split"
	OptFastMath           = "fast math"
	OptWarpBalance        = "warp balance"
	OptGlobalTransactions = "global memory transaction reduction"
	OptSharedTransactions = "shared memory transaction reduction"
	OptIndirectAccess     = "indirect memory access reduction"
	OptGlobalAdjust       = "global memory access adjustment"
	OptSharedAdjust       = "shared memory access adjustment"
	OptLoopUnrolling      = "loop unrolling"
	OptCodeReordering     = "code reordering"
	OptFunctionInlining   = "function inlining"
	OptAsyncCopy          = "asynchronous memory copy"
	OptBranchDivergence   = "branch divergence"
	OptBlockIncrease      = "block increase"
	OptThreadIncrease     = "thread increase"
	OptOccupancyIncrease  = "occupancy increase"
)

// estimator says which of GPA's equations gives a match's speedup.
type estimator uint8

const (
	estElimination estimator = iota // eq. 3
	estHiding                       // eq. 5/6 over the match's scope
	estGiven                        // computed by the optimizer (match.S)
)

// hot is a hotspot of a match: instruction i of fv (the source of blamed
// stalls, or the flagged instruction), with the stalled instruction it
// was blamed from (pair, -1 if none).
type hot struct {
	fv     *fnView
	i      int
	pair   int
	amount float64
}

// match is what one optimizer found in one kernel context.
type match struct {
	kind string
	est  estimator
	M    float64 // matched samples (eq. 3) or matched latency samples (eq. 5/6)
	A    float64 // active samples of the scope (eq. 5/6)
	// Mexec is the part of M that waits on arithmetic (fixed-latency or
	// MIO) results, and starved says the schedulers had at most one
	// eligible warp: then instruction-level parallelism alone can hide
	// those waits (eq. 4) while memory latency stays bounded by A (eq. 5).
	Mexec   float64
	starved bool
	// Mfused is what the loop fusion that a reordering implies removes
	// outright (fusion.go), on top of the hidden latency; Afused is its
	// active part, which no longer covers latency.
	Mfused, Afused float64
	// alsoGone are instructions the change removes that are no hotspots
	// (a routine whose every call goes, item 49), for the issue bound.
	alsoGone []instRef
	// grouped is the share of a loop's passes that unrolling puts in full
	// groups (item 51), where groupedKnown (without instruction counts,
	// all of them are taken to).
	grouped      float64
	groupedKnown bool
	// Mover is the part of M that is round trips put in flight together
	// with others (movable.go, item 45): it goes without work to hide
	// behind.
	Mover float64
	// scopes, where the kernel has block-wide barriers, splits M, Mexec,
	// A and Afused by barrier interval: a wait hides only behind work
	// between the same two barriers (barriers.go).
	scopes []scope
	// inFlight, when above 1, is how many iterations' waits the change
	// overlaps (loop unrolling by that factor, item 43): the first of each
	// group still waits, so at most (inFlight-1)/inFlight of M can hide.
	inFlight int
	S        float64 // the speedup, for estGiven
	// cost, when positive, multiplies the estimate: what the change costs
	// elsewhere (the occupancy that moved loads' registers lose, item 29).
	cost float64
	// na says why the estimate cannot be given (Advice.SpeedupNA).
	na     string
	note   string // what the estimate adds to the evidence
	hots   []hot
	hint   string
	detail string
}

// speedup applies the match's estimator, and its cost.
func (m *match) speedup(T float64) float64 {
	s := m.gain(T)
	if m.cost > 0 {
		s *= m.cost
	}
	return s
}

// gain is the match's estimator alone.
func (m *match) gain(T float64) float64 {
	if m.est == estGiven {
		return m.S
	}
	f := 1.0
	if m.inFlight > 1 {
		f = float64(m.inFlight-1) / float64(m.inFlight)
		if m.groupedKnown {
			f *= m.grouped
		}
	}
	if m.est == estHiding && m.scopes != nil {
		hidden := 0.0
		for _, sc := range m.scopes {
			a := max(0, sc.A-sc.Afused)
			if m.starved {
				hidden += f*sc.Mexec + math.Min(a, f*(sc.M-sc.Mexec))
			} else {
				hidden += math.Min(a, f*sc.M)
			}
		}
		return StallElimination(T, hidden+m.Mfused+m.Mover)
	}
	if m.est == estHiding {
		a := m.A - m.Afused
		mm := m.M - m.Mover
		if m.starved {
			return StallElimination(T, f*m.Mexec+math.Min(a, f*(mm-m.Mexec))+m.Mfused+m.Mover)
		}
		return StallElimination(T, math.Min(a, f*mm)+m.Mfused+m.Mover) // eq. 5 when nothing is fused
	}
	return StallElimination(T, m.M)
}

// starved reports whether the kernel's schedulers rarely had a second
// eligible warp (not_selected under 10% of the active samples): latency
// hiding then needs independent instructions within the warp.
func (kv *kernelView) starved() bool {
	if kv.gpaOnly {
		return false
	}
	var sel, not float64
	for _, fv := range kv.fns {
		for i := range fv.s {
			sel += fv.s[i].ByReason["selected"]
			not += fv.s[i].ByReason["not_selected"]
		}
	}
	return sel+not > 0 && not < 0.1*(sel+not)
}

// execEdge reports whether a blamed edge waits on an arithmetic result.
func execEdge(fv *fnView, e blame.Edge) bool {
	k := fv.c.Model.Insts[e.Src].Kind
	return (e.Reason == "wait" || e.Reason == "short_scoreboard") && (k == blame.KArithFixed || k == blame.KArithVar)
}

// hotSet accumulates amounts per instruction and keeps the largest pair.
type hotSet struct {
	amt  map[instRef]float64
	pair map[instRef]int
	best map[instRef]float64
}

func newHotSet() *hotSet {
	return &hotSet{amt: map[instRef]float64{}, pair: map[instRef]int{}, best: map[instRef]float64{}}
}

func (h *hotSet) add(fv *fnView, i, pair int, v float64) {
	if v <= 0 {
		return
	}
	k := instRef{fv, i}
	h.amt[k] += v
	if _, ok := h.pair[k]; !ok {
		h.pair[k] = -1
	}
	if pair >= 0 && v > h.best[k] {
		h.best[k], h.pair[k] = v, pair
	}
}

func (h *hotSet) total() float64 {
	t := 0.0
	for _, v := range h.amt {
		t += v
	}
	return t
}

// list returns the hotspots by descending amount.
func (h *hotSet) list() []hot {
	out := make([]hot, 0, len(h.amt))
	for k, v := range h.amt {
		out = append(out, hot{k.fv, k.i, h.pair[k], v})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].amount != out[b].amount {
			return out[a].amount > out[b].amount
		}
		if out[a].fv.c.F.Name != out[b].fv.c.F.Name {
			return out[a].fv.c.F.Name < out[b].fv.c.F.Name
		}
		return out[a].i < out[b].i
	})
	return out
}

// latencyReason reports whether a stall reason is a dependency wait that
// code rearrangement can hide (memory and execution dependencies).
func latencyReason(r string) bool {
	rs, _ := blame.LookupReason(r)
	return rs.Dep != blame.DepNone
}

// edgeMatch sums blamed edges whose source satisfies ok, as hotspots at
// the source with the stalled instruction as pair.
func (kv *kernelView) edgeMatch(ok func(fv *fnView, e blame.Edge) bool, h *hotSet) float64 {
	t := 0.0
	for _, fv := range kv.fns {
		for _, e := range fv.r.Edges {
			if ok(fv, e) {
				t += e.Samples
				h.add(fv, e.Src, e.Dst, e.Samples)
			}
		}
	}
	return t
}

// totalMatch adds every sample of the instructions ok selects (their own
// and the stalls sampled at them) and records them as hotspots.
func (kv *kernelView) totalMatch(ok func(fv *fnView, i int) bool, h *hotSet) float64 {
	t := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			if ok(fv, i) {
				t += fv.total(i)
				h.add(fv, i, -1, fv.total(i))
			}
		}
	}
	return t
}

// latencyEdgeMatch is edgeMatch counting only each edge's latency samples
// (GPA's M^L of eq. 4-6): a stall sampled while the scheduler issued
// another warp's instruction cost no time, so hiding it saves none. The
// stalled instruction's not-issued share of the edge's reason gives the
// part; without not-issued data (or with GPAOnly) every sample counts.
func (kv *kernelView) latencyEdgeMatch(ok func(fv *fnView, e blame.Edge) bool, h *hotSet) float64 {
	t := 0.0
	for _, fv := range kv.fns {
		for _, e := range fv.r.Edges {
			if ok(fv, e) {
				v := e.Samples * kv.latShare(fv, e)
				t += v
				h.add(fv, e.Src, e.Dst, v)
			}
		}
	}
	return t
}

func (kv *kernelView) latShare(fv *fnView, e blame.Edge) float64 {
	if kv.gpaOnly {
		return 1
	}
	return fv.latencyShare(e.Dst, e.Reason)
}

// selfMatch sums instructions' own samples of the given reasons (all when
// none) where ok holds.
func (kv *kernelView) selfMatch(ok func(fv *fnView, i int) bool, h *hotSet, reasons ...string) float64 {
	t := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			if !ok(fv, i) {
				continue
			}
			v := fv.self(i, reasons...)
			t += v
			h.add(fv, i, -1, v)
		}
	}
	return t
}

func kindIs(ks ...blame.Kind) func(fv *fnView, i int) bool {
	return func(fv *fnView, i int) bool {
		k := fv.c.Model.Insts[i].Kind
		for _, x := range ks {
			if k == x {
				return true
			}
		}
		return false
	}
}

// scope is one barrier interval's part of a latency-hiding match: its
// latency samples M (Mexec of them waiting on arithmetic), the work A that
// can cover them and the part Afused of A that loop fusion removes.
type scope struct{ M, Mexec, A, Afused float64 }

type scopeKey struct {
	c  *code
	iv int
}
