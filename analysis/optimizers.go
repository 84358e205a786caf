package analysis

import (
	"fmt"
	"math"
	"strings"

	"gpuprof/analysis/blame"
	"gpuprof/profile"
	"gpuprof/sass"
)

// optimizers runs GPA's code optimizers over one kernel context.
func (kv *kernelView) optimizers() []match {
	var out []match
	for _, f := range []func() *match{
		kv.registerIncrease, kv.strengthReduction, kv.functionSplit, kv.fastMath, kv.warpBalance,
		kv.globalTransactions, kv.sharedTransactions, kv.indirectAccess, kv.asyncCopy, kv.codeReordering,
		kv.functionInlining, kv.sharedAdjust,
	} {
		if m := f(); m != nil && m.M > 0 {
			out = append(out, *m)
		}
	}
	out = append(out, kv.loopUnrolling()...)
	out = append(out, kv.parallelismOptimizers()...)
	return out
}

func (kv *kernelView) registerIncrease() *match {
	h := newHotSet()
	local := kindIs(blame.KLocalMem)
	m := kv.edgeMatch(func(fv *fnView, e blame.Edge) bool { return local(fv, e.Src) }, h)
	m += kv.selfMatch(local, h, "lg_throttle", "long_scoreboard", "selected", "not_selected", "dispatch_stall")
	var spills []instRef
	for _, fv := range kv.fns {
		for i := range fv.s {
			if local(fv, i) {
				spills = append(spills, instRef{fv, i})
			}
		}
	}
	m += kv.throttleRelief(spills)
	s, note, na := kv.registerIncreaseSpeedup(m)
	return &match{kind: OptRegisterIncrease, est: estGiven, S: s, note: note, na: na, M: m, hots: h.list(),
		hint:   "local-memory loads and stores (register spills) stall the kernel: give it more registers (__launch_bounds__ with fewer blocks per SM, -maxrregcount) or shrink the live state so nothing spills.",
		detail: "samples at LDL/STL, stalls blamed on them and their share of the other instructions' lg_throttle"}
}

func (kv *kernelView) strengthReduction() *match {
	h := newHotSet()
	longArith := func(fv *fnView, i int) bool {
		in := &fv.c.F.Insts[i]
		return fv.c.Model.Insts[i].Kind == blame.KArithVar && (in.Class == sass.ClassFloat || in.Class == sass.ClassConvert || in.Class == sass.ClassInteger)
	}
	// A division by a divisor the loop does not change becomes a multiply
	// by a reciprocal computed once before the loop: its whole sequence
	// goes, the reciprocal included (item 27). So does a division by the
	// value an earlier division divided by: one reciprocal serves both
	// (item 40; float and double divisions alike).
	invariant := func(fv *fnView, i int) bool {
		d := fv.c.divisions()
		return d.of[i] >= 0 && divisorInvariant(fv.c, int(d.of[i]))
	}
	shared := func(fv *fnView, i int) bool {
		d := fv.c.divisions()
		return d.of[i] >= 0 && d.shared[d.of[i]] && !invariant(fv, i)
	}
	gone := func(fv *fnView, i int) bool { return invariant(fv, i) || shared(fv, i) }
	m := kv.edgeMatch(func(fv *fnView, e blame.Edge) bool { return longArith(fv, e.Src) && !gone(fv, e.Dst) }, h)
	div := kv.totalMatch(invariant, h)
	common := kv.totalMatch(shared, h)
	note := ""
	if div > 0 {
		note = fmt.Sprintf("; %.0f samples in divisions whose divisor the loop does not change: a reciprocal before the loop turns each into a multiply", div)
	}
	if common > 0 {
		note += fmt.Sprintf("; %.0f samples in divisions by a value an earlier division divides by: one reciprocal turns each into a multiply", common)
	}
	// The first division of a shared divisor becomes the reciprocal the
	// others multiply by: its sequence stays, as the reciprocal's cost,
	// but a reciprocal does not call the division routine (item 49).
	calls := func(fv *fnView, i int) bool {
		d := fv.c.divisions()
		return gone(fv, i) || d.of[i] >= 0 && d.grouped[d.of[i]]
	}
	r, routines := kv.divisionRoutineGone(calls, h)
	if r > 0 {
		note += fmt.Sprintf("; %.0f samples in the division routine the divisions that go call", r)
		m += r
	}
	m += div + common
	return &match{kind: OptStrengthReduction, M: m, hots: h.list(), note: note, alsoGone: routines,
		hint:   "results of long-latency arithmetic (MUFU, conversions, FP64, integer division) are waited for: replace them by cheaper operations (multiply by a reciprocal, shifts for powers of two, float instead of double, fewer conversions).",
		detail: "execution-dependency stalls blamed on long-latency arithmetic"}
}

