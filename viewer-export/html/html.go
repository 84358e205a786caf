// Package html renders the self-contained HTML report: one file with its
// CSS, JavaScript and SVG inline and no network access. It shows the
// provenance (with a banner for synthetic data), the ranked advice, a
// flame graph of the whole job's calling contexts from host frames into
// GPU functions, loops, lines and instructions (click to zoom), a per-rank
// heatmap of kernel times with imbalance, GVProf's redundancy views (top
// temporal pairs and data objects with histograms of their values), the
// top kernels and, given a baseline, a before/after comparison.
package html

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/symname"
	"gpuprof/viewer-export/diff"
	"gpuprof/viewer-export/internal/view"
	"gpuprof/viewer-export/text"
)

// Options tune the report.
type Options struct {
	Top  int          // rows per table (default 15)
	Diff *diff.Result // a comparison with a baseline run, shown if set
	// MaxFlameNodes caps the contexts the flame graph embeds (default
	// 20000); the smallest are left out first.
	MaxFlameNodes int
	// AdviceNote, when set, says why there is no advice, in its place.
	AdviceNote string
}

// WriteFile writes the report to file.
func WriteFile(file string, p *profile.Profile, advice []analysis.Advice, o Options) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := Write(f, p, advice, o); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write renders the report of p and its advice to w.
func Write(w io.Writer, p *profile.Profile, advice []analysis.Advice, o Options) error {
	if o.Top <= 0 {
		o.Top = 15
	}
	if o.MaxFlameNodes <= 0 {
		o.MaxFlameNodes = 20000
	}
	d, err := build(p, advice, o)
	if err != nil {
		return err
	}
	return page.Execute(w, d)
}

type data struct {
	Job        string
	Synthetic  bool
	Prov       view.Provenance
	Summary    []kv
	Ranks      []rankRow
	GPUs       []view.GPURow // host → GPU → ranks, when that says more than the rank list
	HasPCS     bool          // some rank has a PC-sampling state
	Advice     []adviceRow
	AdviceNote string      // why there is no advice (the analysis was not run to its end)
	AdviceMore int         // cards folded away
	Waiting    []adviceRow // notes on waiting kernels (no advice)
	TimeSplit  string      // waiting, framework-phase and compute time
	Flame      template.JS
	Kernels    []kernelRow
	Heat       heat
	Pairs      []pairRow
	Objects    []objectRow
	Diff       *diffView
	Metrics    []kv
	CSS        template.CSS
	Script     template.JS
	TotalTime  string
	NumKernels int
}

type kv struct{ K, V string }

type rankRow struct {
	Rank                                                 string // a rank, or a host's ranks as ranges
	Host, GPU, Mode, Source, Sampling, Launches, Records string
	Device                                               string // CUDA ordinal · short UUID
	PCS                                                  string // PC-sampling state (view.RankSampling)
	Dropped                                              uint64
	Status                                               string
	Bad                                                  bool
}

type adviceRow struct {
	Folded                         bool // past the first cards: inside the "more findings" fold
	N                              int
	Kind, Category, Hint, Evidence string
	Phase, SpeedupNA               string
	Speedup, Importance, Ranks     string
	SpeedupBar, ImportanceBar      float64
	Where                          []string
}

type kernelRow struct {
	N                                                  int
	Name, Full, Caller, Time, Share, Launches, Samples string
	Class                                              string // "waiting", "autotuning", "compile" or ""
	Loads, Stores, Temporal, Spatial                   string
	ShareBar                                           float64
}

type pairRow struct {
	N                                                       int
	Kernel, Access, Old, New, Redundant, Accesses, Fraction string
	Distinct, Range                                         string
	Hist                                                    template.HTML
}

type objectRow struct {
	N                                                     int
	Kernel, Object, Access, Redundant, Accesses, Fraction string
	Distinct, Range                                       string
	Hist                                                  template.HTML
	Uses                                                  []string // per kernel context and access, when several
}

type diffRow struct {
	Kernel, Caller, Status, Metric, Before, After, Change, Rel string
	Better, Worse, First                                       bool
}

type diffView struct {
	Before, After string
	Totals        []diffRow
	Rows          []diffRow
	More          int
}

