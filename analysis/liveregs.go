package analysis

import (
	"fmt"
	"math"

	"gpuprof/sass"
)

// Latency hiding that costs occupancy (docs/validation.md, item 29).
//
// Code reordering (and loop unrolling) hides a load's wait behind work moved between the load
// and its use: the load issues earlier (in a loop, a prefetch of the next
// iteration's data), and its destination registers stay live across the
// moved work, on top of what the code kept live before. A thread needs
// that many more registers; where the kernel's registers per thread plus
// those cross an allocation step, fewer blocks fit an SM, and the
// schedulers have fewer warps to issue from. The latency hidden and the
// warps lost are two factors of the new time: the estimate is the hiding
// speedup times the issue rate the scheduler model (eq. 9-11) gives with
// the new blocks per SM over its rate with the old, both at the per-warp
// issue probability the hiding leaves (the measured one times the hiding
// speedup: each warp's waits are shorter). The registers counted are the
// moved loads' destination widths (a 64-bit load two, a 128-bit one four),
// in the share of the matched waits the estimate hides: all of them when
// every wait hides, as in a prefetch of a whole iteration.

// loadRegs is the registers the destination of load in holds: its access
// width in 32-bit words, at least one.
func loadRegs(in *sass.Instruction) int {
	return max(1, in.Mem.Bits/32)
}

// movedLoadsCost charges a latency-hiding estimate s for the registers
// the loads in moved keep live longer: the factor on s, a note for the
// evidence, or why it cannot be given.
//
// share is the part of the matched waits the estimate hides: where the
// work to move covers only part of them (eq. 5/6's min), only as large a
// part of the loads needs to move, and the registers counted are that
// share of the loads' widths, rounded up.
func (kv *kernelView) movedLoadsCost(moved map[instRef]bool, s, share float64) (factor float64, note, na string) {
	width := 0
	for r := range moved {
		width += loadRegs(&r.fv.c.F.Insts[r.i])
	}
	extra := int(math.Ceil(float64(width)*math.Min(1, share) - 1e-9))
	if extra <= 0 || s <= 1 {
		return 1, "", ""
	}
	cfg, ok := kv.x.LaunchConfig(kv.k)
	if !ok || !cfg.HasAttrs || cfg.Regs <= 0 {
		return 0, "", fmt.Sprintf("moving the %d loads earlier keeps %d more registers live per thread, and the kernel's registers per thread are not known: whether that costs occupancy is not known", len(moved), extra)
	}
	p := kv.parallelism()
	if p == nil {
		return 0, "", fmt.Sprintf("moving the %d loads earlier keeps %d more registers live per thread, and the GPU's occupancy limits are not known", len(moved), extra)
	}
	regs := int(math.Round(cfg.Regs)) + extra
	if regs > p.g.MaxRegsPerThread {
		return 0, "", fmt.Sprintf("moving the %d loads earlier keeps %d more registers live per thread: %.0f + %d exceeds the %d a thread can have, so the compiler would spill", len(moved), extra, cfg.Regs, extra, p.g.MaxRegsPerThread)
	}
	occ, err := p.g.Occupancy(int(math.Round(cfg.Threads)), regs, int(math.Round(cfg.Shared)))
	if err != nil || occ.BlocksPerSM == 0 {
		return 0, "", fmt.Sprintf("moving the %d loads earlier keeps %d more registers live per thread: %d registers per thread leave no block resident", len(moved), extra, regs)
	}
	before := p.occ.BlocksPerSM
	if occ.BlocksPerSM >= before {
		return 1, fmt.Sprintf("; the %d loads to move hold %d registers, and hiding %.0f%% of the waits keeps %d more live: %d per thread, still %d blocks per SM (item 29)", len(moved), width, 100*math.Min(1, share), extra, regs, before), ""
	}
	rI := math.Min(1, p.sel/kv.T*s)
	m := schedulerModel{g: p.g, rI: rI}
	wb := math.Ceil(cfg.Threads / 32)
	r0 := m.rate(cfg.GridBlocks, wb, float64(before))
	r1 := m.rate(cfg.GridBlocks, wb, float64(occ.BlocksPerSM))
	if r0 <= 0 {
		return 0, "", "the scheduler model gives no issue rate for the launch"
	}
	factor = r1 / r0
	note = fmt.Sprintf("; the %d loads to move hold %d registers, and hiding %.0f%% of the waits keeps %d more live: %d per thread, %d blocks per SM (was %d), the schedulers issue %.3f as fast at the issue probability %.3f per warp the hiding leaves (eq. 9-11): %.3f × %.3f (item 29)",
		len(moved), width, 100*math.Min(1, share), extra, regs, occ.BlocksPerSM, before, factor, rI, s, factor)
	return factor, note, ""
}

// chargeMovedLoads applies movedLoadsCost to latency-hiding match r: the
// loads to move are the producers of the waits r matched, its hotspots
// recorded with a blamed edge (waits of no samples move nothing).
func (kv *kernelView) chargeMovedLoads(r *match) {
	moved := map[instRef]bool{}
	for _, h := range r.hots {
		if in := &h.fv.c.F.Insts[h.i]; h.pair >= 0 && in.Mem.Op == sass.MemLoad && !in.Mem.Async {
			moved[instRef{h.fv, h.i}] = true
		}
	}
	s := r.gain(kv.T)
	share := 0.0
	if r.M > 0 && s > 0 {
		share = max(0, kv.T-kv.T/s-r.Mfused) / r.M
	}
	f, note, na := kv.movedLoadsCost(moved, s, share)
	if na != "" {
		r.na = na
	} else if f != 1 {
		r.cost = f
	}
	r.note += note
}