// divisionRoutineGone is the samples in CUDA's division routines (the
// kernel's own copies, item 48) that go with the divisions gone selects
// (item 49): a division turned into a multiply no longer calls the
// routine. A routine's samples are shared among its calls in proportion
// to the calls' own samples (equally where none has any), and a call
// goes with the division whose sequence holds it. A routine whose every
// call goes is returned whole (its instructions no longer issue).
func (kv *kernelView) divisionRoutineGone(gone func(fv *fnView, i int) bool, h *hotSet) (total float64, whole []instRef) {
	for _, rv := range kv.fns {
		name := rv.c.F.Name
		if !internalRoutine(name) || !strings.Contains(name, "_div_") {
			continue
		}
		s := 0.0
		for i := range rv.s {
			s += rv.total(i)
		}
		if s == 0 {
			continue
		}
		type call struct {
			fv *fnView
			i  int
			w  float64
		}
		var calls []call
		sum := 0.0
		for _, fv := range kv.fns {
			for i, in := range fv.c.F.Insts {
				if in.Op == "CALL" && in.Callee == name {
					calls = append(calls, call{fv, i, fv.total(i)})
					sum += fv.total(i)
				}
			}
		}
		all := len(calls) > 0
		for _, c := range calls {
			share := 1 / float64(len(calls))
			if sum > 0 {
				share = c.w / sum
			}
			if gone(c.fv, c.i) {
				total += s * share
				h.add(c.fv, c.i, -1, s*share)
			} else {
				all = false
			}
		}
		if all {
			for i := range rv.s {
				whole = append(whole, instRef{rv, i})
			}
		}
	}
	return total, whole
}

func (kv *kernelView) functionSplit() *match {
	h := newHotSet()
	m := kv.selfMatch(func(*fnView, int) bool { return true }, h, "no_instructions")
	return &match{kind: OptFunctionSplit, M: m, hots: h.list(),
		hint:   "warps wait for instructions to be fetched: the hot code does not fit the instruction cache; split the kernel or move cold code (error paths, rarely taken branches) out of it.",
		detail: "instruction fetch (no_instructions) samples"}
}

// mathCode reports whether instruction i comes from the CUDA math library
// and is code fast math replaces: inlined from its headers, in one of its
// internal subroutines, or an IEEE float division's sequence; not the
// integer division and remainder subroutines, which fast math leaves as
// they are.
func mathCode(fv *fnView, i int) bool {
	return libraryCode(fv.c, i) && !integerDivision(fv.c.F.Name) && !fp64Routine(fv.c.F.Name)
}

// internalRoutine reports whether a function is one of CUDA's own
// subroutines (division, square root, the math library's slow paths,
// $__internal_0_$__cuda_sm20_div_rd_f64_v2 and the like): the user's code
// calls them but cannot inline them.
func internalRoutine(name string) bool {
	return strings.Contains(name, "__internal_") || strings.Contains(name, "__cuda_sm") || strings.Contains(name, "__nv_")
}

// fp64Routine reports whether a subroutine is one of CUDA's
// double-precision ones (their names end in f64 or f64_v2): fast math
// (-use_fast_math and the float intrinsics) leaves double precision as it
// is, and double precision has no fast division, so time there is not
// fast math's to save (issue 25, item 33; held-out set 3's interval,
// whose directed-rounding divisions take a third of its samples).
func fp64Routine(name string) bool {
	return internalRoutine(name) && strings.Contains(name, "_f64")
}

// callsInternal reports whether instruction in calls one of CUDA's
// internal routines.
func callsInternal(in *sass.Instruction) bool {
	for _, o := range in.Operands {
		if o.Kind == sass.OperandLabel && internalRoutine(o.Name) {
			return true
		}
	}
	return false
}