// adviceShown is how many advice cards show before the rest fold away,
// so the flame graph and heatmap stay near the top of the page.
const adviceShown = 5

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func rankList(rs []int32) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprint(r))
	}
	return strings.Join(parts, ", ")
}

func build(p *profile.Profile, advice []analysis.Advice, o Options) (*data, error) {
	pv := view.ProvenanceOf(p)
	d := &data{Job: p.Job, Synthetic: p.Synthetic, Prov: pv, CSS: template.CSS(css), Script: template.JS(script + heatScript), AdviceNote: o.AdviceNote}
	d.provenance(p, pv)
	d.adviceCards(p, advice)
	fl, err := flame(p, o.MaxFlameNodes)
	if err != nil {
		return nil, err
	}
	d.Flame = fl
	kernels := view.Kernels(p)
	view.Classify(p, kernels, advice)
	d.kernelTable(kernels, o.Top)
	d.Heat = heatmap(p, kernels, o.Top)
	for i, pr := range view.TopPairs(p, o.Top) {
		row := pairRow{N: i + 1, Kernel: pr.Kernel, Access: pr.Key.Access.String(), Old: pr.Old, New: pr.New,
			Redundant: view.Count(float64(pr.Redundant)), Accesses: view.Count(float64(pr.Accesses)), Fraction: "n/a"}
		if pr.Accesses > 0 {
			row.Fraction = pct(pr.Fraction)
		}
		row.Hist, row.Distinct, row.Range = histogram(pr.Values)
		d.Pairs = append(d.Pairs, row)
	}
	for i, g := range objectGroups(p, o.Top) {
		d.Objects = append(d.Objects, objectRowOf(p, i+1, g))
	}
	if o.Diff != nil {
		d.Diff = diffSection(o.Diff, o.Top)
	}
	for _, m := range view.Metrics(p) {
		d.Metrics = append(d.Metrics, kv{m.Name(), view.MetricDescription(m.Name())})
	}
	return d, nil
}

// provenance fills in the provenance section: the summary lines, the GPUs
// and the rank table.
func (d *data) provenance(p *profile.Profile, pv view.Provenance) {
	var incomplete []string
	for r, why := range pv.Incomplete {
		incomplete = append(incomplete, fmt.Sprintf("rank %d: %s", r, why))
	}
	sort.Strings(incomplete)
	if len(incomplete) == 0 {
		incomplete = []string{"none"}
	}
	var bp, kk []string
	for _, v := range pv.BlockP {
		bp = append(bp, fmt.Sprintf("1/%d", v))
	}
	for _, v := range pv.KernelK {
		kk = append(kk, fmt.Sprintf("1/%d", v))
	}
	d.Summary = []kv{
		{"Data", pv.Source},
		{"Ranks", fmt.Sprintf("%d (%d sealed), %d items", pv.Ranks, pv.Sealed, pv.Items)},
		{"Incomplete ranks", strings.Join(incomplete, "; ")},
		{"Hosts", hostList(pv.Hosts)},
		{"GPU", strings.Join(pv.GPUs, ", ")},
		{"Mode", strings.Join(pv.Modes, ", ")},
		{"Sampling", fmt.Sprintf("blocks %s, kernel launches %s; %d of %d launches traced", strings.Join(bp, ","), strings.Join(kk, ","), pv.LaunchesTraced, pv.Launches)},
		{"Records", fmt.Sprintf("%d analysed, %d dropped on the device, %d in host queues", pv.Records, pv.Dropped, pv.HostDrp)},
	}
	if pv.SamplesDropped > 0 {
		d.Summary = append(d.Summary, kv{"PC samples", fmt.Sprintf("%d dropped by the GPU's sampling hardware", pv.SamplesDropped)})
	}
	if n := view.ValuesNote(pv.Values); n != "" {
		d.Summary = append(d.Summary, kv{"Values", n})
	}
	gs := analysis.GPUsOf(p)
	if gs.Grouped() {
		d.Summary = append(d.Summary, kv{"GPUs", view.GPUSummary(gs) + " (Provenance groups the ranks by host and GPU)"})
		// With a GPU per rank past groupRanksAbove ranks, the host rows
		// of the rank table name the GPUs.
		if gs.Shared() || len(gs.List) <= groupRanksAbove {
			d.GPUs = view.GPURows(gs)
		}
	}
	if l := gs.SamplingNote(); l != "" {
		d.Summary = append(d.Summary, kv{"PC sampling", l})
	}
	d.Ranks = provenanceRows(p, pv, gs)
	for _, r := range d.Ranks {
		d.HasPCS = d.HasPCS || r.PCS != ""
	}
}

