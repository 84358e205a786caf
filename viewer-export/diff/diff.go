// Package diff compares two profiles of the same program (before and after
// a change): per kernel context and metric, the inclusive values and their
// absolute and relative change, plus whole-program totals.
//
// Kernel contexts are matched by their host call chain (function names, or
// module+offset for unsymbolised frames) and the kernel's symbol, not by
// node id: a fix changes the GPU module's content hash and often shifts
// source lines, and neither should make the same launch site look new.
package diff

import (
	"fmt"
	"io"
	"math"
	"path"
	"sort"
	"strings"
	"text/tabwriter"

	"gpuprof/profile"
	"gpuprof/symname"
	"gpuprof/viewer-export/internal/view"
)

// Status says whether a kernel context is in both profiles.
type Status string

const (
	Both   Status = "both"
	New    Status = "new"  // only after
	Gone   Status = "gone" // only before
	Totals Status = "total"
)

// Change is one metric of one kernel context (or of the whole program).
type Change struct {
	Key    string // matching key: host call chain > kernel symbol
	Kernel string // short kernel name ("" for program totals)
	Caller string // host calling context
	Status Status
	Metric string
	Before uint64
	After  uint64
}

// Delta is After - Before.
func (c Change) Delta() float64 { return float64(c.After) - float64(c.Before) }

// Rel is the relative change (After-Before)/Before; NaN when Before is 0.
func (c Change) Rel() float64 {
	if c.Before == 0 {
		return math.NaN()
	}
	return c.Delta() / float64(c.Before)
}

// Kernel groups one kernel context's changes.
type Kernel struct {
	Key, Kernel, Caller string
	Status              Status
	Changes             []Change // by metric display order
}

// Time returns the kernel's gpu.time_ns change.
func (k Kernel) Time() Change {
	for _, c := range k.Changes {
		if c.Metric == profile.GPUTime.Name() {
			return c
		}
	}
	return Change{Key: k.Key, Kernel: k.Kernel, Metric: profile.GPUTime.Name(), Status: k.Status}
}

// Result is the comparison of two profiles.
type Result struct {
	BeforeJob, AfterJob string
	Totals              []Change
	Kernels             []Kernel // by descending |gpu.time_ns change|, then before time
}

type entry struct {
	kernel, caller string
	vals           map[string]uint64
}

// Key is the matching key of a kernel context.
func Key(p *profile.Profile, id profile.NodeID) string {
	var parts []string
	for cur := id; cur != profile.RootID; {
		n := p.Nodes[cur]
		if n == nil {
			break
		}
		f := n.Frame
		switch f.Kind {
		case profile.KindHostFrame:
			if f.Function != "" {
				parts = append(parts, f.Function)
			} else {
				parts = append(parts, fmt.Sprintf("%s+%#x", path.Base(f.Module), f.Offset))
			}
		case profile.KindKernel:
			parts = append(parts, "kernel "+f.Function)
		}
		if n.Parent == cur {
			break
		}
		cur = n.Parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, " > ")
}

func kernels(p *profile.Profile) map[string]*entry {
	inc := p.Inclusive()
	out := map[string]*entry{}
	for _, id := range p.SortedNodeIDs() {
		n := p.Nodes[id]
		if n.Frame.Kind != profile.KindKernel {
			continue
		}
		k := Key(p, id)
		e := out[k]
		if e == nil {
			e = &entry{kernel: symname.Short(n.Frame.Function), caller: view.CallerPath(p, id), vals: map[string]uint64{}}
			out[k] = e
		}
		for _, v := range inc[id] {
			e.vals[v.ID.Name()] += v.V
		}
	}
	return out
}

func metricOrder(names map[string]bool) []string {
	ids := make([]profile.MetricID, 0, len(names))
	for n := range names {
		ids = append(ids, profile.Metric(n))
	}
	var out []string
	for _, id := range view.SortMetrics(ids) {
		out = append(out, id.Name())
	}
	return out
}