// integerDivision reports whether a subroutine is the compiler's integer
// division or remainder (__cuda_sm20_div_s64, __cuda_sm20_rem_u64 and
// the like).
func integerDivision(name string) bool {
	for _, p := range []string{"_div_s", "_div_u", "_rem_s", "_rem_u"} {
		if strings.Contains(name, "__cuda_sm") && strings.Contains(name, p) {
			return true
		}
	}
	return false
}

func (kv *kernelView) fastMath() *match {
	h := newHotSet()
	m := kv.totalMatch(mathCode, h)
	m += kv.edgeMatch(func(fv *fnView, e blame.Edge) bool { return mathCode(fv, e.Src) && !mathCode(fv, e.Dst) }, h)
	return &match{kind: OptFastMath, M: m, hots: h.list(),
		hint:   "time goes to CUDA math library code (accurate sinf/expf/pow with slow paths): use the intrinsics (__sinf, __expf, __fdividef) or -use_fast_math where the accuracy allows.",
		detail: "samples in math library code and stalls blamed on it"}
}

// warpBalance matches the samples of warps waiting at a barrier. CUPTI
// records such a warp at the instruction after the BAR (the one it will
// issue next), which may be any instruction: the samples count wherever
// they are, and the hotspot is the BAR before them. Waits at a
// WARPGROUP.DEPBAR are not counted: there a warpgroup waits for its own
// asynchronous tensor-core operations (Hopper's wgmma), not for other
// warps, so balancing the work between warps cannot shorten them.
func (kv *kernelView) warpBalance() *match {
	h := newHotSet()
	m := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			v := fv.self(i, "barrier", "warpgroup_arrive")
			if v == 0 {
				continue
			}
			at := i
			if fv.c.Model.Insts[i].Kind != blame.KSync && i > 0 && fv.c.Model.Insts[i-1].Kind == blame.KSync {
				at = i - 1
			}
			if asyncMMAWait(fv.c.Model.Insts[at].Op) {
				continue
			}
			m += v
			h.add(fv, at, -1, v)
		}
	}
	mt := &match{kind: OptWarpBalance, M: m, hots: h.list(),
		hint:   "warps wait at barriers for the slowest warp of their block: balance the work between warps (or between the paths around the barrier), or synchronise less often.",
		detail: "synchronisation (barrier) samples"}
	if kv.gpaOnly || m == 0 {
		return mt
	}
	// What balancing can save is bounded by the slowest warp's path
	// between the barriers (balance.go, item 28).
	saved, note, na := kv.balanceFloor(mt.hots)
	if na != "" {
		mt.na = na
		return mt
	}
	mt.M, mt.note = saved, note
	return mt
}

// accessBits is a memory instruction's access width per thread, 32 when
// the opcode does not say, 128 at most.
func accessBits(in *sass.Instruction) int {
	b := in.Mem.Bits
	if b <= 0 {
		b = 32
	}
	return min(b, 128)
}

// asyncMMAWait says whether an instruction waits for the results of
// asynchronous warpgroup matrix operations (WARPGROUP.DEPBAR.LE gsb0, N).
func asyncMMAWait(op string) bool {
	return strings.HasPrefix(op, "WARPGROUP.DEPBAR") || strings.HasPrefix(op, "WARPGROUPDEPBAR")
}

// widenable is the share of instruction i's work that widening its
// accesses removes: a thread's access widens to 128 bits at most, so an
// instruction of b bits becomes 128/b times fewer instructions for the
// same bytes, and 1 - b/128 of it goes (none at 128 bits; items 24, 34).
func widenable(fv *fnView, i int) float64 {
	return 1 - float64(accessBits(&fv.c.F.Insts[i]))/128
}

// widthMatch adds, over the instructions ok selects, the share of their
// own samples of reasons and, with edges, of the stalls blamed on them
// that share says a fix removes, and records them as hotspots.
func (kv *kernelView) widthMatch(ok func(fv *fnView, i int) bool, share func(fv *fnView, i int) float64, edges bool, h *hotSet, reasons ...string) float64 {
	m := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			if ok(fv, i) {
				if v := fv.self(i, reasons...) * share(fv, i); v > 0 {
					m += v
					h.add(fv, i, -1, v)
				}
			}
		}
		if !edges {
			continue
		}
		for _, e := range fv.r.Edges {
			if ok(fv, e.Src) {
				if v := e.Samples * share(fv, e.Src); v > 0 {
					m += v
					h.add(fv, e.Src, e.Dst, v)
				}
			}
		}
	}
	return m
}