// adviceCards fills in the advice list (a finding repeated at sibling
// contexts as one card) and the notes on waiting kernels.
func (d *data) adviceCards(p *profile.Profile, advice []analysis.Advice) {
	for i, g := range text.AdviceGroups(p, text.Advice(advice)) {
		a := g[0]
		row := card(p, a, i+1)
		row.Folded = i >= adviceShown
		if rs := text.UnionRanks(g); len(rs) > 0 {
			row.Ranks = "ranks " + rankList(rs)
		}
		if len(g) > 1 {
			// The same finding at sibling contexts: one item, its places.
			row.Where = append([]string{fmt.Sprintf("at %d calling contexts of the same code:", len(g))}, text.SiblingPlaces(p, g)...)
			row.Evidence += fmt.Sprintf(" (the first of %d contexts)", len(g))
		}
		d.Advice = append(d.Advice, row)
		if row.Folded {
			d.AdviceMore++
		}
	}
	for i, a := range text.Notes(advice) {
		row := card(p, a, i+1)
		row.Kind = text.NoteKernel(p, a)
		row.Speedup = "n/a"
		d.Waiting = append(d.Waiting, row)
	}
}

// kernelTable fills in the kernel time totals and the top kernels' rows.
func (d *data) kernelTable(kernels []view.Kernel, top int) {
	d.TimeSplit = view.SplitTime(kernels).Line()
	var total uint64
	for _, k := range kernels {
		total += k.Time
	}
	d.TotalTime, d.NumKernels = view.Duration(float64(total)), len(kernels)
	for i, k := range kernels {
		if i == top {
			break
		}
		share := 0.0
		if total > 0 {
			share = float64(k.Time) / float64(total)
		}
		class := k.Phase
		if k.Waiting {
			class = "waiting"
		}
		d.Kernels = append(d.Kernels, kernelRow{N: i + 1, Name: k.Name, Class: class, Full: k.Full, Caller: k.Caller, Time: view.Duration(float64(k.Time)),
			Share: pct(share), ShareBar: share, Launches: fmt.Sprint(k.Inclusive.Get(profile.GPULaunches)), Samples: view.Count(float64(k.Samples)),
			Loads: view.Count(float64(k.Loads)), Stores: view.Count(float64(k.Stores)), Temporal: pct(k.TemporalFraction), Spatial: pct(k.SpatialFraction)})
	}
}

// card renders one advice (or note) as the advice list shows it.
func card(p *profile.Profile, a analysis.Advice, n int) adviceRow {
	row := adviceRow{N: n, Kind: a.Kind, Category: a.Category, Hint: a.Hint, Evidence: a.Evidence, Phase: a.Phase, SpeedupNA: a.SpeedupNA,
		Importance: pct(a.Importance), ImportanceBar: clamp01(a.Importance), Ranks: "all ranks"}
	if a.Speedup > 0 {
		row.Speedup = fmt.Sprintf("%.2fx", a.Speedup)
		row.SpeedupBar = clamp01((a.Speedup - 1) / 1.5)
	} else {
		row.Speedup = "n/a"
	}
	if len(a.Ranks) > 0 {
		row.Ranks = "ranks " + rankList(a.Ranks)
	}
	var more int
	row.Where, more = text.Places(p, a, 4)
	if more > 0 {
		row.Where = append(row.Where, fmt.Sprintf("and %d more places", more))
	}
	return row
}

func clamp01(f float64) float64 {
	if f != f || f < 0 {
		return 0
	}
	return math.Min(f, 1)
}

