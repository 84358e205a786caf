package analysis

import (
	"fmt"

	"gpuprof/profile"
	"gpuprof/sass"
)

// Options tune Advise.
type Options struct {
	// Redundancy thresholds (zero value: DefaultRedundancy).
	Redundancy *RedundancyThresholds
	// SamplingOnly ignores executed-instruction counts (GPA's sampling
	// mode) even where the profile has them.
	SamplingOnly bool
	// MinImportance drops stall advice matching less of its kernel's
	// samples (default 0.01).
	MinImportance float64
	// MinSpeedup drops estimated advice below this speedup (default 1.005).
	MinSpeedup float64
	// Static adds GPUscout's static checks of the modules the profile
	// references, joined with their samples.
	Static bool
	// Imbalance thresholds (zero value: DefaultImbalance).
	Imbalance *ImbalanceThresholds
	// Top keeps the first Top advice (0 keeps all).
	Top int
	// GPAOnly estimates with GPA's rules alone: dependency stalls
	// apportioned by the blamer only, eq. 5/6 for every latency-hiding
	// optimizer, no relief of throttle stalls elsewhere (docs/advice.md
	// says what the default adds).
	GPAOnly bool
}

func (o *Options) defaults() {
	if o.Redundancy == nil {
		d := DefaultRedundancy
		o.Redundancy = &d
	}
	if o.Imbalance == nil {
		d := DefaultImbalance
		o.Imbalance = &d
	}
	if o.MinImportance == 0 {
		o.MinImportance = 0.01
	}
	if o.MinSpeedup == 0 {
		o.MinSpeedup = 1.005
	}
}

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
	case m.est == estGiven && m.kind == OptRegisterIncrease:
		eq = "eq. 3, T/(T-M)" + m.note
	case m.est == estGiven:
		eq = "the scheduler model of eq. 7-11"
	case m.est == estHiding && m.scopes != nil:
		eq = "eq. 5/6 per barrier interval, T/(T-Σ min(A_I, M_I))" + m.note
	case m.est == estHiding && m.starved:
		eq = fmt.Sprintf("one eligible warp per scheduler: the %.0f samples waiting on arithmetic hide by instruction-level parallelism (eq. 4), the rest behind A = %.0f active samples (eq. 6)", m.Mexec, m.A) + m.note
	case m.est == estHiding:
		eq = fmt.Sprintf("eq. 6, T/(T-min(A, M)) with A = %.0f active samples in scope", m.A) + m.note
	}
	a.Evidence = fmt.Sprintf("%s: M = %.0f of T = %.0f samples (%.1f%%); %s = %.3f", m.detail, m.M, kv.T, 100*m.M/kv.T, eq, s)
	if kv.noCode > 0 {
		a.Evidence += fmt.Sprintf("; %.0f samples at instructions without SASS", kv.noCode)
	}
	if why := m.na; why != "" {
		a.Speedup, a.SpeedupNA = 0, why
	} else if why := kv.unjustified(m, s); why != "" {
		a.Speedup, a.SpeedupNA = 0, why
	}
	return a
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