// globalTransactions matches the throttle samples at global memory
// instructions that wider accesses would remove: the load/store queue's
// throttle shrinks with the instructions (widenable); the rest wait for
// the same bytes (docs/validation.md, item 24).
func (kv *kernelView) globalTransactions() *match {
	h := newHotSet()
	m := kv.widthMatch(kindIs(blame.KGlobalMem, blame.KGenericMem, blame.KTextureMem), widenable, false, h, "lg_throttle", "tex_throttle")
	return &match{kind: OptGlobalTransactions, M: m, hots: h.list(),
		hint:   "the load/store queues are full: issue fewer, wider global memory instructions (vector loads such as float4, fewer redundant accesses).",
		detail: "global memory throttle samples at global memory instructions"}
}

// sharedTransactions matches the MIO throttle samples at shared memory
// instructions and the stalls blamed on shared loads that the advice's
// changes would remove: the share of each access that merging it with
// its neighbours into wider accesses, or keeping a reloaded value in a
// register, removes (sharedRemovable, item 42; item 34 had priced every
// access as widenable, after held-out set 3, where removing every sample
// estimated 2.32x for matrixMul's tile loop and it achieved 1.00x). Bank
// conflicts are shared memory access adjustment's (sharedAdjust), priced
// by the passes they cost.
func (kv *kernelView) sharedTransactions() *match {
	h := newHotSet()
	share := func(fv *fnView, i int) float64 { return fv.c.sharedRemovable()[i] }
	m := kv.widthMatch(kindIs(blame.KSharedMem), share, true, h, "mio_throttle")
	return &match{kind: OptSharedTransactions, M: m, hots: h.list(),
		hint:   "shared memory instructions stall the kernel (MIO queue full, waits on shared loads): use wider shared accesses, avoid bank conflicts (pad rows), keep reused values in registers.",
		detail: "mio_throttle at shared memory instructions and stalls blamed on shared loads, the share that merging neighbouring accesses into 128-bit ones or keeping reloaded values in registers would remove"}
}

func (kv *kernelView) indirectAccess() *match {
	h := newHotSet()
	t := 0.0
	for _, fv := range kv.fns {
		for i, cls := range fv.r.SelfClass {
			for r, c := range cls {
				if c == "address calculation" {
					v := fv.r.Self[i][r]
					t += v
					h.add(fv, i, -1, v)
				}
			}
		}
	}
	return &match{kind: OptIndirectAccess, M: t, hots: h.list(),
		hint:   "memory instructions wait on their own address computation: precompute indices, use base+offset addressing, avoid index arrays in hot loops.",
		detail: "execution-dependency stalls at memory instructions with no other source (address calculation)"}
}

// asyncCopy matches global loads whose results are stored to shared memory
// (GPA: the copy could be LDGSTS / cp.async).
func (kv *kernelView) asyncCopy() *match {
	h := newHotSet()
	ok := func(fv *fnView, e blame.Edge) bool {
		return fv.c.Model.Insts[e.Src].Kind == blame.KGlobalMem && fv.c.F.Insts[e.Src].Mem.Op == sass.MemLoad &&
			fv.c.Model.Insts[e.Dst].Kind == blame.KSharedMem && fv.c.F.Insts[e.Dst].Mem.Op == sass.MemStore
	}
	m := kv.latencyEdgeMatch(ok, h)
	r := &match{kind: OptAsyncCopy, est: estHiding, M: m, A: kv.A, hots: h.list(),
		hint:   "global loads are waited for only to be stored to shared memory: copy with cp.async (LDGSTS) or the TMA so the copy overlaps other work.",
		detail: "memory-dependency stalls of shared stores blamed on global loads"}
	if !kv.gpaOnly && kv.hasBarriers() {
		// The copy must land before the barrier that publishes it: it
		// overlaps only the work in front of that barrier.
		r.setScopes(kv.hidingScopes(ok, func(*fnView, int) bool { return true }))
	}
	return r
}