// histogram draws a sketch's heavy hitters as an inline SVG bar chart
// (share of the values per value, the rest as "other").
func histogram(s *profile.ValueSketch) (template.HTML, string, string) {
	if s == nil || s.Total == 0 {
		return template.HTML(`<span class="muted">no values kept</span>`), "", ""
	}
	top := s.Heaviest()
	if len(top) > 8 {
		top = top[:8]
	}
	var shown uint64
	type bar struct {
		label string
		share float64
		title string
	}
	var bars []bar
	for _, t := range top {
		shown += t.Count
		v := view.Value(s, t.Value)
		bars = append(bars, bar{v, float64(t.Count) / float64(s.Total), fmt.Sprintf("%s: %d of %d (%.1f%%, count error <= %d)", v, t.Count, s.Total, 100*float64(t.Count)/float64(s.Total), t.Err)})
	}
	if shown < s.Total {
		rest := s.Total - shown
		bars = append(bars, bar{"other", float64(rest) / float64(s.Total), fmt.Sprintf("other values: %d of %d", rest, s.Total)})
	}
	const bw, gap, hgt, lab = 44, 4, 60, 14
	width := len(bars)*(bw+gap) + gap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="hist" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, width, hgt+lab+12, width, hgt+lab+12)
	for i, br := range bars {
		x := gap + i*(bw+gap)
		h := math.Max(1, br.share*hgt)
		cls := "hb"
		if br.label == "other" {
			cls = "hb other"
		}
		label := br.label
		if r := []rune(label); len(r) > 7 {
			label = string(r[:6]) + "…"
		}
		fmt.Fprintf(&b, `<g><title>%s</title><rect class="%s" x="%d" y="%.1f" width="%d" height="%.1f"></rect>`,
			template.HTMLEscapeString(br.title), cls, x, 10+hgt-h, bw, h)
		fmt.Fprintf(&b, `<text class="pct" x="%d" y="%.1f">%.0f%%</text>`, x+bw/2, 8+hgt-h, 100*br.share)
		fmt.Fprintf(&b, `<text class="lab" x="%d" y="%d">%s</text></g>`, x+bw/2, hgt+lab+8, template.HTMLEscapeString(label))
	}
	b.WriteString(`</svg>`)
	rng := fmt.Sprintf("%s .. %s", view.Value(s, s.Min), view.Value(s, s.Max))
	return template.HTML(b.String()), fmt.Sprintf("~%.0f", s.Distinct()), rng
}

func diffSection(r *diff.Result, top int) *diffView {
	dv := &diffView{Before: r.BeforeJob, After: r.AfterJob}
	row := func(c diff.Change) diffRow {
		dr := diffRow{Metric: c.Metric, Before: diff.FormatValue(c.Metric, float64(c.Before)), After: diff.FormatValue(c.Metric, float64(c.After)),
			Change: diff.FormatDelta(c.Metric, c.Delta()), Rel: diff.FormatRel(c)}
		// Less of every metric gpuprof measures (time, stalls, redundancy) is better.
		dr.Better, dr.Worse = c.After < c.Before, c.After > c.Before
		return dr
	}
	for _, c := range r.Totals {
		dv.Totals = append(dv.Totals, row(c))
	}
	for i, k := range r.Kernels {
		if i == top {
			dv.More = len(r.Kernels) - i
			break
		}
		first := true
		for _, c := range k.Changes {
			if c.Before == c.After && c.Metric != profile.GPUTime.Name() {
				continue
			}
			dr := row(c)
			if first {
				dr.Kernel, dr.Caller, dr.Status, dr.First = k.Kernel, k.Caller, string(k.Status), true
				first = false
			}
			dv.Rows = append(dv.Rows, dr)
		}
	}
	return dv
}

