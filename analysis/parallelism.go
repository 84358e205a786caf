package analysis

import (
	"fmt"
	"math"

	"gpuprof/analysis/blame"
)

// issueFloor is the fewest samples the kernel can take once an
// optimisation leaves selGone fewer issued samples and M fewer samples in
// all, with bpsNew resident blocks per SM: every issue cycle shows as one
// selected sample among the W warps sampled, so the instructions left
// need (sel - selGone) × W sample periods at the new issue rate
// I(W') = 1-(1-rI)^W' (GPA eq. 9/10), rI being the remaining code's
// issued share of its samples. Eq. 3 alone lets the kernel shrink below
// the time it needs to issue its remaining instructions when many warps
// hid their latency behind each other's issue.
//
// W and W' are not those of a full wave: a grid runs its full waves and
// then a tail of fewer resident blocks, and each block's instructions
// issue at the rate of the wave it runs in. So W is the mean over the
// grid's blocks of the warps resident beside them now (a selected sample
// in the tail stands for fewer issue cycles), and the time is the issue
// cycles times the mean over the blocks of 1/I(W') in the new
// configuration's waves (its tail issues more slowly).
func (kv *kernelView) issueFloor(M, selGone, bpsNew float64) float64 {
	p := kv.parallelism()
	if p == nil || kv.gpaOnly {
		return 0
	}
	left := p.sel - selGone
	rest := kv.T - M
	if left <= 0 || rest <= 0 {
		return 0
	}
	return p.issueSamples(left, math.Min(1, left/rest), bpsNew)
}

// countFloor is the issue floor from measured instruction counts (the
// hybrid pass), where the profile has them for the kernel: the warp
// instructions left once `gone` is removed, per warp (the entry
// instruction runs once per warp, whatever launches were counted), times
// the warps of the timed launches, spread over the busy schedulers at the
// new configuration's issue rate (as issueSamples) and the GPU's top
// clock; in samples at the kernel's own rate (T over its time). The
// sampled floor (issueFloor) reads issue cycles off the selected samples,
// which assumes the sampler picks among the resident warps at random; the
// H100 captures contradict that (spill's fixed twin shows 22% selected
// samples at 8 warps per scheduler, above 1/8), and counts do not depend
// on it. ok is false without counts, timed launches or clock.
func (kv *kernelView) countFloor(gone func(fv *fnView, i int) bool, rI, bpsNew float64) (float64, bool) {
	p := kv.parallelism()
	if p == nil || kv.gpaOnly || !kv.hybrid || p.g.ClockGHz <= 0 || rI <= 0 {
		return 0, false
	}
	tNs := float64(kv.x.KernelTime[kv.k])
	launches := float64(kv.x.TimedLaunches(kv.k))
	if tNs <= 0 || launches <= 0 {
		return 0, false
	}
	warps, left := kv.countedWarps(), 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			if e := fv.s[i].Executed; e > 0 && !gone(fv, i) {
				left += e
			}
		}
	}
	if warps <= 0 || left <= 0 {
		return 0, false
	}
	sms := float64(p.g.SMs)
	perLaunch := p.cfg.GridBlocks * math.Ceil(p.cfg.Threads/32) * left / warps
	busy := math.Min(sms, p.cfg.GridBlocks) * float64(p.g.Schedulers)
	perIssue := 0.0
	for _, v := range waves(p.cfg.GridBlocks, bpsNew, sms) {
		perIssue += v.share / IssueRate(rI, p.warpsIn(v.blocks))
	}
	ns := launches * perLaunch / busy * perIssue / p.g.ClockGHz
	return ns * kv.T / tNs, true
}

// eliminationWithFloor is eq. 3 bounded by the issue floor, from the
// instruction counts where the profile has them (countFloor), else from
// the selected samples (issueFloor). counted tells which.
func (kv *kernelView) eliminationWithFloor(M float64, gone func(fv *fnView, i int) bool, bpsNew float64) (s, rest float64, counted bool) {
	selGone := kv.selectedAt(gone)
	floor := kv.issueFloor(M, selGone, bpsNew)
	if p := kv.parallelism(); p != nil && kv.T-M > 0 {
		rI := math.Min(1, (p.sel-selGone)/(kv.T-M))
		if f, ok := kv.countFloor(gone, rI, bpsNew); ok {
			floor, counted = f, true
		}
	}
	rest = math.Max(kv.T-math.Min(M, 0.99*kv.T), floor)
	if rest <= 0 {
		return 1, 0, counted
	}
	return kv.T / rest, rest, counted
}