// codeReordering matches dependency stalls whose source and stalled
// instruction are in the same function (eq. 6 over the function).
func (kv *kernelView) codeReordering() *match {
	h := newHotSet()
	ok := func(fv *fnView, e blame.Edge) bool {
		k := fv.c.Model.Insts[e.Src].Kind
		return latencyReason(e.Reason) && (k == blame.KGlobalMem || k == blame.KGenericMem || k == blame.KTextureMem ||
			k == blame.KArithFixed || k == blame.KArithVar || k == blame.KSharedMem)
	}
	// A wait in straight-line code hides at most behind the work that can
	// move into it (movableWork): such waits are counted apart, per basic
	// block, below; fusing copies of a loop (further below) brings work of
	// its own. Asked for each edge by every match below: decided once per
	// edge.
	type edgeKey struct {
		fv       *fnView
		src, dst int
	}
	moves := map[edgeKey]moveIn{}
	moveOf := func(fv *fnView, e blame.Edge) moveIn {
		k := edgeKey{fv, e.Src, e.Dst}
		mv, seen := moves[k]
		if !seen {
			mv.work, mv.straight = fv.movableWork(e.Src, e.Dst)
			moves[k] = mv
		}
		return mv
	}
	movable := func(fv *fnView, e blame.Edge) bool {
		if !ok(fv, e) || kv.gpaOnly {
			return ok(fv, e)
		}
		return !moveOf(fv, e).straight
	}
	m := kv.latencyEdgeMatch(movable, h)
	mx := kv.latencyEdgeMatch(func(fv *fnView, e blame.Edge) bool { return movable(fv, e) && execEdge(fv, e) }, newHotSet())
	straight := kv.straightLineHiding(ok, moveOf, h)
	over := 0.0
	for _, sl := range straight {
		m += sl.hidden
		over += sl.overlap
	}
	r := &match{kind: OptCodeReordering, est: estHiding, M: m, Mover: over, A: kv.A, Mexec: mx, starved: kv.starved(), hots: h.list(),
		hint:   "instructions wait for results computed just before them: move independent work between producer and consumer (load earlier, interleave independent computations).",
		detail: "memory and execution dependency stalls (latency samples) hidden behind the kernel's active samples"}
	if len(straight) > 0 {
		var waits, hid float64
		for _, sl := range straight {
			waits += sl.waits
			hid += sl.hidden
		}
		r.note += fmt.Sprintf("; of %.0f samples waiting in straight-line code, %.0f can go: %.0f behind the work that can move into the waits, %.0f as round trips kept apart by stores go in flight together (item 45)", waits, hid, hid-over, over)
	}
	if !kv.gpaOnly {
		var scopes map[scopeKey]*scope
		if kv.hasBarriers() {
			scopes = kv.hidingScopes(movable, func(*fnView, int) bool { return true })
			for _, sl := range straight {
				iv, _ := sl.fv.c.barrierIntervals()
				if sc := scopes[scopeKey{sl.fv.c, iv[sl.at]}]; sc != nil {
					sc.M += sl.hidden - sl.overlap
				}
			}
		}
		fused := 0
		for _, fv := range kv.fns {
			copies := fv.loopCopies()
			loops := fv.fusedLoops(ok, copies)
			if len(loops) == 0 {
				continue
			}
			// Fusion interleaves the copies' bodies: not across a barrier.
			iv, one := fv.loopsInterval(loops)
			if !one {
				continue
			}
			mf, af := fv.fusionSamples(loops, copies)
			r.Mfused += mf
			r.Afused += af
			if sc := scopes[scopeKey{fv.c, iv}]; sc != nil {
				sc.Afused += af
			}
			for li := range loops {
				fused = max(fused, copies[li])
			}
		}
		r.setScopes(scopes)
		if r.Mfused > 0 {
			r.hint = fmt.Sprintf("instructions wait for results computed just before them, and the independent work is in %d copies of the loop: fuse them and interleave their bodies (unroll and jam), so each waits behind the others' work.", fused)
			r.note = fmt.Sprintf("; the waits lie in %d independent copies of one loop, whose fusion also runs the loop control once for %d bodies: %.0f samples of it go (eq. 3)", fused, fused, r.Mfused)
		}
		// Loads moved earlier keep their registers live longer (item 29).
		kv.chargeMovedLoads(r)
	}
	return r
}