// flame builds the flame graph's data: nodes in depth-first order as
// [parent, kind, label, detail, values...] with inclusive values of each
// flame metric. "GPU time" spreads each kernel's time over its GPU
// contexts in proportion to their PC samples, so time can be followed
// into the kernel.
func flame(p *profile.Profile, max int) (template.JS, error) {
	g := newFlameGraph(p)
	if g.hasTime {
		g.estimate(profile.RootID, 0, 0)
	}
	g.prune(max)
	g.walk(profile.RootID, -1)
	type out struct {
		Metrics []flameMetric `json:"metrics"`
		Nodes   [][]any       `json:"nodes"`
		Pruned  int           `json:"pruned"`
	}
	o := out{Metrics: g.metrics, Nodes: g.nodes, Pruned: len(p.Nodes) - len(g.kept)}
	b, err := json.Marshal(o) // escapes <, > and & so the data cannot end the script element
	if err != nil {
		return "", err
	}
	return template.JS(b), nil
}

type flameMetric struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	Unit  string `json:"unit"`
}

// flameGraph is the flame graph being built: its metrics (the estimated
// time first, if any, then the counts in ids), the kept contexts and the
// rows emitted so far.
type flameGraph struct {
	p       *profile.Profile
	inc     map[profile.NodeID]profile.Values
	ch      map[profile.NodeID][]profile.NodeID
	metrics []flameMetric
	ids     []profile.MetricID
	hasTime bool
	est     map[profile.NodeID]float64 // estimated time of each context
	kept    map[profile.NodeID]bool
	nodes   [][]any
}

// newFlameGraph chooses the metrics: the estimated time if the profile
// has kernel times, and each count the job has.
func newFlameGraph(p *profile.Profile) *flameGraph {
	g := &flameGraph{p: p, inc: p.Inclusive(), ch: p.Children(), est: map[profile.NodeID]float64{}, nodes: [][]any{}}
	for _, m := range view.Metrics(p) {
		if m == profile.GPUTime {
			g.hasTime = true
		}
	}
	if g.hasTime {
		g.metrics = append(g.metrics, flameMetric{"time", "GPU time (kernel time spread over PC samples)", "ns"})
	}
	for _, m := range []profile.MetricID{profile.InstSamples, profile.MemLoads, profile.MemStores, profile.RedTempLoad, profile.RedTempStore, profile.RedSpatLoad, profile.RedSpatStore, profile.GPULaunches} {
		if g.inc[profile.RootID].Get(m) > 0 {
			g.metrics = append(g.metrics, flameMetric{m.Name(), m.Name() + " — " + view.MetricDescription(m.Name()), "count"})
			g.ids = append(g.ids, m)
		}
	}
	return g
}

// estimate fills in the estimated time of id and below: a kernel's time on
// itself; inside it, by samples (kt and ks: the enclosing kernel's time
// and samples, 0 outside kernels). It returns id's estimate.
func (g *flameGraph) estimate(id profile.NodeID, kt, ks float64) float64 {
	p, inc, ch := g.p, g.inc, g.ch
	n := p.Nodes[id]
	var v float64
	switch {
	case n.Frame.Kind == profile.KindKernel:
		kt = float64(inc[id].Get(profile.GPUTime))
		ks = float64(inc[id].Get(profile.InstSamples))
		v = kt
		for _, c := range ch[id] {
			g.estimate(c, kt, ks)
		}
		g.est[id] = v
		return v
	case kt > 0 && ks > 0:
		v = kt * float64(inc[id].Get(profile.InstSamples)) / ks
		for _, c := range ch[id] {
			g.estimate(c, kt, ks)
		}
	case kt > 0:
		for _, c := range ch[id] {
			g.estimate(c, kt, ks)
		}
	default:
		v = float64(n.Metrics.Get(profile.GPUTime))
		for _, c := range ch[id] {
			v += g.estimate(c, 0, 0)
		}
	}
	g.est[id] = v
	return v
}

// value is metric i of context id.
func (g *flameGraph) value(id profile.NodeID, i int) float64 {
	if g.hasTime {
		if i == 0 {
			return g.est[id]
		}
		i--
	}
	return float64(g.inc[id].Get(g.ids[i]))
}

