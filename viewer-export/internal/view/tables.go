package view

import (
	"fmt"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/symname"
)

// Kernel is one kernel launch context with its inclusive values and its
// per-rank GPU time.
type Kernel struct {
	Node   profile.NodeID
	Name   string // short demangled name
	Full   string // demangled name with parameters
	Caller string // host calling context for display: outermost first, " > "-joined, internal frames folded
	// CallerFull is the whole host calling context (CallerPath).
	CallerFull string
	Inclusive  profile.Values
	Time       uint64 // gpu.time_ns (the launch's own value)
	Samples    uint64 // inst.samples, inclusive
	Loads      uint64
	Stores     uint64
	// Redundant accesses (inclusive) and GVProf's fractions for the context:
	// eq. 1 temporal = redundant / accesses, eq. 2 spatial likewise.
	RedTemporal, RedSpatial           uint64
	TemporalFraction, SpatialFraction float64
	Imbalance                         Imbalance
	// Phase is the framework phase that launched the kernel
	// (analysis.KernelPhase: "autotuning", "compile"; "" for the
	// program's own work); Waiting marks a kernel the analysis found
	// waiting (Classify).
	Phase   string
	Waiting bool
}

// Label is the kernel's short name with its class: "[communication]" for
// a communication library's kernel, "[waiting]" for another waiting
// kernel, "[autotuning]" or "[compile]" for one launched in a framework's
// phase.
func (k Kernel) Label() string {
	switch {
	case k.Waiting && analysis.CommLibrary(k.Name) != "":
		return k.Name + " [communication]"
	case k.Waiting:
		return k.Name + " [waiting]"
	case k.Phase != "":
		return k.Name + " [" + k.Phase + "]"
	}
	return k.Name + k.graphMark()
}

// graphMark says how many of the context's launches ran as kernel nodes of
// CUDA graph launches, and that they were not timed where the pass could
// not time them (the value-tracing pass lists graph kernels untimed).
func (k Kernel) graphMark() string {
	g, l := k.Inclusive.Get(profile.GPUGraph), k.Inclusive.Get(profile.GPULaunches)
	switch {
	case g == 0:
		return ""
	case k.Time == 0:
		return fmt.Sprintf(" [CUDA graph: %d of %d launches, not timed]", g, l)
	case g == l:
		return " [CUDA graph]"
	}
	return fmt.Sprintf(" [CUDA graph: %d of %d launches]", g, l)
}

// Classify marks the kernels the advice notes as waiting
// (analysis.WaitingKernels).
func Classify(p *profile.Profile, ks []Kernel, advice []analysis.Advice) {
	w := analysis.WaitingKernels(p, advice)
	for i := range ks {
		ks[i].Waiting = w[ks[i].Node]
	}
}

// TimeSplit divides the kernels' GPU time: waiting kernels, kernels of a
// framework's compile or autotuning phase, and the rest, the compute of
// the program's repeated work.
type TimeSplit struct {
	Total, Waiting, Compute uint64
	Phase                   map[string]uint64
	WaitingKernels          int
}

// SplitTime splits the kernels' GPU time (Classify them first).
func SplitTime(ks []Kernel) TimeSplit {
	s := TimeSplit{Phase: map[string]uint64{}}
	for _, k := range ks {
		s.Total += k.Time
		switch {
		case k.Waiting:
			s.Waiting += k.Time
			s.WaitingKernels++
		case k.Phase != "":
			s.Phase[k.Phase] += k.Time
		default:
			s.Compute += k.Time
		}
	}
	return s
}

// Line says how the time divides, or "" when it is all compute of the
// program's repeated work.
func (s TimeSplit) Line() string {
	if s.Total == 0 || s.Compute == s.Total {
		return ""
	}
	share := func(v uint64) string {
		return fmt.Sprintf("%s (%.1f%%)", Duration(float64(v)), 100*float64(v)/float64(s.Total))
	}
	var parts []string
	if s.Waiting > 0 {
		what := "kernel contexts that poll"
		if s.WaitingKernels == 1 {
			what = "kernel context that polls"
		}
		parts = append(parts, fmt.Sprintf("%s waiting in %d %s host-visible memory or the clock", share(s.Waiting), s.WaitingKernels, what))
	}
	for _, ph := range []string{analysis.PhaseAutotuning, analysis.PhaseCompile} {
		if v := s.Phase[ph]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s in the framework's %s", share(v), ph))
		}
	}
	parts = append(parts, share(s.Compute)+" compute in the program's repeated work")
	return "Of it: " + strings.Join(parts, ", ") + "."
}