// selectedAt sums the selected samples of the instructions where ok holds.
func (kv *kernelView) selectedAt(ok func(fv *fnView, i int) bool) float64 {
	t := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			if ok(fv, i) {
				t += fv.s[i].ByReason["selected"]
			}
		}
	}
	return t
}

// parallelismOptimizers are GPA's block increase and thread increase, and
// occupancy increase where registers or shared memory limit the resident
// blocks, each estimated with the scheduler model (eq. 7-11, see
// schedulerModel).
func (kv *kernelView) parallelismOptimizers() []match {
	p := kv.parallelism()
	if p == nil || kv.T == 0 || p.sel == 0 {
		return nil
	}
	m := schedulerModel{g: p.g, rI: p.sel / kv.T}
	wb := math.Ceil(p.cfg.Threads / 32)
	bps := float64(p.occ.BlocksPerSM)
	before := m.rate(p.cfg.GridBlocks, wb, bps)
	if before <= 0 {
		return nil
	}
	hot := []hot{}
	var out []match
	mk := func(kind, hint, detail string, after float64) *match {
		s := after / before
		if s <= 1 {
			return nil
		}
		out = append(out, match{kind: kind, est: estGiven, S: s, M: kv.L, hots: hot, hint: hint,
			detail: fmt.Sprintf("%s; resident warps per scheduler %.1f, issued share of samples R_I = %.3f, issue rate of the busy schedulers %.2f -> %.2f (eq. 9-11)", detail, p.W, m.rI, before, after)})
		return &out[len(out)-1]
	}
	// More resident warps on the same SMs (thread and occupancy increase)
	// can only fill what the schedulers left idle (moreWarpsBound).
	bounded := func(mt *match, otherBlocks bool) {
		if mt == nil || kv.gpaOnly || mt.na != "" {
			return
		}
		if b, why := kv.moreWarpsBound(otherBlocks); mt.S > b*(1+1e-9) {
			mt.na = fmt.Sprintf("the scheduler model gives %.2fx, above the %.2fx more resident warps can give: %s", mt.S, b, why)
		}
	}
	occ := p.occ
	cfgText := fmt.Sprintf("%.0f blocks of %.0f threads, %.0f registers per thread, %.0f bytes of shared memory per block: %d blocks (%d warps) per SM on the %s, limited by %s",
		p.cfg.GridBlocks, p.cfg.Threads, p.cfg.Regs, p.cfg.Shared, occ.BlocksPerSM, occ.WarpsPerSM, p.g.Name, occ.Limiter)
	// Block increase: fewer blocks than SMs leave SMs idle. The fix
	// divides a launch's work into more blocks, so the estimate spreads the
	// launch's own warps over more SMs (one block each): a launch of one
	// warp (a one-thread spin) has nothing to divide. GPA filled every SM
	// with blocks of the present size, which is more work than the launch
	// has.
	if warps := p.cfg.GridBlocks * wb; p.cfg.GridBlocks < float64(p.g.SMs) {
		nb := math.Min(float64(p.g.SMs), math.Floor(warps))
		if nb > p.cfg.GridBlocks {
			per := warps / nb
			if mt := mk(OptBlockIncrease, fmt.Sprintf("the grid has %.0f blocks for %d SMs: split its %.0f warps into %.0f smaller blocks (%.1f warps each) so %.0f SMs run.", p.cfg.GridBlocks, p.g.SMs, warps, nb, per, nb),
				cfgText+fmt.Sprintf("; bounded by the launch's work: its %.0f warps over %.0f SMs, %.1f per block", warps, nb, per), m.rate(nb, per, 1)); mt != nil && !kv.gpaOnly {
				kv.fewerWarpsBound(mt)
			}
		}
	}
	// Thread increase: small blocks hit the blocks-per-SM limit before the
	// threads do.
	if occ.Limiter == LimitBlocks && occ.WarpsPerSM < p.g.ThreadsPerSM/32 {
		th := p.cfg.Threads
		best, bestOcc := 0.0, occ
		for t := 2 * th; t <= 1024; t *= 2 {
			o, err := p.g.Occupancy(int(t), int(p.cfg.Regs), int(p.cfg.Shared))
			if err != nil || o.WarpsPerSM <= bestOcc.WarpsPerSM {
				continue
			}
			best, bestOcc = t, o
		}
		if best > 0 {
			grid := p.cfg.GridBlocks * th / best // the same threads in bigger blocks
			bounded(mk(OptThreadIncrease, fmt.Sprintf("blocks of %.0f threads reach the %d-blocks-per-SM limit with %d warps resident: use %.0f threads per block (%d warps per SM).", th, p.g.BlocksPerSM, occ.WarpsPerSM, best, bestOcc.WarpsPerSM),
				cfgText, m.rate(grid, math.Ceil(best/32), float64(bestOcc.BlocksPerSM))), false)
		}
	}
	// Occupancy increase: registers or shared memory limit the blocks.
	if occ.Limiter == LimitRegisters || occ.Limiter == LimitShared {
		next := min(occ.ByThreads, occ.ByBlocks, occ.ByShared, occ.ByRegs+1000)
		hint, cost := "", ""
		if occ.Limiter == LimitRegisters {
			next = min(occ.ByThreads, occ.ByBlocks, occ.ByShared)
			regs := (p.g.RegsPerSM / (next * int(wb)) / p.g.RegUnit * p.g.RegUnit) / 32
			hint = fmt.Sprintf("registers limit the SM to %d blocks: at most %d registers per thread (__launch_bounds__(%.0f, %d) or -maxrregcount) would fit %d, if that does not spill.", occ.BlocksPerSM, regs, p.cfg.Threads, next, next)
			cost = kv.registerLimitCost(regs)
		} else {
			next = min(occ.ByThreads, occ.ByBlocks, occ.ByRegs)
			sh := p.g.SharedPerSM/next - p.g.SharedReservedBlk
			hint = fmt.Sprintf("shared memory limits the SM to %d blocks: at most %d bytes per block would fit %d (smaller tiles, or fewer buffers).", occ.BlocksPerSM, sh, next)
		}
		if next > occ.BlocksPerSM {
			if mt := mk(OptOccupancyIncrease, hint, cfgText, m.rate(p.cfg.GridBlocks, wb, float64(next))); mt != nil {
				mt.na = cost
				bounded(mt, true)
			}
		}
	}
	return out
}