// prune keeps the largest contexts: a node stays if it is at least a
// threshold share of the root for some metric; the threshold rises until
// at most max nodes stay.
func (g *flameGraph) prune(max int) {
	keep := func(thr float64) map[profile.NodeID]bool {
		k := map[profile.NodeID]bool{}
		var walk func(id profile.NodeID)
		walk = func(id profile.NodeID) {
			k[id] = true
			for _, c := range g.ch[id] {
				big := false
				for i := range g.metrics {
					if r := g.value(profile.RootID, i); r > 0 && g.value(c, i) >= thr*r && g.value(c, i) > 0 {
						big = true
						break
					}
				}
				if big {
					walk(c)
				}
			}
		}
		walk(profile.RootID)
		return k
	}
	thr := 0.0
	g.kept = keep(thr)
	for len(g.kept) > max && thr < 1 {
		if thr == 0 {
			thr = 1e-5
		} else {
			thr *= 4
		}
		g.kept = keep(thr)
	}
}

// internal reports whether a node is a runtime or framework host frame
// (view.Internal): connected runs of them show as one folded frame.
func (g *flameGraph) internal(id profile.NodeID) bool {
	n := g.p.Nodes[id]
	if n == nil || id == profile.RootID || n.Frame.Kind != profile.KindHostFrame {
		return false
	}
	in, _ := view.Internal(n.Frame)
	return in
}

// emit adds a row (parent row, kind, label, detail, then id's value of
// each metric) and returns its index.
func (g *flameGraph) emit(parent int, kind, label, detail string, id profile.NodeID) int {
	row := []any{parent, kind, label, detail}
	for i := range g.metrics {
		v := g.value(id, i)
		if v == math.Trunc(v) {
			row = append(row, int64(v))
		} else {
			row = append(row, math.Round(v*10)/10)
		}
	}
	g.nodes = append(g.nodes, row)
	return len(g.nodes) - 1
}

// sorted returns ids ordered by label, then id.
func (g *flameGraph) sorted(ids []profile.NodeID) []profile.NodeID {
	kids := append([]profile.NodeID(nil), ids...)
	sort.Slice(kids, func(i, j int) bool {
		a, b := view.FrameLabel(g.p.Nodes[kids[i]].Frame), view.FrameLabel(g.p.Nodes[kids[j]].Frame)
		if a != b {
			return a < b
		}
		return kids[i] < kids[j]
	})
	return kids
}

// walk emits the kept contexts from id down, under row parent.
func (g *flameGraph) walk(id profile.NodeID, parent int) {
	p := g.p
	n := p.Nodes[id]
	label := view.FrameLabel(n.Frame)
	if id == profile.RootID {
		label = "all (" + p.Job + ")"
	}
	detail := n.Frame.String()
	if n.Frame.Function != "" {
		detail = symname.Demangle(n.Frame.Function) + " — " + detail
	}
	me := g.emit(parent, n.Frame.Kind.String(), label, detail, id)
	for _, c := range g.sorted(g.ch[id]) {
		switch {
		case !g.kept[c]:
		case g.internal(c) && !g.internal(id):
			g.fold(c, me)
		default:
			g.walk(c, me)
		}
	}
}

// fold shows the run of internal frames from id down as one frame (its
// inclusive values are id's) whose children are the frames below the run.
func (g *flameGraph) fold(id profile.NodeID, parent int) {
	p := g.p
	var below []profile.NodeID
	var frames []profile.Frame
	depth := map[profile.NodeID]int{id: 1}
	deepest := 1
	var collect func(x profile.NodeID)
	collect = func(x profile.NodeID) {
		frames = append(frames, p.Nodes[x].Frame)
		for _, c := range g.sorted(g.ch[x]) {
			switch {
			case !g.kept[c]:
			case g.internal(c):
				depth[c] = depth[x] + 1
				if depth[c] > deepest {
					deepest = depth[c]
				}
				collect(c)
			default:
				below = append(below, c)
			}
		}
	}
	collect(id)
	if len(frames) < 2 {
		g.walk(id, parent) // a lone internal frame shows as itself
		return
	}
	detail := fmt.Sprintf("%d runtime and framework frames folded (the JSON, pprof and HPCToolkit exports hold them); outermost: %s", len(frames), view.FrameLabel(p.Nodes[id].Frame))
	me := g.emit(parent, profile.KindHostFrame.String(), view.FoldLabel(deepest, view.Libraries(frames)), detail, id)
	for _, c := range below {
		g.walk(c, me)
	}
}