// groupedShare is the share of a loop's passes that unrolling by u puts in
// full groups, for a loop that runs trips passes per entry: u·⌊trips/u⌋ of
// them (trips taken as every entry's; 0 below u).
func groupedShare(trips float64, u int) float64 {
	if trips <= 0 {
		return 0
	}
	return float64(u) * math.Floor(trips/float64(u)) / trips
}

// unrollFactor is the unrolling the loop unrolling advice asks for and
// prices: a bare #pragma unroll leaves a loop whose trip count is known
// only at run time as it is, so the hint names a factor.
const unrollFactor = 4

// loopUnrolling matches dependency stalls inside each loop, with the loop
// (nested loops included) as the scope of eq. 6.
func (kv *kernelView) loopUnrolling() []match {
	var out []match
	barriers := !kv.gpaOnly && kv.hasBarriers()
	for _, fv := range kv.fns {
		g := fv.c.F.CFG()
		for li := range g.Loops {
			// Iterations separated by a barrier do not overlap, unrolled or
			// not: unrolling brings no independent work (barriers.go).
			if barriers && fv.barrierEveryIteration(li) {
				continue
			}
			h := newHotSet()
			m, mx := 0.0, 0.0
			// onRecurrence walks the loop: once per edge, though ok is
			// asked again for the barrier intervals.
			chain := map[[2]int]bool{}
			onChain := func(src, dst int) bool {
				k := [2]int{src, dst}
				v, seen := chain[k]
				if !seen {
					v = fv.c.onRecurrence(src, dst, li)
					chain[k] = v
				}
				return v
			}
			// Only the loop's own body: unrolling a loop copies its body,
			// and each copy runs its inner loops one after the other as
			// before (the compiler does not jam them), so their waits stay
			// (item 50); they are the inner loops' own unrolling's.
			ok := func(efv *fnView, e blame.Edge) bool {
				if efv != fv || !latencyReason(e.Reason) || fv.c.Loop[e.Dst] != li || fv.c.Loop[e.Src] != li {
					return false
				}
				k := fv.c.Model.Insts[e.Src].Kind
				if k != blame.KGlobalMem && k != blame.KGenericMem && k != blame.KTextureMem && k != blame.KArithFixed && k != blame.KArithVar {
					return false
				}
				// A chain through the iterations waits as long unrolled
				// (item 54).
				return kv.gpaOnly || !onChain(e.Src, e.Dst)
			}
			for _, e := range fv.r.Edges {
				if ok(fv, e) {
					v := e.Samples * kv.latShare(fv, e)
					m += v
					if execEdge(fv, e) {
						mx += v
					}
					h.add(fv, e.Src, e.Dst, v)
				}
			}
			if m == 0 {
				continue
			}
			mt := match{kind: OptLoopUnrolling, est: estHiding, M: m, A: fv.loopActive(li), Mexec: mx, starved: kv.starved(), hots: h.list(),
				hint:   fmt.Sprintf("the loop at %s waits on results of its own iterations: unroll it by %d (#pragma unroll %d) so independent iterations overlap their latencies.", fv.c.loopLine(li), unrollFactor, unrollFactor),
				detail: fmt.Sprintf("memory and execution dependency stalls inside the loop at %s, hidden behind its active samples (eq. 6)", fv.c.loopLine(li))}
			if !kv.gpaOnly {
				mt.inFlight = unrollFactor
				mt.note = fmt.Sprintf("; unrolled %d times, each group's first iteration still waits: at most %d/%d of M hides (item 43)", unrollFactor, unrollFactor-1, unrollFactor)
				// Only full groups of iterations overlap: the iterations
				// left over run in the remainder loop, one after the
				// other (item 51).
				if trips, ok := fv.loopTrips(li); ok {
					mt.grouped, mt.groupedKnown = groupedShare(trips, unrollFactor), true
					mt.note += fmt.Sprintf("; %.1f passes per entry (instruction counts): %.0f%% of them in full groups of %d", trips, 100*mt.grouped, unrollFactor)
				}
			}
			if barriers {
				mt.setScopes(kv.hidingScopes(ok, func(ifv *fnView, i int) bool { return ifv == fv && fv.inLoop(i, li) }))
			}
			if u := fv.c.compilerUnroll(li); u >= minCompilerUnroll && !kv.gpaOnly {
				mt.na = fmt.Sprintf("the compiler already unrolled this loop %d times (its body walks %d consecutive elements of one array, or of its structures, advancing past them each pass): unrolling again brings no independent work; what still waits is a chain through the iterations, such as an accumulator (split it into partial sums)", u, u)
			} else if u := fv.c.unrolledBesideRemainder(li); u >= minCompilerUnroll && !kv.gpaOnly {
				mt.na = fmt.Sprintf("the compiler already unrolled this loop %d times (its body holds %d times the loads of the loop at the same line that runs the iterations left over): unrolling again brings no independent work; what still waits is a chain through the iterations, such as an accumulator (split it into partial sums)", u, u)
			} else if u := fv.c.remainderOf(li); u >= minCompilerUnroll && !kv.gpaOnly {
				mt.na = fmt.Sprintf("this loop is the remainder of a loop at the same line that the compiler unrolled %d times (it runs the iterations left over from the unrolled passes): unrolling the source loop again brings no independent work; what still waits is a chain through the iterations, such as an accumulator (split it into partial sums)", u)
			}
			if mt.na == "" && !kv.gpaOnly {
				// The next iterations' loads stay live beside this one's.
				kv.chargeMovedLoads(&mt)
			}
			out = append(out, mt)
		}
	}
	return out
}

