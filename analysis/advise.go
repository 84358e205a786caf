package analysis

import (
	"fmt"

	"gpuprof/profile"
	"gpuprof/sass"
)

// Advise analyses a merged profile and returns its advice, ordered across
// the job by the share of GPU time each would save (SortAdvice); ByKernel
// regroups it per kernel. mods may be nil, and a module it cannot give (an
// error) counts as unknown: the SASS-based analyses (stall
// blaming, GPA's optimizers, static checks, the speedup of redundancy
// insights) are then skipped.
func Advise(p *profile.Profile, mods ModuleSource, opts Options) ([]Advice, error) {
	opts.defaults()
	x := NewIndex(p)
	views := map[profile.NodeID]*kernelView{}
	var out []Advice
	// Waiting kernels get a note instead of advice (waiting.go); waitFns
	// are the GPU functions only they run.
	waiting := map[profile.NodeID]bool{}
	waitFns, busyFns := map[*sass.Function]bool{}, map[*sass.Function]bool{}
	for _, k := range x.Kernels {
		if lib := x.commLibraryOf(k); lib != "" {
			waiting[k] = true
			out = append(out, commNote(x, k, lib))
		}
	}
	if mods != nil {
		for _, k := range x.Kernels {
			kv, err := newKernelView(x, k, mods, opts)
			if err != nil {
				return nil, err
			}
			if kv == nil {
				continue
			}
			views[k] = kv
			if waiting[k] { // a communication kernel: its note is out
				for _, fv := range kv.fns {
					waitFns[fv.c.F] = true
				}
				continue
			}
			if note := kv.waiting(); note != nil {
				waiting[k] = true
				for _, fv := range kv.fns {
					waitFns[fv.c.F] = true
				}
				out = append(out, *note)
				continue
			}
			for _, fv := range kv.fns {
				busyFns[fv.c.F] = true
			}
			for _, m := range kv.optimizers() {
				a := kv.advice(m)
				if a.Importance >= opts.MinImportance && (a.Speedup >= opts.MinSpeedup || a.SpeedupNA != "") {
					out = append(out, a)
				}
			}
		}
	}
	for f := range busyFns {
		delete(waitFns, f)
	}
	red := Redundancy(x, *opts.Redundancy, instLookup(x, mods))
	red = mergeObjectInsights(red)
	for i := range red {
		estimateRedundancy(x, views, &red[i])
	}
	out = append(out, red...)
	out = append(out, Divergence(x, views, opts)...)
	out = append(out, Imbalance(x, *opts.Imbalance)...)
	if opts.Static && mods != nil {
		seen := map[profile.ModuleHash]bool{}
		for _, f := range p.Funcs {
			if seen[f.Module] {
				continue
			}
			seen[f.Module] = true
			if m, err := mods.Module(f.Module); err == nil && m != nil {
				out = append(out, joinStatic(x, views, m, StaticCheck(m))...)
			}
		}
	}
	out = dropWaiting(x, out, waiting, waitFns)
	out = append(out, CollectiveWaits(x, *opts.Imbalance)...)
	gpus := GPUsOf(p)
	for i := range out {
		out[i].Phase = x.advicePhase(out[i])
		noteSampledRanks(x, gpus, &out[i])
	}
	SortAdvice(out)
	if opts.Top > 0 && len(out) > opts.Top {
		out = out[:opts.Top]
	}
	return out, nil
}

// advicePhase is the framework phase of the kernel of an advice's main
// hotspot ("" when it has none or the kernel is the program's own work).
func (x *Index) advicePhase(a Advice) string {
	if len(a.Hotspots) == 0 {
		return ""
	}
	k := x.P.KernelOf(a.Hotspots[0].Context)
	if k == profile.RootID {
		return ""
	}
	return x.Phase(k)
}

// advice turns an optimizer match into ranked advice.
func (kv *kernelView) advice(m match) Advice {
	s := m.speedup(kv.T)
	a := Advice{
		Kind: m.kind, Category: CatStall, Hint: m.hint,
		Importance:  m.M / kv.T,
		Speedup:     s,
		KernelShare: kv.x.KernelShare(kv.k),
		Ranks:       kv.x.KernelRanks(kv.k),
	}
	for i, h := range m.hots {
		if i == 5 {
			break
		}
		w := kv.where(h.fv, h.i)
		w.Amount = h.amount
		if h.pair >= 0 {
			pw := kv.where(h.fv, h.pair)
			w.Pair = &pw
		}
		a.Hotspots = append(a.Hotspots, w)
	}
	if len(a.Hotspots) == 0 {
		a.Hotspots = []Where{kv.x.Where(kv.k)}
	}
	eq := "eq. 3, T/(T-M)"
	switch {
	case m.est == estGiven && m.kind != OptRegisterIncrease:
		eq = "the scheduler model of eq. 7-11"
	case m.est == estHiding && m.scopes != nil:
		eq = "eq. 5/6 per barrier interval, T/(T-Σ min(A_I, M_I))"
	case m.est == estHiding && m.starved:
		eq = fmt.Sprintf("one eligible warp per scheduler: the %.0f samples waiting on arithmetic hide by instruction-level parallelism (eq. 4), the rest behind A = %.0f active samples (eq. 6)", m.Mexec, m.A)
	case m.est == estHiding:
		eq = fmt.Sprintf("eq. 6, T/(T-min(A, M)) with A = %.0f active samples in scope", m.A)
	}
	eq += m.note // what the estimator adds, whichever it is
	a.Evidence = fmt.Sprintf("%s: M = %.0f of T = %.0f samples (%.1f%%); %s = %.3f", m.detail, m.M, kv.T, 100*m.M/kv.T, eq, s)
	if kv.noCode > 0 {
		a.Evidence += fmt.Sprintf("; %.0f samples at instructions without SASS", kv.noCode)
	}
	if why := m.na; why != "" {
		a.Speedup, a.SpeedupNA = 0, why
	} else if why := kv.unjustified(m, s); why != "" {
		a.Speedup, a.SpeedupNA = 0, why
	} else {
		if c, note := kv.dramCap(s); note != "" {
			a.Speedup = c
			a.Evidence += note
		}
		if m.est == estHiding {
			if c, note := kv.issueCap(a.Speedup); note != "" {
				a.Speedup = c
				a.Evidence += note
			}
		}
	}
	return a
}
