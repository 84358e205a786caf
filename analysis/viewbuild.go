package analysis

import (
	"sort"
	"strings"

	"gpuprof/analysis/blame"
	"gpuprof/profile"
	"gpuprof/sass"
)

// Building a kernel view stands apart from what it offers (kernelview.go):
// the build takes the options, the analyses that ask the view do not.

// reasonsNI splits an instruction node's stall metrics into the samples
// by reason and the not-issued samples by base reason (nil when the
// profile has no _not_issued variants). CUPTI's sample_count and
// samples_data_dropped are totals, not reasons.
func reasonsNI(vs profile.Values) (by, ni map[string]float64) {
	by = map[string]float64{}
	for _, mv := range vs {
		name := mv.ID.Name()
		if !strings.HasPrefix(name, profile.StallPrefix) || mv.V == 0 {
			continue
		}
		r := strings.TrimPrefix(name, profile.StallPrefix)
		if r == "sample_count" || r == "samples_data_dropped" {
			continue
		}
		if base, ok := strings.CutSuffix(r, "_not_issued"); ok {
			if ni == nil {
				ni = map[string]float64{}
			}
			ni[base] += float64(mv.V)
			continue
		}
		by[r] += float64(mv.V)
	}
	return by, ni
}

// newKernelView assembles kernel context k; it returns nil when the kernel
// has no PC samples.
func newKernelView(x *Index, k profile.NodeID, mods ModuleSource, opts Options) (*kernelView, error) {
	kv := &kernelView{x: x, k: k, byNode: map[profile.NodeID]instRef{}, gpaOnly: opts.GPAOnly}
	p := x.P
	type fkey struct{ f *sass.Function }
	fns := map[*sass.Function]*fnView{}
	var order []*sass.Function
	var notIssued float64
	anyNI := false
	for _, id := range x.InstNodes(k) {
		n := p.Nodes[id]
		by, niBy := reasonsNI(n.Metrics)
		ni, hasNI := 0.0, niBy != nil
		for _, v := range niBy {
			ni += v
		}
		var tot, active float64
		for r, v := range by {
			tot += v
			if r == "selected" || r == "not_selected" {
				active += v
			}
		}
		exec := float64(n.Metrics.Get(profile.InstExecuted))
		if exec > 0 {
			kv.hybrid = true
		}
		if tot == 0 && exec == 0 {
			continue
		}
		kv.T += tot
		if hasNI {
			anyNI = true
			notIssued += ni
		} else {
			kv.A += active
		}
		pc := x.PCOf[id]
		fn := p.Funcs[pc.Func]
		var sf *sass.Function
		idx := -1
		if fn != nil && mods != nil {
			// A module without SASS (an error from the source) leaves its
			// instructions without code; the rest of the analysis goes on.
			if m, err := mods.Module(fn.Module); err == nil && m != nil {
				sec := ""
				if kf := m.Func(p.Nodes[k].Frame.Function); kf != nil {
					sec = kf.Section
				}
				sf, idx = instIndexIn(m, sec, fn.Name, uint64(pc.Offset))
				if sf != nil && fns[sf] == nil {
					c := codeOf(m, sf)
					fv := &fnView{c: c, fid: profile.FuncIDOf(fn.Module, sf.Name), node: make([]profile.NodeID, len(sf.Insts)), s: make([]blame.Samples, len(sf.Insts))}
					for i := range fv.s {
						fv.s[i] = blame.Samples{ByReason: map[string]float64{}, Executed: -1}
					}
					fns[sf] = fv
					order = append(order, sf)
				}
			}
		}
		if sf == nil || idx < 0 {
			kv.noCode += tot
			continue
		}
		fv := fns[sf]
		fv.node[idx] = id
		for r, v := range by {
			fv.s[idx].ByReason[r] += v
		}
		if hasNI {
			if fv.ni == nil {
				fv.ni = make([]map[string]float64, len(fv.s))
			}
			if fv.ni[idx] == nil {
				fv.ni[idx] = map[string]float64{}
			}
			for r, v := range niBy {
				fv.ni[idx][r] += v
			}
		}
		if exec > 0 {
			fv.s[idx].Executed = exec
		}
		kv.byNode[id] = instRef{fv, idx}
	}
	if anyNI {
		kv.hasNI = true
		kv.L = notIssued
		kv.A = kv.T - notIssued
	} else {
		kv.L = kv.T - kv.A
	}
	if kv.T == 0 {
		return nil, nil
	}
	sort.Slice(order, func(i, j int) bool { return order[i].Name < order[j].Name })
	for _, sf := range order {
		fv := fns[sf]
		if kv.hybrid {
			for i := range fv.s {
				if fv.s[i].Executed < 0 {
					fv.s[i].Executed = 0 // measured and never executed
				}
			}
		}
		fv.r = blame.Blame(fv.c.Model, fv.s, blame.Options{Hybrid: kv.hybrid && !opts.SamplingOnly})
		kv.fns = append(kv.fns, fv)
	}
	return kv, nil
}