// Imbalance summarises one value over all ranks (a rank without the
// context counts as 0).
type Imbalance struct {
	Ranks          int
	Min, Max       uint64
	Mean           float64
	ArgMin, ArgMax int32
	PerRank        map[int32]uint64
}

// Ratio is max/mean (1 = balanced; 0 with no data).
func (im Imbalance) Ratio() float64 {
	if im.Mean == 0 {
		return 0
	}
	return float64(im.Max) / im.Mean
}

// RankImbalance summarises metric m of node id over every rank with
// provenance, from the per-rank values.
func RankImbalance(p *profile.Profile, id profile.NodeID, m profile.MetricID) Imbalance {
	im := Imbalance{PerRank: map[int32]uint64{}, ArgMin: -1, ArgMax: -1}
	var sum float64
	for _, r := range p.SortedRanks() {
		v := p.PerRank[r][id].Get(m)
		im.PerRank[r] = v
		if im.Ranks == 0 || v < im.Min {
			im.Min, im.ArgMin = v, r
		}
		if im.Ranks == 0 || v > im.Max {
			im.Max, im.ArgMax = v, r
		}
		sum += float64(v)
		im.Ranks++
	}
	if im.Ranks > 0 {
		im.Mean = sum / float64(im.Ranks)
	}
	return im
}

// CallerPath is the full host calling context of id, outermost first,
// " > "-joined (FoldedCallerPath is what reports show).
func CallerPath(p *profile.Profile, id profile.NodeID) string {
	frames := HostFrames(p, id)
	parts := make([]string, len(frames))
	for i, f := range frames {
		parts[i] = FrameLabel(f)
	}
	return strings.Join(parts, " > ")
}

func frac(num, den uint64) float64 {
	if den == 0 {
		return 0
	}
	return float64(num) / float64(den)
}

// Kernels returns every kernel context, by descending GPU time (then
// samples, accesses, name).
func Kernels(p *profile.Profile) []Kernel {
	inc := p.Inclusive()
	var out []Kernel
	for _, id := range p.SortedNodeIDs() {
		n := p.Nodes[id]
		if n.Frame.Kind != profile.KindKernel {
			continue
		}
		v := inc[id]
		k := Kernel{
			Node: id, Name: symname.Short(n.Frame.Function), Full: symname.Demangle(n.Frame.Function),
			Caller: FoldedCallerPath(p, id), CallerFull: CallerPath(p, id),
			Inclusive: v, Time: v.Get(profile.GPUTime), Samples: v.Get(profile.InstSamples),
			Loads: v.Get(profile.MemLoads), Stores: v.Get(profile.MemStores),
			RedTemporal: v.Get(profile.RedTempLoad) + v.Get(profile.RedTempStore),
			RedSpatial:  v.Get(profile.RedSpatLoad) + v.Get(profile.RedSpatStore),
			Imbalance:   RankImbalance(p, id, profile.GPUTime),
			Phase:       analysis.KernelPhase(p, id),
		}
		k.TemporalFraction = frac(k.RedTemporal, k.Loads+k.Stores)
		k.SpatialFraction = frac(k.RedSpatial, k.Loads+k.Stores)
		out = append(out, k)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.Time != b.Time:
			return a.Time > b.Time
		case a.Samples != b.Samples:
			return a.Samples > b.Samples
		case a.Loads+a.Stores != b.Loads+b.Stores:
			return a.Loads+a.Stores > b.Loads+b.Stores
		}
		return a.Full+a.CallerFull < b.Full+b.CallerFull
	})
	return out
}

