// Package text renders the plain-text report `gpuprof report DIR` prints:
// provenance, the top advice, the top kernels by time and by memory
// accesses, GVProf's redundancy metrics (eq. 1 temporal and eq. 2 spatial
// fractions with the top pairs and data objects) and per-rank imbalance.
package text

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/symname"
	"gpuprof/viewer-export/internal/view"
)

// Options tune the report.
type Options struct {
	// Top is the number of rows per table (default 10).
	Top int
	// ExpectedRanks is the job's rank count as launched; 0 means unknown
	// (the report then expects ranks 0..max).
	ExpectedRanks int
	// AdviceNote, when set, says why there is no advice, in its place.
	AdviceNote string
}

// Write renders the report of p and its advice.
func Write(w io.Writer, p *profile.Profile, advice []analysis.Advice, o Options) error {
	if o.Top <= 0 {
		o.Top = 10
	}
	r := &report{p: p, o: o, b: &strings.Builder{}, gpus: analysis.GPUsOf(p)}
	r.header()
	r.gpuTable()
	r.advice(advice)
	kernels := view.Kernels(p)
	view.Classify(p, kernels, advice)
	r.waiting(advice, kernels)
	r.kernelsByTime(kernels)
	r.instances()
	r.noSource()
	r.kernelsByAccesses(kernels)
	r.redundancy(kernels)
	r.memory()
	r.imbalance(kernels)
	_, err := io.WriteString(w, r.b.String())
	return err
}

// String renders the report with default options.
func String(p *profile.Profile, advice []analysis.Advice) string {
	var b strings.Builder
	_ = Write(&b, p, advice, Options{})
	return b.String()
}

type report struct {
	p    *profile.Profile
	o    Options
	b    *strings.Builder
	gpus analysis.GPUs
}

func (r *report) section(title string) {
	fmt.Fprintf(r.b, "\n%s\n%s\n", title, strings.Repeat("-", len(title)))
}

func (r *report) table(rows [][]string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" {
			r.b.WriteString(strings.TrimRight(l, " \n") + "\n")
		}
	}
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// RankRanges writes ranks as ranges ("0-3,8,10-11"), sorting rs.
func RankRanges(rs []int32) string { return rankList(rs) }