// setScopes gives a latency-hiding match its barrier intervals (none when
// scopes is nil) and says so in its evidence.
func (m *match) setScopes(scopes map[scopeKey]*scope) {
	if scopes == nil {
		return
	}
	m.scopes = []scope{} // non-nil: the kernel has barriers
	A := 0.0
	for _, sc := range scopes {
		if sc.M > 0 || sc.A > 0 {
			m.scopes = append(m.scopes, *sc)
			A += sc.A
		}
	}
	m.note += fmt.Sprintf(" (the kernel has block-wide barriers: each wait hides only behind the work between the same two barriers; %d intervals with waits or work, %.0f active samples other than barrier waits)", len(m.scopes), A)
}

// functionInlining matches the latency samples in non-inlined device
// functions and at their call sites.
func (kv *kernelView) functionInlining() *match {
	h := newHotSet()
	m := 0.0
	for _, fv := range kv.fns {
		callee := !fv.c.F.Entry
		// CUDA's own routines cannot be marked __forceinline__: their
		// samples and the calls of them are not this advice's (item 33;
		// held-out set 3's interval: 1.36x estimated, 1.00x achieved).
		if callee && internalRoutine(fv.c.F.Name) {
			continue
		}
		for i := range fv.s {
			in := &fv.c.F.Insts[i]
			if !callee && (in.Flow != sass.FlowCall || callsInternal(in)) {
				continue
			}
			for r, v := range fv.r.Self[i] {
				if rs, _ := blame.LookupReason(r); rs.Latency {
					m += v
					h.add(fv, i, -1, v)
				}
			}
		}
		if callee {
			for _, e := range fv.r.Edges {
				m += e.Samples
				h.add(fv, e.Src, e.Dst, e.Samples)
			}
		}
	}
	return &match{kind: OptFunctionInlining, est: estHiding, M: m, A: kv.A, hots: h.list(),
		hint:   "calls to device functions and their prologues/epilogues stall the kernel: inline them (__forceinline__) so the compiler can schedule across the call.",
		detail: "latency samples in called device functions and at call sites"}
}

// Bank-conflict metrics the collector adds at shared-memory instructions
// (collector/online/memstats.go).
var (
	mSharedWarps      = profile.Metric("mem.shared.warp_accesses")
	mSharedWavefronts = profile.Metric("mem.shared.wavefronts")
	mSharedIdeal      = profile.Metric("mem.shared.ideal_wavefronts")
)