// registerIncreaseSpeedup is eq. 3 for removing the spills, with the
// registers the fix needs: each 4-byte slot of the local frame holds a
// value that then lives in a register, which may lower the resident
// warps; the issue floor at the new occupancy bounds what is left.
func (kv *kernelView) registerIncreaseSpeedup(M float64) (float64, string, string) {
	p := kv.parallelism()
	local := kindIs(blame.KLocalMem)
	if p == nil || kv.gpaOnly {
		return StallElimination(kv.T, M), "", ""
	}
	// At the register ceiling (docs/validation.md, item 26): when the
	// registers the kernel has and its local frame's words together exceed
	// what a thread can have, more registers cannot keep the spilled values
	// and the fix is a smaller live state, whose saving this model does not
	// know.
	if need := p.cfg.Regs + math.Ceil(p.cfg.FrameBytes/4); p.cfg.FrameBytes > 0 && need > float64(p.g.MaxRegsPerThread) {
		return 0, "", fmt.Sprintf("the kernel has %.0f registers per thread and a %.0f-byte local frame: keeping the spilled values in registers would take about %.0f, more than the %d a thread can have, so more registers cannot remove the spills (a smaller live state could; how much it would save is not modelled)",
			p.cfg.Regs, p.cfg.FrameBytes, need, p.g.MaxRegsPerThread)
	}
	regs := p.cfg.Regs
	bpsNew := float64(p.occ.BlocksPerSM)
	note := ""
	if p.cfg.FrameBytes > 0 {
		regs = math.Min(float64(p.g.MaxRegsPerThread), p.cfg.Regs+math.Ceil(p.cfg.FrameBytes/4))
		if o, err := p.g.Occupancy(int(math.Round(p.cfg.Threads)), int(regs), int(math.Round(p.cfg.Shared))); err == nil && o.BlocksPerSM > 0 {
			bpsNew = float64(o.BlocksPerSM)
			note = fmt.Sprintf("; without spills about %.0f registers per thread (%.0f + %.0f-byte frame / 4): %d blocks per SM (was %d), %.1f warps per scheduler in a full wave (was %.1f)",
				regs, p.cfg.Regs, p.cfg.FrameBytes, o.BlocksPerSM, p.occ.BlocksPerSM, p.warpsPerScheduler(bpsNew), p.W)
		}
	}
	s, rest, counted := kv.eliminationWithFloor(M, local, bpsNew)
	if rest > kv.T-M+0.5 {
		from := "selected samples"
		if counted {
			from = "instruction counts"
		}
		note += fmt.Sprintf("; the instructions left need %.0f samples to issue (issue floor, from %s) rather than T-M = %.0f", rest, from, kv.T-M)
	}
	return s, note, ""
}