func rankList(rs []int32) string {
	if len(rs) == 0 {
		return ""
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		} else {
			parts = append(parts, fmt.Sprint(rs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func (r *report) header() {
	p := r.p
	pv := view.ProvenanceOf(p)
	title := "gpuprof report: job " + p.Job
	fmt.Fprintf(r.b, "%s\n%s\n", title, strings.Repeat("=", len(title)))
	if l := pv.NothingLine(); l != "" {
		fmt.Fprintf(r.b, "*** %s ***\n", l)
	}
	if p.Synthetic {
		r.b.WriteString("*** SYNTHETIC DATA: some merged items were generated, not measured on a GPU ***\n")
	}
	if pv.Interrupted != "" {
		r.b.WriteString("*** " + view.InterruptedNote(pv.Interrupted) + " ***\n")
	}
	ranks := p.SortedRanks()
	expected := r.o.ExpectedRanks
	if expected == 0 && len(ranks) > 0 {
		expected = int(ranks[len(ranks)-1]) + 1
	}
	have := map[int32]bool{}
	for _, rk := range ranks {
		have[rk] = true
	}
	var missing []int32
	for rk := int32(0); int(rk) < expected; rk++ {
		if !have[rk] {
			missing = append(missing, rk)
		}
	}
	rows := [][]string{
		{"Data:", pv.Source},
		{"Ranks:", fmt.Sprintf("%d merged of %d expected (%s), %d sealed, %d items", len(ranks), expected, rankList(ranks), pv.Sealed, pv.Items)},
	}
	if len(missing) > 0 {
		rows = append(rows, []string{"Missing ranks:", rankList(missing)})
	}
	if len(pv.Incomplete) > 0 {
		var inc []string
		var rs []int32
		for rk := range pv.Incomplete {
			rs = append(rs, rk)
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
		for _, rk := range rs {
			inc = append(inc, fmt.Sprintf("rank %d (%s)", rk, pv.Incomplete[rk]))
		}
		rows = append(rows, []string{"Incomplete:", strings.Join(inc, "; ")})
	} else {
		rows = append(rows, []string{"Incomplete:", "none"})
	}
	rows = append(rows,
		[]string{"Hosts:", strings.Join(pv.Hosts, ", ")},
		[]string{"GPU:", strings.Join(pv.GPUs, ", ")},
	)
	if r.gpus.Grouped() {
		rows = append(rows, []string{"GPUs:", view.GPUSummary(r.gpus) + " (Ranks by host and GPU below)"})
	}
	rows = append(rows, []string{"Mode:", strings.Join(pv.Modes, ", ")})
	if l := r.gpus.SamplingNote(); l != "" {
		rows = append(rows, []string{"PC sampling:", l})
	}
	var bp, kk []string
	for _, v := range pv.BlockP {
		bp = append(bp, fmt.Sprintf("1/%d", v))
	}
	for _, v := range pv.KernelK {
		kk = append(kk, fmt.Sprintf("1/%d", v))
	}
	rows = append(rows, []string{"Sampling:", fmt.Sprintf("blocks %s, kernel launches %s (%d of %d launches traced)",
		strings.Join(bp, ","), strings.Join(kk, ","), pv.LaunchesTraced, pv.Launches)})
	drop := fmt.Sprintf("%d records analysed, %d dropped on the device, %d in host queues", pv.Records, pv.Dropped, pv.HostDrp)
	if len(pv.DroppedBy) > 0 {
		var rs []int32
		for rk := range pv.DroppedBy {
			rs = append(rs, rk)
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
		var parts []string
		for _, rk := range rs {
			parts = append(parts, fmt.Sprintf("rank %d: %d", rk, pv.DroppedBy[rk]))
		}
		drop += " (" + strings.Join(parts, ", ") + ")"
	}
	rows = append(rows, []string{"Records:", drop})
	if n := view.ValuesNote(pv.Values); n != "" {
		rows = append(rows, []string{"Values:", n})
	}
	if pv.SamplesDropped > 0 {
		rows = append(rows, []string{"PC samples:", fmt.Sprintf("%d dropped by the GPU's sampling hardware (its buffer was full): stall shares are measured on the samples kept", pv.SamplesDropped)})
	}
	r.table(rows)
}

// gpuTable groups the ranks by host and GPU, with which ranks' GPUs were
// PC-sampled, when that says more than the rank list.
func (r *report) gpuTable() {
	if !r.gpus.Grouped() {
		return
	}
	r.section("Ranks by host and GPU")
	rows := view.GPURows(r.gpus)
	sampling := false
	for _, g := range rows {
		sampling = sampling || g.Sampling != ""
	}
	head := []string{"host", "GPU", "UUID", "name", "ranks"}
	if sampling {
		head = append(head, "PC sampling")
	}
	out := [][]string{head}
	max := 4 * r.o.Top
	for i, g := range rows {
		if i == max {
			break
		}
		row := []string{g.Host, g.Device, g.UUID, g.Name, fmt.Sprintf("%s (%d)", g.Ranks, g.NRanks)}
		if sampling {
			row = append(row, g.Sampling)
		}
		out = append(out, row)
	}
	r.table(out)
	if len(rows) > max {
		fmt.Fprintf(r.b, "... %d more GPUs in profile.json and report.html\n", len(rows)-max)
	}
}

// SortAdvice orders advice across the job by the share of the job's GPU
// time it would save (analysis.SortAdvice): a large speedup of a kernel
// that hardly runs ranks below a modest one of the kernel that dominates.
func SortAdvice(advice []analysis.Advice) []analysis.Advice {
	out := append([]analysis.Advice(nil), advice...)
	analysis.SortAdvice(out)
	return out
}

// gainTogether is the share of the job's GPU time a group's members save
// together: one source change fixes every context, so their gains add up.
func gainTogether(g []analysis.Advice) float64 {
	t := 0.0
	for _, m := range g {
		if m.Speedup > 0 && m.KernelShare > 0 {
			t += m.JobGain()
		}
	}
	return t
}

// bestTogether is the most any group saves together.
func bestTogether(groups [][]analysis.Advice) float64 {
	best := 0.0
	for _, g := range groups {
		best = max(best, gainTogether(g))
	}
	return best
}

// NoGainLine is the report's verdict when no estimated advice would save
// analysis.NoGainShare of the job's GPU time ("" otherwise).
func NoGainLine(advice []analysis.Advice) string {
	best, nothing := analysis.NothingBigToGain(advice)
	switch {
	case !nothing:
		return ""
	case best == nil:
		return ""
	}
	return fmt.Sprintf("Nothing big to gain: the best estimated advice (%s, speedup %.2fx of its kernel) would save %s of the job's GPU time, under %s.",
		best.Kind, best.Speedup, pct(best.JobGain()), pct(analysis.NoGainShare))
}

// funcLabel makes a GPU function name readable.
func funcLabel(name string) string { return symname.Short(name) }

// Places returns an advice's distinct hotspot labels, at most max (all if
// max <= 0), and how many more there are.
func Places(p *profile.Profile, a analysis.Advice, max int) ([]string, int) {
	seen := map[string]bool{}
	var out []string
	more := 0
	for _, w := range a.Hotspots {
		l := WhereLabel(p, w)
		if seen[l] {
			continue
		}
		seen[l] = true
		if max > 0 && len(out) == max {
			more++
			continue
		}
		out = append(out, l)
	}
	return out, more
}

// WhereLabel renders an advice location.
func WhereLabel(p *profile.Profile, w analysis.Where) string {
	var parts []string
	kernel := symname.Short(w.Kernel)
	if w.Kernel == "" {
		if n := p.Nodes[p.KernelOf(w.Context)]; n != nil && n.Frame.Kind == profile.KindKernel {
			kernel = symname.Short(n.Frame.Function)
		}
	}
	if kernel != "" {
		parts = append(parts, kernel)
	}
	if fn := funcLabel(w.Function); fn != "" && fn != kernel && w.Function != w.Kernel {
		parts = append(parts, "in "+fn)
	}
	if w.File != "" {
		parts = append(parts, fmt.Sprintf("%s:%d", w.File, w.Line))
	}
	if w.Loop != "" {
		parts = append(parts, "loop "+w.Loop)
	}
	if w.File == "" && (w.PC != nil || w.SASS != "") && !strings.Contains(w.Loop, view.NoLine) {
		parts = append(parts, view.NoLine)
	}
	if w.PC != nil {
		parts = append(parts, view.PCLabel(p, *w.PC))
	}
	if w.Object != nil {
		parts = append(parts, "object "+view.ObjectLabel(p, *w.Object))
	}
	if w.SASS != "" {
		parts = append(parts, "`"+w.SASS+"`")
	}
	return strings.Join(parts, ", ")
}

// Advice returns the advice proper, without the notes (waiting kernels),
// in the job's order.
func Advice(advice []analysis.Advice) []analysis.Advice {
	var out []analysis.Advice
	for _, a := range SortAdvice(advice) {
		if !a.Note() {
			out = append(out, a)
		}
	}
	return out
}

// Notes returns the notes about waiting kernels, the most time first.
func Notes(advice []analysis.Advice) []analysis.Advice {
	var out []analysis.Advice
	for _, a := range advice {
		if a.Note() {
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].KernelShare > out[j].KernelShare })
	return out
}

// Headline is an advice's speedup and ranks, as the advice list shows
// them: "speedup 1.20x (saves 3.1% of the job's GPU time), importance
// 35.0%, all ranks".
func Headline(a analysis.Advice) string {
	sp := "speedup n/a"
	if a.Speedup > 0 {
		sp = fmt.Sprintf("speedup %.2fx", a.Speedup)
		if a.KernelShare > 0 {
			sp += fmt.Sprintf(" (saves %s of the job's GPU time)", pct(a.JobGain()))
		}
	}
	ranks := "all ranks"
	if len(a.Ranks) > 0 {
		ranks = "ranks " + rankList(append([]int32(nil), a.Ranks...))
	}
	return fmt.Sprintf("%s, importance %s, %s", sp, pct(a.Importance), ranks)
}

// Title is an advice's kind, with the framework phase of its kernel.
func Title(a analysis.Advice) string {
	if a.Phase != "" {
		return fmt.Sprintf("%s (in the framework's %s)", a.Kind, a.Phase)
	}
	return a.Kind
}

func (r *report) advice(all []analysis.Advice) {
	r.section("Top advice across the job (by share of GPU time saved)")
	advice := Advice(all)
	if r.o.AdviceNote != "" {
		r.b.WriteString("No advice: " + r.o.AdviceNote + ".\n")
		return
	}
	if len(advice) == 0 {
		r.b.WriteString("No advice: the analysis found nothing above its thresholds.\n")
		return
	}
	// A finding repeated at sibling contexts (a kernel launched from
	// several call sites) is one item, as in report.html: the first
	// context's numbers, then each context's caller and numbers, and what
	// they save together (one source change fixes every context).
	groups := AdviceGroups(r.p, advice)
	if l := NoGainLine(advice); l != "" && bestTogether(groups) < analysis.NoGainShare {
		r.b.WriteString(l + "\n")
	}
	for i, g := range groups {
		if i == r.o.Top {
			fmt.Fprintf(r.b, "... %d more in profile.json and report.html\n", len(groups)-i)
			break
		}
		a := g[0]
		head := a
		head.Ranks = UnionRanks(g)
		fmt.Fprintf(r.b, "%2d. [%s] %s: %s\n", i+1, a.Category, Title(a), Headline(head))
		if len(g) > 1 {
			if together := gainTogether(g); together > 0 {
				fmt.Fprintf(r.b, "    at %d calling contexts of the same code, which save %s of the job's GPU time together:\n", len(g), pct(together))
			} else {
				fmt.Fprintf(r.b, "    at %d calling contexts of the same code:\n", len(g))
			}
			for _, l := range SiblingCallers(r.p, g) {
				fmt.Fprintf(r.b, "      %s\n", l)
			}
		}
		if more := r.places(a, 3); more > 0 {
			fmt.Fprintf(r.b, "    and %d more places\n", more)
		}
		if a.Hint != "" {
			fmt.Fprintf(r.b, "    %s\n", a.Hint)
		}
		if a.Evidence != "" {
			ev := a.Evidence
			if len(g) > 1 {
				ev += fmt.Sprintf(" (the first of %d contexts)", len(g))
			}
			fmt.Fprintf(r.b, "    evidence: %s\n", ev)
		}
		if a.SpeedupNA != "" {
			fmt.Fprintf(r.b, "    speedup n/a: %s\n", a.SpeedupNA)
		}
	}
}

// waiting lists the waiting kernels: their time is not compute, and the
// analysis gives no advice on them.
func (r *report) waiting(advice []analysis.Advice, ks []view.Kernel) {
	notes := Notes(advice)
	if len(notes) == 0 {
		return
	}
	r.section("Waiting and communication kernels (time spent polling the host or a peer: no advice)")
	for i, a := range notes {
		if i == r.o.Top {
			fmt.Fprintf(r.b, "... %d more in profile.json and report.html\n", len(notes)-i)
			break
		}
		what := pct(a.Importance) + " of its samples in polling loops"
		if a.Kind == analysis.KindCommunication {
			what = "communication between GPUs"
		}
		fmt.Fprintf(r.b, "%2d. %s: %s of the job's GPU time, %s\n", i+1, NoteKernel(r.p, a), pct(a.KernelShare), what)
		r.places(a, 2)
		fmt.Fprintf(r.b, "    %s\n    evidence: %s\n", a.Hint, a.Evidence)
	}
}

// places writes an advice's first n places ("at", then "also") and
// returns how many more it has.
func (r *report) places(a analysis.Advice, n int) int {
	places, more := Places(r.p, a, n)
	for j, l := range places {
		label := "at"
		if j > 0 {
			label = "also"
		}
		fmt.Fprintf(r.b, "    %s %s\n", label, l)
	}
	return more
}

// NoteKernel names a note's kernel, with its framework phase.
func NoteKernel(p *profile.Profile, a analysis.Advice) string {
	if len(a.Hotspots) == 0 {
		return ""
	}
	k := p.KernelOf(a.Hotspots[0].Context)
	n := p.Nodes[k]
	if n == nil {
		return symname.Short(a.Hotspots[0].Kernel)
	}
	name := symname.Short(n.Frame.Function)
	if ph := analysis.KernelPhase(p, k); ph != "" {
		name += fmt.Sprintf(" (in the framework's %s)", ph)
	}
	return name
}

func (r *report) kernelsByTime(ks []view.Kernel) {
	r.section("Top GPU kernels by time")
	var total uint64
	for _, k := range ks {
		total += k.Time
	}
	if total == 0 {
		r.b.WriteString("No kernel time measured.\n")
		return
	}
	rows := [][]string{{"#", "kernel", "time", "share", "launches", "samples", "called from"}}
	for i, k := range ks {
		if i == r.o.Top || k.Time == 0 {
			break
		}
		rows = append(rows, []string{fmt.Sprint(i + 1), k.Label(), view.Duration(float64(k.Time)), pct(float64(k.Time) / float64(total)),
			fmt.Sprint(k.Inclusive.Get(profile.GPULaunches)), view.Count(float64(k.Samples)), k.Caller})
	}
	r.table(rows)
	fmt.Fprintf(r.b, "Total GPU time %s in %d kernel contexts.\n", view.Duration(float64(total)), len(ks))
	if l := view.SplitTime(ks).Line(); l != "" {
		r.b.WriteString(l + "\n")
	}
}

func (r *report) kernelsByAccesses(ks []view.Kernel) {
	r.section("Top GPU kernels by memory accesses")
	byAcc := append([]view.Kernel(nil), ks...)
	sort.SliceStable(byAcc, func(i, j int) bool { return byAcc[i].Loads+byAcc[i].Stores > byAcc[j].Loads+byAcc[j].Stores })
	rows := [][]string{{"#", "kernel", "loads", "stores", "temporal red.", "spatial red.", "called from"}}
	for i, k := range byAcc {
		if i == r.o.Top || k.Loads+k.Stores == 0 {
			break
		}
		rows = append(rows, []string{fmt.Sprint(i + 1), k.Name, view.Count(float64(k.Loads)), view.Count(float64(k.Stores)),
			pct(k.TemporalFraction), pct(k.SpatialFraction), k.Caller})
	}
	if len(rows) == 1 {
		r.b.WriteString("No memory accesses measured (redundancy mode off).\n")
		return
	}
	r.table(rows)
}

func topValues(s *profile.ValueSketch, n int) string {
	if s == nil || s.Total == 0 {
		return ""
	}
	var parts []string
	for i, t := range s.Heaviest() {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", view.Value(s, t.Value), topShare(s, t)))
	}
	return strings.Join(parts, " ")
}

// topShare is a heavy hitter's share of its sketch's values: exact while
// its count carries no error, else the range SpaceSaving guarantees
// (count − error to count). Past profile.SketchK distinct values a
// listed count can be mostly the counts of the values it displaced: an
// object of near-uniform values showed its "top" values at 7-10% each
// where each was 0.1-0.2% of the accesses.
func topShare(s *profile.ValueSketch, t profile.TopValue) string {
	hi := float64(t.Count) / float64(s.Total)
	if t.Err == 0 {
		return pct(hi)
	}
	return fmt.Sprintf("%.1f-%s", 100*float64(t.Count-t.Err)/float64(s.Total), pct(hi))
}

// ofAccesses renders a fraction with its denominator ("n/a" when the
// accesses were not counted).
func ofAccesses(f float64, accesses uint64) string {
	if accesses == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s of %s", pct(f), view.Count(float64(accesses)))
}

func (r *report) redundancy(ks []view.Kernel) {
	r.section("Value redundancy (GVProf)")
	r.b.WriteString("eq. 1: temporal fraction = temporally redundant accesses / accesses of the context\n")
	r.b.WriteString("eq. 2: spatial fraction  = spatially redundant accesses of an object / its accesses\n")
	r.b.WriteString("dominant = accesses carrying their instruction's most frequent value / its accesses (GVProf's tool)\n")
	spatialLevel := uint32(0)
	for _, ri := range r.p.Ranks {
		spatialLevel = max(spatialLevel, ri.SpatialLevel)
	}
	if spatialLevel > 0 {
		// The first occurrences of objects with many values or accesses
		// were estimated from a hash sample of their values.
		fmt.Fprintf(r.b, "spatial: estimated where an object brought over 2^16 values or 2^18 accesses in a launch (values sampled by hash, down to 1 in %d; sd of a fraction under 0.2 points)\n", uint64(1)<<spatialLevel)
	}
	r.b.WriteString("\n")
	// The whole job's fractions, as GVProf's Table I gives them per program.
	f := r.p.RedundancyFractions()
	var parts []string
	for i, name := range profile.FractionNames {
		if f.Has[i] {
			parts = append(parts, name+" "+pct(f.Value[i]))
		}
	}
	if len(parts) > 0 {
		r.b.WriteString("whole job: " + strings.Join(parts, ", ") + "\n\n")
	}
	rows := [][]string{{"kernel", "accesses", "temporal", "eq.1", "spatial", "eq.2", "called from"}}
	for _, k := range ks {
		if k.Loads+k.Stores == 0 {
			continue
		}
		rows = append(rows, []string{k.Name, view.Count(float64(k.Loads + k.Stores)), view.Count(float64(k.RedTemporal)), pct(k.TemporalFraction),
			view.Count(float64(k.RedSpatial)), pct(k.SpatialFraction), k.Caller})
		if len(rows) > r.o.Top {
			break
		}
	}
	if len(rows) > 1 {
		r.table(rows)
	}
	pairs := view.TopPairs(r.p, r.o.Top)
	r.b.WriteString("\nTop temporal pairs <PC_old, PC_new>:\n")
	if len(pairs) == 0 {
		r.b.WriteString("none\n")
	} else {
		rows = [][]string{{"#", "kernel", "access", "PC_old -> PC_new", "redundant", "of accesses", "top values"}}
		for i, pr := range pairs {
			rows = append(rows, []string{fmt.Sprint(i + 1), pr.Kernel, pr.Key.Access.String(), pr.Old + " -> " + pr.New,
				view.Count(float64(pr.Redundant)), ofAccesses(pr.Fraction, pr.Accesses), topValues(pr.Values, 3)})
		}
		r.table(rows)
	}
	objs := view.TopObjects(r.p, r.o.Top)
	r.b.WriteString("\nTop data objects by spatial redundancy:\n")
	if len(objs) == 0 {
		r.b.WriteString("none\n")
		return
	}
	rows = [][]string{{"#", "kernel", "object", "access", "redundant", "eq.2", "distinct", "top values"}}
	for i, o := range objs {
		distinct := ""
		if o.Values != nil {
			distinct = fmt.Sprintf("~%.0f", o.Values.Distinct())
		}
		rows = append(rows, []string{fmt.Sprint(i + 1), o.Kernel, o.Label, o.Access.String(), view.Count(float64(o.Redundant)),
			ofAccesses(o.Fraction, o.Accesses), distinct, topValues(o.Values, 3)})
	}
	r.table(rows)
}

func (r *report) imbalance(ks []view.Kernel) {
	r.section("Per-rank imbalance of GPU time per kernel context (by time the slowest rank adds: max - mean)")
	rows := [][]string{{"kernel", "min (rank)", "mean", "max (rank)", "max/mean", "called from"}}
	// Sorting by max - mean puts the imbalance that costs the job most
	// first; a ratio alone ranks tiny rank-specific contexts highest.
	byRatio := append([]view.Kernel(nil), ks...)
	sort.SliceStable(byRatio, func(i, j int) bool {
		a, b := byRatio[i].Imbalance, byRatio[j].Imbalance
		return float64(a.Max)-a.Mean > float64(b.Max)-b.Mean
	})
	for _, k := range byRatio {
		im := k.Imbalance
		if im.Max == 0 {
			continue
		}
		rows = append(rows, []string{k.Name, fmt.Sprintf("%s (%d)", view.Duration(float64(im.Min)), im.ArgMin), view.Duration(im.Mean),
			fmt.Sprintf("%s (%d)", view.Duration(float64(im.Max)), im.ArgMax), fmt.Sprintf("%.2f", im.Ratio()), k.Caller})
		if len(rows) > r.o.Top {
			break
		}
	}
	if len(rows) == 1 {
		r.b.WriteString("No per-rank kernel time.\n")
		return
	}
	r.table(rows)
	r.gpuImbalance(byRatio)
}

// gpuImbalance splits the first kernel contexts' imbalance by GPU: each
// GPU's ranks (their sum, mean and slowest rank, max/mean among them), and
// whether the imbalance is within GPUs or between them
// (analysis.SplitByGPU).
func (r *report) gpuImbalance(ks []view.Kernel) {
	if !r.gpus.Shared() {
		return // one rank per GPU: the per-rank table says it all
	}
	splits := view.SplitKernels(r.p, ks)
	const maxKernels, maxGPUs = 5, 8
	rows := [][]string{{"kernel", "imbalance", "GPU", "ranks", "sum", "mean/rank", "max (rank)", "within"}}
	var lines []string
	for _, k := range ks {
		sp, ok := splits[k.Node]
		if !ok || k.Imbalance.Max == 0 {
			continue
		}
		if len(lines) == maxKernels {
			break
		}
		for i, s := range sp.Per {
			if i == maxGPUs {
				rows = append(rows, []string{"", "", fmt.Sprintf("... %d more", len(sp.Per)-i)})
				break
			}
			name, where := "", ""
			if i == 0 {
				name, where = k.Name, sp.Where
				if where == "" {
					where = "balanced"
				}
			}
			rows = append(rows, []string{name, where, r.gpus.Label(s.GPU), view.RankSet(r.gpus.List[s.GPU].Ranks), view.Duration(float64(s.Sum)), view.Duration(s.Mean),
				fmt.Sprintf("%s (%d)", view.Duration(float64(s.Max)), s.ArgMax), fmt.Sprintf("%.2f", s.Within)})
		}
		l := fmt.Sprintf("%s: slowest rank %d: %.2f = %.2f within %s × %.2f between; mean per rank max/mean across GPUs %.2f, GPU load max/mean %.2f",
			k.Name, sp.Slowest, sp.Ratio, sp.Within, r.gpus.Label(sp.SlowestGPU), sp.Between, sp.MeanRatio, sp.LoadRatio)
		if h := sp.HeavyOn(r.gpus); h != "" && sp.Where != "" {
			l += "; heavy: " + h
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return
	}
	r.b.WriteString("\nBy GPU (within = max/mean among the GPU's ranks; docs/advice.md, \"Imbalance within and between GPUs\"):\n")
	r.table(rows)
	for _, l := range lines {
		r.b.WriteString(l + "\n")
	}
}

// instances lists the kernel contexts' per-instance times (CUDAAdvisor's
// statistics across the instances of a calling context).
func (r *report) instances() {
	x := analysis.NewIndex(r.p)
	rows := [][]string{{"kernel", "instances", "mean", "min", "max", "stddev", "called from"}}
	for i, k := range x.Kernels {
		if i == r.o.Top || x.KernelTime[k] == 0 {
			break
		}
		st := x.Stats(k)
		n := st.Instances
		if !st.PerInstance {
			n = st.Launches.Raw.Sum
		}
		rng := func(lo, hi float64) string {
			if !st.PerInstance || lo == hi {
				return view.Duration(lo)
			}
			return view.Duration(lo) + "-" + view.Duration(hi)
		}
		sd := "n/a"
		if !math.IsNaN(st.InstanceStddev) {
			sd = view.Duration(st.InstanceStddev)
		}
		rows = append(rows, []string{symname.Short(r.p.Nodes[k].Frame.Function), fmt.Sprint(n), view.Duration(st.InstanceMean),
			rng(st.InstanceMin, st.InstanceMinHi), rng(st.InstanceMaxLo, st.InstanceMax), sd, view.FoldedCallerPath(r.p, k)})
	}
	if len(rows) == 1 {
		return
	}
	r.section("Kernel instances (time of one launch per calling context)")
	r.table(rows)
}

// memory shows the reuse-distance histograms (CUDAAdvisor) and the bank
// conflicts of shared memory per kernel context.
func (r *report) memory() {
	x := analysis.NewIndex(r.p)
	rows := [][]string{{"kernel", "grain", "loads", "reuse <2^4", "<2^8", "<2^14", "no reuse", "shared passes/ideal", "called from"}}
	for _, k := range x.Kernels {
		inc := x.Inclusive(k)
		sh := ""
		if w, id := inc.Get(profile.Metric("mem.shared.wavefronts")), inc.Get(profile.Metric("mem.shared.ideal_wavefronts")); id > 0 {
			sh = fmt.Sprintf("%.2f", float64(w)/float64(id))
		}
		for _, g := range []string{"elem", "line"} {
			h := analysis.ReuseHistogram(inc, g)
			if h.Loads == 0 {
				continue
			}
			f := func(v uint64) string { return pct(float64(v) / float64(h.Loads)) }
			rows = append(rows, []string{symname.Short(r.p.Nodes[k].Frame.Function), g, view.Count(float64(h.Loads)), f(h.Below(4)), f(h.Below(8)), f(h.Below(14)), f(h.Inf), sh, view.FoldedCallerPath(r.p, k)})
			sh = ""
		}
		if sh != "" {
			rows = append(rows, []string{symname.Short(r.p.Nodes[k].Frame.Function), "", "", "", "", "", "", sh, view.FoldedCallerPath(r.p, k)})
		}
		if len(rows) > 2*r.o.Top {
			break
		}
	}
	if len(rows) == 1 {
		return
	}
	title := "Reuse distance of global loads (CUDAAdvisor, per block) and shared-memory bank conflicts"
	reuseP := uint32(0)
	for _, ri := range r.p.Ranks {
		reuseP = max(reuseP, ri.ReuseP)
	}
	if reuseP > 1 {
		// The histograms were measured in some blocks and scaled to all.
		title = fmt.Sprintf("Reuse distance of global loads (CUDAAdvisor, per block; measured in 1 traced block in %d, scaled to all) and shared-memory bank conflicts", reuseP)
	}
	r.section(title)
	r.table(rows)
}