// sharedAdjust is GPA's shared memory access adjustment, which needs the
// accesses' efficiency: a shared instruction whose warp accesses take
// `wavefronts` passes where `ideal` would do (bank conflicts) spends the
// share 1 - ideal/wavefronts of its cost (its own samples and the stalls
// blamed on it) on the extra passes (eq. 3). Two corrections:
//
//   - a barrier stall is sampled at the instruction after the barrier,
//     often the first shared load of the tile; it waits for the block's
//     other warps to arrive, not for the shared pipe, so synchronisation
//     samples are no part of that cost;
//   - the extra passes occupy the MIO queue that every shared, special
//     register and LSU instruction goes through, so an mio_throttle stall
//     anywhere in the kernel waits on them too: as with lg_throttle
//     (throttleRelief), those samples shrink with the share of the queue's
//     work removed, the extra wavefronts among all wavefronts of the
//     shared instructions and the warp executions of the LSU ones
//     (instructions whose executions the profile does not count are left
//     out of the total, so the share is an upper bound);
//   - an instruction whose lanes take their addresses from data they
//     loaded (dataAddressed: a search) meets on banks by chance, however
//     the array is laid out: its passes are left out, and where no other
//     conflict is left the advice is n/a (item 55).
func (kv *kernelView) sharedAdjust() *match {
	h, hs := newHotSet(), newHotSet()
	m := 0.0
	var worst, sworst, gone, all, searched float64
	conflicted := map[instRef]bool{}
	for _, fv := range kv.fns {
		for i := range fv.s {
			if lsuInst(fv, i) {
				all += kv.executions(fv, i)
				continue
			}
			if fv.c.Model.Insts[i].Kind != blame.KSharedMem {
				continue
			}
			id := kv.nodeOf(fv, i)
			if id == 0 {
				continue
			}
			vs := kv.x.P.Nodes[id].Metrics
			wf, ideal := float64(vs.Get(mSharedWavefronts)), float64(vs.Get(mSharedIdeal))
			all += wf
			if wf <= ideal || ideal == 0 {
				continue
			}
			conflicted[instRef{fv, i}] = true
			excess := 1 - ideal/wf
			v := (fv.cost(i) - kv.syncSamples(fv, i)) * excess
			if !kv.gpaOnly && dataAddressed(fv, i) {
				// Lanes at data-chosen addresses (a search): no layout
				// takes their passes away (item 55).
				searched += v
				hs.add(fv, i, -1, v)
				sworst = math.Max(sworst, wf/ideal)
				continue
			}
			gone += wf - ideal
			worst = math.Max(worst, wf/ideal)
			m += v
			h.add(fv, i, -1, v)
		}
	}
	if m == 0 && searched > 0 {
		return &match{kind: OptSharedAdjust, M: searched, hots: hs.list(),
			na:     "every conflicted shared access takes its address from data its lanes loaded (a search over a table, a merge path): the lanes meet on the banks the data picks, and no padding or swizzle of the array removes those passes",
			hint:   fmt.Sprintf("shared memory accesses conflict on banks (up to %.1f passes per warp access where one would do) at addresses the data picks (a search): padding or swizzling does not spread them; fewer probes, or the searched table in registers, would.", sworst),
			detail: "cost of the shared instructions (own samples but synchronisation, and stalls blamed on them) times their share of extra passes, 1 - ideal/wavefronts (mem.shared.wavefronts), at data-chosen addresses (item 55)"}
	}
	if m == 0 {
		return nil
	}
	if !kv.gpaOnly && all > 0 {
		for _, fv := range kv.fns {
			for i := range fv.s {
				if !conflicted[instRef{fv, i}] {
					m += fv.s[i].ByReason["mio_throttle"] * gone / all
				}
			}
		}
	}
	note := ""
	if searched > 0 {
		note = fmt.Sprintf("; %.0f samples of conflicts at data-chosen addresses (a search) left out: no layout removes them (item 55)", searched)
	}
	return &match{kind: OptSharedAdjust, M: m, hots: h.list(), note: note,
		hint:   fmt.Sprintf("shared memory accesses conflict on banks (up to %.1f passes per warp access where one would do): pad the array's rows (e.g. [32][33]) or swizzle the index so a warp's lanes hit distinct banks.", worst),
		detail: "cost of the shared instructions (own samples but synchronisation, and stalls blamed on them) times their share of extra passes, 1 - ideal/wavefronts (mem.shared.wavefronts), and the MIO queue's share of extra wavefronts of the other instructions' mio_throttle"}
}

// syncSamples is instruction i's own samples of synchronisation reasons
// (barrier, membar, ...): waits on other warps, sampled at the
// instruction after the barrier, whatever that instruction is.
func (kv *kernelView) syncSamples(fv *fnView, i int) float64 {
	if kv.gpaOnly {
		return 0
	}
	t := 0.0
	for r, v := range fv.s[i].ByReason {
		if rs, _ := blame.LookupReason(r); rs.Group == blame.GSync {
			t += v
		}
	}
	return t
}