// Compare compares before and after.
func Compare(before, after *profile.Profile) *Result {
	r := &Result{BeforeJob: before.Job, AfterJob: after.Job}
	tb, ta := map[string]uint64{}, map[string]uint64{}
	names := map[string]bool{}
	for _, n := range before.Nodes {
		for _, v := range n.Metrics {
			tb[v.ID.Name()] += v.V
			names[v.ID.Name()] = true
		}
	}
	for _, n := range after.Nodes {
		for _, v := range n.Metrics {
			ta[v.ID.Name()] += v.V
			names[v.ID.Name()] = true
		}
	}
	for _, m := range metricOrder(names) {
		r.Totals = append(r.Totals, Change{Status: Totals, Metric: m, Before: tb[m], After: ta[m]})
	}
	kb, ka := kernels(before), kernels(after)
	keys := map[string]bool{}
	for k := range kb {
		keys[k] = true
	}
	for k := range ka {
		keys[k] = true
	}
	for k := range keys {
		b, a := kb[k], ka[k]
		st := Both
		switch {
		case b == nil:
			st, b = New, &entry{kernel: a.kernel, caller: a.caller, vals: map[string]uint64{}}
		case a == nil:
			st, a = Gone, &entry{kernel: b.kernel, caller: b.caller, vals: map[string]uint64{}}
		}
		mn := map[string]bool{}
		for m := range b.vals {
			mn[m] = true
		}
		for m := range a.vals {
			mn[m] = true
		}
		kk := Kernel{Key: k, Kernel: a.kernel, Caller: a.caller, Status: st}
		for _, m := range metricOrder(mn) {
			kk.Changes = append(kk.Changes, Change{Key: k, Kernel: a.kernel, Caller: a.caller, Status: st, Metric: m, Before: b.vals[m], After: a.vals[m]})
		}
		r.Kernels = append(r.Kernels, kk)
	}
	sort.Slice(r.Kernels, func(i, j int) bool {
		a, b := r.Kernels[i].Time(), r.Kernels[j].Time()
		if da, db := math.Abs(a.Delta()), math.Abs(b.Delta()); da != db {
			return da > db
		}
		if a.Before != b.Before {
			return a.Before > b.Before
		}
		return r.Kernels[i].Key < r.Kernels[j].Key
	})
	return r
}

// FormatValue renders a metric value (times as durations).
func FormatValue(metric string, v float64) string {
	if metric == profile.GPUTime.Name() {
		s := view.Duration(math.Abs(v))
		if v < 0 {
			return "-" + s
		}
		return s
	}
	return view.Count(v)
}

// FormatDelta renders a signed change.
func FormatDelta(metric string, d float64) string {
	s := FormatValue(metric, d)
	if d > 0 {
		s = "+" + s
	}
	return s
}

// FormatRel renders a relative change ("new" when there was nothing before).
func FormatRel(c Change) string {
	r := c.Rel()
	switch {
	case math.IsNaN(r) && c.After > 0:
		return "new"
	case math.IsNaN(r):
		return ""
	}
	return fmt.Sprintf("%+.1f%%", 100*r)
}

// WriteText renders the comparison: program totals, then up to top kernel
// contexts (all if top <= 0) with every metric that changed.
func (r *Result) WriteText(w io.Writer, top int) error {
	var b strings.Builder
	title := fmt.Sprintf("gpuprof diff: %s (before) -> %s (after)", r.BeforeJob, r.AfterJob)
	fmt.Fprintf(&b, "%s\n%s\n\nProgram totals:\n", title, strings.Repeat("=", len(title)))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "metric\tbefore\tafter\tchange\trelative")
	for _, c := range r.Totals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Metric, FormatValue(c.Metric, float64(c.Before)), FormatValue(c.Metric, float64(c.After)),
			FormatDelta(c.Metric, c.Delta()), FormatRel(c))
	}
	tw.Flush()
	b.WriteString("\nPer kernel context (by GPU time change):\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kernel\tstatus\tmetric\tbefore\tafter\tchange\trelative\tcalled from")
	for i, k := range r.Kernels {
		if top > 0 && i == top {
			fmt.Fprintf(tw, "... %d more kernel contexts\n", len(r.Kernels)-i)
			break
		}
		first := true
		for _, c := range k.Changes {
			if c.Before == c.After && c.Metric != profile.GPUTime.Name() {
				continue
			}
			name, status, caller := "", "", ""
			if first {
				name, status, caller = k.Kernel, string(k.Status), k.Caller
				first = false
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, status, c.Metric, FormatValue(c.Metric, float64(c.Before)),
				FormatValue(c.Metric, float64(c.After)), FormatDelta(c.Metric, c.Delta()), FormatRel(c), caller)
		}
	}
	tw.Flush()
	var out strings.Builder
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" {
			out.WriteString(strings.TrimRight(l, " \n") + "\n")
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}