// PCLabel names an instruction: "function+0xOFF".
func PCLabel(p *profile.Profile, pc profile.PC) string {
	if f := p.Funcs[pc.Func]; f != nil {
		return fmt.Sprintf("%s+%#x", symname.Short(f.Name), pc.Offset)
	}
	return fmt.Sprintf("func#%x+%#x", uint64(pc.Func), pc.Offset)
}

// KernelLabel names a kernel context: its short name (or the node id).
func KernelLabel(p *profile.Profile, id profile.NodeID) string {
	if n := p.Nodes[id]; n != nil {
		return symname.Short(n.Frame.Function)
	}
	return fmt.Sprintf("context %#x", uint64(id))
}

// Pair is a GVProf temporal redundancy pair <PC_old, PC_new> in a kernel
// context, with the new instruction's accesses (eq. 1's denominator at
// the pair) and its value sketch.
type Pair struct {
	Key       profile.TemporalKey
	Kernel    string
	Old, New  string
	Redundant uint64
	Accesses  uint64
	Fraction  float64
	Values    *profile.ValueSketch
}

// TopPairs returns the n pairs with the most redundant accesses (all if
// n <= 0).
func TopPairs(p *profile.Profile, n int) []Pair {
	out := make([]Pair, 0, len(p.Temporal))
	for k, v := range p.Temporal {
		pr := Pair{Key: k, Kernel: KernelLabel(p, k.Context), Old: PCLabel(p, k.Old), New: PCLabel(p, k.New), Redundant: v}
		if st := p.PCs[profile.PCKey{Context: k.Context, PC: k.New, Access: k.Access}]; st != nil {
			pr.Accesses = st.Accesses
			pr.Values = st.Values
		}
		pr.Fraction = frac(pr.Redundant, pr.Accesses)
		out = append(out, pr)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Redundant != b.Redundant {
			return a.Redundant > b.Redundant
		}
		return TemporalLess(a.Key, b.Key)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Object is a data object's spatial redundancy in a kernel context (eq. 2:
// redundant accesses of the object over its accesses there).
type Object struct {
	Context   profile.NodeID
	Kernel    string
	Object    profile.ObjectID
	Access    profile.Access
	Label     string // allocation site and size
	Size      uint64
	Redundant uint64
	Accesses  uint64
	Fraction  float64
	Values    *profile.ValueSketch
}

// ObjectLabel names a data object by its allocation site and size.
func ObjectLabel(p *profile.Profile, id profile.ObjectID) string {
	o := p.Objects[id]
	if o == nil {
		return fmt.Sprintf("object %#x", uint64(id))
	}
	site := "?"
	if n := p.Nodes[o.Context]; n != nil {
		site = FrameLabel(n.Frame)
	}
	switch o.Space {
	case 2:
		site = "shared memory"
	case 3:
		site = "local memory"
	}
	return fmt.Sprintf("%s, %s", site, Bytes(o.Size))
}

// TopObjects returns the n (context, object, access) entries with the most
// spatially redundant accesses (all if n <= 0).
func TopObjects(p *profile.Profile, n int) []Object {
	type key = profile.ObjectKey
	red := map[key]uint64{}
	for k, v := range p.Spatial {
		red[key{Context: k.Context, Object: k.Object, Access: k.Access}] += v
	}
	for k := range p.ObjStats {
		if _, ok := red[k]; !ok {
			red[k] = 0
		}
	}
	out := make([]Object, 0, len(red))
	for k, v := range red {
		o := Object{Context: k.Context, Kernel: KernelLabel(p, k.Context), Object: k.Object, Access: k.Access,
			Label: ObjectLabel(p, k.Object), Redundant: v}
		if d := p.Objects[k.Object]; d != nil {
			o.Size = d.Size
		}
		if st := p.ObjStats[k]; st != nil {
			o.Accesses, o.Values = st.Accesses, st.Values
		}
		o.Fraction = frac(o.Redundant, o.Accesses)
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Redundant != b.Redundant {
			return a.Redundant > b.Redundant
		}
		if a.Accesses != b.Accesses {
			return a.Accesses > b.Accesses
		}
		return ObjectKeyLess(profile.ObjectKey{Context: a.Context, Object: a.Object, Access: a.Access},
			profile.ObjectKey{Context: b.Context, Object: b.Object, Access: b.Access})
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Value renders a sketch value as the sketch's kind reads it.
func Value(s *profile.ValueSketch, raw uint64) string {
	if s == nil {
		return fmt.Sprintf("%#x", raw)
	}
	if s.Kind == profile.ValHashed {
		// --no-values: a keyed hash, shortened; it tells values apart only.
		return fmt.Sprintf("#%08x", uint32(raw))
	}
	if s.Kind == profile.ValFloat {
		bits := 64
		if s.Bits == 32 {
			bits = 32 // shortest text that reads back as the same float32
		}
		return strconv.FormatFloat(s.AsFloat(raw), 'g', -1, bits)
	}
	if s.Kind == profile.ValInt {
		return fmt.Sprintf("%d", int64(s.AsFloat(raw)))
	}
	return fmt.Sprintf("%#x", raw)
}

// Bytes renders a size with a binary unit.
func Bytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Duration renders nanoseconds readably.
func Duration(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f us", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

// Count renders a count compactly (12.3k, 4.5M).
func Count(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// Provenance summarises the ranks' provenance for report headers.
type Provenance struct {
	Job                       string
	Synthetic                 bool
	Source                    string // "synthetic", "captured" or "captured+synthetic"
	Ranks                     int    // ranks with provenance
	Sealed                    uint64
	Items                     uint64
	Hosts, GPUs, Modes        []string
	BlockP, KernelK           []uint32
	Launches, LaunchesTraced  uint64
	Records, Dropped, HostDrp uint64
	// SamplesDropped: PC samples the sampling hardware dropped.
	SamplesDropped uint64
	Incomplete     map[int32]string
	DroppedBy      map[int32]uint64
	// Nothing: no rank reported a kernel launch, so nothing was measured
	// (the application did not use the GPU, or no collector could).
	Nothing bool
	// Interrupted: the signal that cut the job short ("" if it ran to its end).
	Interrupted string
	// Values says what the value sketches hold: "" (none), "values" (values
	// read from the application's memory) or "hashed" (--no-values).
	Values string
}

// InterruptedNote is the line every output shows for an interrupted job.
func InterruptedNote(sig string) string {
	return "INTERRUPTED by " + sig + ": the job was stopped before its end; this profile holds what was merged by then"
}

// ValuesNote says what the value sketches hold, for the reports' headers
// ("" when the profile has none).
func ValuesNote(values string) string {
	switch values {
	case "values":
		return "value sketches hold values read from the application's memory (top values, ranges); gpuprof run --no-values keeps only keyed hashes"
	case "hashed":
		return "hidden (--no-values): value sketches hold keyed hashes, counts and redundancy fractions, no value read from the application's memory"
	}
	return ""
}

// valuesOf says what p's value sketches hold (see Provenance.Values).
func valuesOf(p *profile.Profile) string {
	out := ""
	see := func(s *profile.ValueSketch) {
		switch {
		case s == nil || s.Total == 0:
		case s.Kind == profile.ValHashed:
			if out == "" {
				out = "hashed"
			}
		default:
			out = "values" // any plain value is worth saying
		}
	}
	for _, st := range p.PCs {
		see(st.Values)
	}
	for _, st := range p.ObjStats {
		see(st.Values)
	}
	return out
}

// ProvenanceOf gathers p's provenance.
func ProvenanceOf(p *profile.Profile) Provenance {
	pv := Provenance{Job: p.Job, Synthetic: p.Synthetic, Ranks: len(p.Ranks), Sealed: p.SealedRanks(), Items: p.MergedItems(),
		Incomplete: map[int32]string{}, DroppedBy: map[int32]uint64{}, Interrupted: p.Interrupted, Values: valuesOf(p)}
	set := func(dst *[]string, v string) {
		if v == "" {
			return
		}
		for _, x := range *dst {
			if x == v {
				return
			}
		}
		*dst = append(*dst, v)
	}
	setU := func(dst *[]uint32, v uint32) {
		for _, x := range *dst {
			if x == v {
				return
			}
		}
		*dst = append(*dst, v)
	}
	sources := []string{}
	for _, r := range p.SortedRanks() {
		ri := p.Ranks[r]
		set(&pv.Hosts, ri.Host)
		set(&pv.GPUs, ri.GPU)
		for _, m := range strings.Split(ri.Mode, "+") {
			set(&pv.Modes, m)
		}
		set(&sources, ri.Source)
		setU(&pv.BlockP, ri.BlockP)
		setU(&pv.KernelK, ri.KernelK)
		pv.Launches += ri.Launches
		pv.LaunchesTraced += ri.LaunchesTraced
		pv.Records += ri.Records
		pv.Dropped += ri.Dropped
		pv.HostDrp += ri.HostDropped
		pv.SamplesDropped += ri.SamplesDropped
		if d := ri.Dropped + ri.HostDropped; d > 0 {
			pv.DroppedBy[r] = d
		}
		if ri.Incomplete != "" {
			pv.Incomplete[r] = ri.Incomplete
		} else if _, open := p.Open[r]; open {
			pv.Incomplete[r] = "not sealed: batches missing"
		}
	}
	sort.Strings(sources)
	pv.Source = strings.Join(sources, "+")
	if p.Synthetic && !strings.Contains(pv.Source, "synthetic") {
		pv.Source = strings.TrimPrefix(pv.Source+"+synthetic", "+")
	}
	pv.Nothing = pv.Launches == 0 && len(p.Nodes) <= 1
	if pv.Source == "" {
		pv.Source = "captured"
		if pv.Nothing {
			pv.Source = "none"
		}
	}
	return pv
}

// NothingLine is the line a report opens with when nothing was measured
// ("" otherwise): the first incomplete ranks' reasons say why.
func (pv Provenance) NothingLine() string {
	if !pv.Nothing {
		return ""
	}
	s := "NOTHING MEASURED: no rank reported a GPU kernel launch"
	rs := make([]int32, 0, len(pv.Incomplete))
	for r := range pv.Incomplete {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	for i, r := range rs {
		if i == 2 {
			s += fmt.Sprintf("; %d more incomplete ranks", len(rs)-i)
			break
		}
		s += fmt.Sprintf("; rank %d: %s", r, pv.Incomplete[r])
	}
	return s
}

// Basename shortens a path for narrow columns.
func Basename(s string) string { return path.Base(s) }

// PCLess orders instructions by function, then offset.
func PCLess(a, b profile.PC) bool {
	if a.Func != b.Func {
		return a.Func < b.Func
	}
	return a.Offset < b.Offset
}

// TemporalLess orders temporal keys (a total order, for stable output).
func TemporalLess(a, b profile.TemporalKey) bool {
	switch {
	case a.Context != b.Context:
		return a.Context < b.Context
	case a.Access != b.Access:
		return a.Access < b.Access
	case a.Old != b.Old:
		return PCLess(a.Old, b.Old)
	}
	return PCLess(a.New, b.New)
}

// SpatialLess orders spatial keys.
func SpatialLess(a, b profile.SpatialKey) bool {
	switch {
	case a.Context != b.Context:
		return a.Context < b.Context
	case a.Access != b.Access:
		return a.Access < b.Access
	case a.Object != b.Object:
		return a.Object < b.Object
	}
	return PCLess(a.PC, b.PC)
}

// PCKeyLess orders instruction statistics keys.
func PCKeyLess(a, b profile.PCKey) bool {
	switch {
	case a.Context != b.Context:
		return a.Context < b.Context
	case a.Access != b.Access:
		return a.Access < b.Access
	}
	return PCLess(a.PC, b.PC)
}

// ObjectKeyLess orders object statistics keys.
func ObjectKeyLess(a, b profile.ObjectKey) bool {
	switch {
	case a.Context != b.Context:
		return a.Context < b.Context
	case a.Object != b.Object:
		return a.Object < b.Object
	}
	return a.Access < b.Access
}
