package analysis

import (
	"fmt"
	"sort"

	"gpuprof/profile"
	"gpuprof/sass"
)

// Joining static findings with the samples stands apart from the checks
// (static.go): those read the SASS alone, while the estimate needs the
// kernel view and the optimizers.

// joinStatic attaches the PC samples of the profile to static findings of
// module m: each flagged instruction's samples and the stalls blamed on
// it, per kernel context running it; spills and conversions get eq. 3's
// estimate.
func joinStatic(x *Index, views map[profile.NodeID]*kernelView, m *sass.Module, as []Advice) []Advice {
	var out []Advice
	for _, a := range as {
		if len(a.static) == 0 {
			out = append(out, a)
			continue
		}
		best := a
		var bestM float64
		joined := false
		for _, k := range x.Kernels {
			kv := views[k]
			if kv == nil {
				continue
			}
			var fv *fnView
			for _, f := range kv.fns {
				if f.c.F == a.static[0].f {
					fv = f
				}
			}
			if fv == nil {
				continue
			}
			cp := a
			cp.Hotspots = nil
			var mm float64
			for _, r := range a.static {
				w := kv.where(fv, r.i)
				w.Amount = fv.cost(r.i)
				mm += w.Amount
				cp.Hotspots = append(cp.Hotspots, w)
			}
			sort.SliceStable(cp.Hotspots, func(i, j int) bool { return cp.Hotspots[i].Amount > cp.Hotspots[j].Amount })
			cp.Importance = mm / kv.T
			cp.KernelShare = x.KernelShare(k)
			cp.Ranks = x.KernelRanks(k)
			cp.Evidence += fmt.Sprintf("; %.0f of the kernel's %.0f samples at or blamed on these instructions", mm, kv.T)
			switch a.Kind {
			case StaticSpill:
				// The fix is register increase's (keep the spilled values in
				// registers), so is the estimate: its matched samples (the
				// spills' cost and the throttle they cause), the registers
				// the values need and the issue floor of what is left.
				ri := kv.registerIncrease()
				if ri.na != "" {
					cp.Speedup, cp.SpeedupNA = 0, ri.na
					break
				}
				cp.Speedup = ri.S
				cp.Evidence += fmt.Sprintf("; estimated as register increase (the same fix): M = %.0f of T = %.0f samples, eq. 3%s = %.3f", ri.M, kv.T, ri.note, ri.S)
			case StaticConversion, StaticCarried:
				cp.Speedup = StallElimination(kv.T, mm)
				hot := map[instRef]bool{}
				for _, r := range a.static {
					hot[instRef{fv, r.i}] = true
				}
				if why := kv.eq3Unjustified(cp.Speedup, hot, false); why != "" {
					cp.Speedup, cp.SpeedupNA = 0, why
				}
			}
			// The program's own kernels first: a finding on code that a
			// framework's autotuner also ran belongs to the repeated work.
			if !joined || x.Phase(k) == "" && best.Phase != "" || (x.Phase(k) == "") == (best.Phase == "") && mm > bestM {
				cp.Phase = x.Phase(k)
				best, bestM, joined = cp, mm, true
			}
		}
		out = append(out, best)
	}
	return out
}
