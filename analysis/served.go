package analysis

import (
	"fmt"
	"math"
)

// Where a divergent load's sectors come from (docs/validation.md, item 31).
//
// Coalescing a load saves what its excess sectors cost. GPA's memory access
// adjustment prices that as if every sector were a DRAM transfer, which it
// is not where L1 or L2 already holds the sectors: fewer sectors then save
// little. The profile does not say where a sector came from, but the time
// a warp spends between a load's issue and the issue of its first consumer
// that waited on it bounds the load's round trip from above, and a round
// trip that reached DRAM lasts at least the least DRAM latency the probes
// measured. So if a share f of a load's warp accesses needed DRAM (one
// sector from DRAM is enough to make the warp wait for it), the mean
// elapsed time E satisfies E ≥ f × Lmin, and f ≤ E / Lmin: only that share
// of the load's saving is kept. Queueing makes a busy DRAM's round trips far
// longer than Lmin, so a kernel that streams from DRAM (or queues at L2's
// bandwidth) shows E ≥ Lmin and keeps the whole saving.

// servedRate is the conversion the elapsed-time bound needs: the cycles of
// a warp's life one PC sample stands for, and the GPU's clock and least
// measured DRAM latency.
type servedRate struct {
	cyclesPerSample float64
	clockGHz        float64
	dramNs          float64
}

// servedRate reads the conversion off the kernel's selected samples and
// instruction counts: a selected sample is a cycle in which the sampled
// warp issued, and the warps issued the counted instructions, one per
// cycle, so one sample stands for (instructions issued / selected samples)
// cycles of a warp's life (the ratio holds whatever the sampling period).
// why says what is missing when ok is false.
func (kv *kernelView) servedRate() (r servedRate, why string) {
	if !kv.hybrid {
		return r, "no instruction counts"
	}
	var issued, sel float64
	for _, fv := range kv.fns {
		for i := range fv.s {
			issued += math.Max(0, fv.s[i].Executed)
			sel += fv.s[i].ByReason["selected"]
		}
	}
	if issued <= 0 || sel <= 0 {
		return r, "no selected samples or no counted instructions"
	}
	g := kv.device()
	if g == nil || g.ClockGHz <= 0 {
		return r, "the GPU is not known"
	}
	lmin := 0.0
	for _, p := range g.Memory.Loaded {
		if lmin == 0 || p.Ns < lmin {
			lmin = p.Ns
		}
	}
	if lmin <= 0 {
		return r, "the GPU's DRAM latency was not measured (docs/machine.md)"
	}
	return servedRate{cyclesPerSample: issued / sel, clockGHz: g.ClockGHz, dramNs: lmin}, ""
}

// loadElapsed is the mean time in ns, at the top clock, from the issue of
// global load r to the issue of its first consumer in the same basic block
// that waited on it (a long_scoreboard wait the blamer put on r): the sum
// over the instructions after r up to that consumer of their samples per
// execution. ok is false when no such consumer is found or an instruction
// on the way has no count.
func (kv *kernelView) loadElapsed(r instRef, rate servedRate) (ns float64, ok bool) {
	fv := r.fv
	g := fv.c.F.CFG()
	b := g.BlockOf(r.i)
	if b < 0 {
		return 0, false
	}
	end := g.Blocks[b].End
	first := -1
	for _, e := range fv.r.Edges {
		if e.Src == r.i && e.Reason == "long_scoreboard" && e.Samples > 0 && e.Dst > r.i && e.Dst < end && (first < 0 || e.Dst < first) {
			first = e.Dst
		}
	}
	if first < 0 {
		return 0, false
	}
	cycles := 0.0
	for j := r.i + 1; j <= first; j++ {
		ex := fv.s[j].Executed
		if ex <= 0 {
			return 0, false
		}
		cycles += fv.total(j) / ex * rate.cyclesPerSample
	}
	return cycles / rate.clockGHz, true
}

// dramShare is the share of divergent load r's saving that DRAM traffic
// can account for: min(1, elapsed / least DRAM latency). Its caller asks
// only for loads: a store, an atomic or a reduction keeps its whole
// saving (L1 writes through and L2 performs the atomics: every sector
// they touch goes to L2 whatever is cached). ok is false when the load's
// elapsed time is not known.
func (kv *kernelView) dramShare(r instRef, rate servedRate) (f, ns float64, ok bool) {
	ns, ok = kv.loadElapsed(r, rate)
	if !ok {
		return 0, 0, false
	}
	return math.Min(1, ns/rate.dramNs), ns, true
}

// servedNote describes the shares dramShare gave, for the evidence.
func servedNote(loads int, minF, maxF, minNs, maxNs float64, rate servedRate) string {
	if loads == 0 {
		return ""
	}
	span := func(a, b float64, f string) string {
		if fmt.Sprintf(f, a) == fmt.Sprintf(f, b) {
			return fmt.Sprintf(f, a)
		}
		return fmt.Sprintf(f+"-"+f, a, b)
	}
	return fmt.Sprintf("; where the loads' sectors come from (item 31): from issue to their first consumer the %d divergent loads take %s ns (a sample per %.0f cycles of a warp's life, from the counts; %.0f MHz), against the least DRAM round trip the probes measured, %.0f ns: at most %s%% of their accesses can have reached DRAM, and that share of their saving is kept",
		loads, span(minNs, maxNs, "%.0f"), rate.cyclesPerSample, rate.clockGHz*1000, rate.dramNs, span(100*minF, 100*maxF, "%.0f"))
}