// moreWarpsBound is the largest speedup more resident warps on the same
// SMs can give (docs/validation.md, item 19). The instructions still
// issue, and a cycle in which no warp issued because a queue or a pipe was
// full (throttle and pipe-busy stalls) stays: more warps bring more work
// to the same queue. Only the cycles in which no warp issued while warps
// waited on their own results, fetch or the like can go, and only those
// not already hidden (a stall sampled while another warp issued cost
// nothing): T / (T - H), H those not-issued samples (all samples of those
// reasons without not-issued data). Waits at a block's barrier count when
// the new warps come in other blocks (otherBlocks: occupancy increase),
// which do not wait there; not when they join the same blocks (thread
// increase), whose barriers they then wait at too. With instruction
// counts, the schedulers cannot issue more than once a cycle either:
// 1 / utilization.
func (kv *kernelView) moreWarpsBound(otherBlocks bool) (float64, string) {
	H := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			for r, v := range fv.s[i].ByReason {
				switch rs, _ := blame.LookupReason(r); {
				case rs.Group == blame.GActive || rs.Group == blame.GThrottle || rs.Group == blame.GPipe:
				case !otherBlocks && (r == "barrier" || r == "warpgroup_arrive"):
				default:
					H += v * fv.latencyShare(i, r)
				}
			}
		}
	}
	b := math.Inf(1)
	if H < kv.T {
		b = kv.T / (kv.T - H)
	}
	why := fmt.Sprintf("in %.0f of the kernel's %.0f samples no warp issued while warps waited on something other than a full queue or pipe, the most more warps can fill", H, kv.T)
	if u, _, ok := kv.issueUtilization(); ok && u > 0 && 1/u < b {
		b = 1 / u
		why = fmt.Sprintf("the schedulers already issue in %.0f%% of the cycles (instruction counts at the top clock)", 100*u)
	}
	return b, why
}

// fewerWarpsBound bounds a block increase by what fewer warps per SM can
// take away (item 53). The launch's warps stay and each runs the same
// instructions: its own waits (a dependency, a round trip to memory) are
// the same on an SM of its own. What goes is what warps of one SM cost
// each other: a ready warp the scheduler did not pick (not_selected), a
// full memory queue or a busy pipe (the throttles, math pipe, dispatch),
// and, in smaller blocks, the barrier waits for fewer warps. With C such
// samples of T, the kernel can shrink to T - C at best: the estimate is
// the scheduler model's, at most T/(T - C).
func (kv *kernelView) fewerWarpsBound(mt *match) {
	C := 0.0
	for _, fv := range kv.fns {
		for i := range fv.s {
			for r, v := range fv.s[i].ByReason {
				rs, _ := blame.LookupReason(r)
				if r == "not_selected" || r == "barrier" || r == "warpgroup_arrive" || rs.Group == blame.GThrottle || rs.Group == blame.GPipe {
					C += v
				}
			}
		}
	}
	if C >= kv.T {
		return
	}
	if b := kv.T / (kv.T - C); mt.S > b {
		mt.detail += fmt.Sprintf("; %.2fx at most: each warp keeps its own waits on an SM of its own, and only the %.0f of the kernel's %.0f samples where warps of one SM held each other up (not selected, a full queue or a busy pipe, a barrier) can go (item 53)", b, C, kv.T)
		mt.S = b
	}
}

// registerLimitCost says why a limit of regs registers per thread has a
// cost the model cannot price ("" when the code fits): the code keeps more
// values live at once than the limit leaves after the registers the
// compiler reserves (the cubin's count less the highest register used, two
// on sm_90), so the compiler must spill or keep fewer values in flight.
func (kv *kernelView) registerLimitCost(regs int) string {
	p := kv.parallelism()
	if p == nil || kv.gpaOnly {
		return ""
	}
	live, top := 0, -1
	for _, fv := range kv.fns {
		live = max(live, maxLiveRegs(fv.c.F))
		top = max(top, maxRegIndex(fv.c.F))
	}
	reserved := max(0, int(math.Round(p.cfg.Regs))-(top+1))
	if need := live + reserved; need > regs {
		return fmt.Sprintf("the code keeps %d values live at once, %d registers with the %d the compiler reserves: at most %d registers per thread would make the compiler spill or keep fewer values in flight, which the model cannot price", live, need, reserved, regs)
	}
	return ""
}
