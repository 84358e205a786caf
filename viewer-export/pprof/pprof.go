// Package pprof writes a gpuprof profile as a pprof profile
// (profile.pb.gz) that `go tool pprof` and other pprof viewers open.
//
// Every metric is a sample type (gpu.time_ns first, the default). Each
// calling context with exclusive values is a sample whose stack runs from
// the GPU instruction (or host frame) to main: GPU functions and inlined
// functions become pprof's inline frames of one location at the
// instruction's offset in its GPU module, with the source line of the
// nearest line or loop context; a kernel launch is a frame named
// "<gpu kernel> NAME"; host frames keep their module, address, file and
// line.
//
// Every sample carries a numeric rank label and a host label, so that
// -tagfocus=rank=N works with every sample type. Host frames and kernel
// launches, where gpuprof keeps values per rank, get one sample per rank
// with the rank's measured values (label rank_value=measured). Inside a
// kernel gpuprof keeps only the sum over ranks (docs/design.md: per-rank
// detail is kept at launch contexts), so a GPU-internal context's values
// are split over the ranks that launched the kernel context in proportion
// to each rank's GPU time there (or launches), in whole units that add up
// to the total; such samples say rank_value=split by gpu.time_ns.
//
// The series that only serve derived statistics (the instance-time
// histogram gpu.time_hist.N and the squares gpu.time_sq_hi/lo) are not
// sample types; the launch configuration (launch.regs, launch.block_threads
// ...), summed over launches in the profile, becomes numeric labels of the
// launch samples holding its mean per launch.
package pprof

import (
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"sort"
	"strings"

	pp "github.com/google/pprof/profile"

	"gpuprof/profile"
	"gpuprof/symname"
	"gpuprof/viewer-export/internal/view"
)

// Unit returns the pprof unit of a metric.
func Unit(name string) string {
	switch {
	case strings.HasSuffix(name, "_ns"):
		return "nanoseconds"
	case strings.HasSuffix(name, ".bytes"):
		return "bytes"
	}
	return "count"
}

// WriteFile writes p as a gzipped pprof profile to file.
func WriteFile(file string, p *profile.Profile) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := Write(f, p); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Write writes p as a gzipped pprof profile to w.
func Write(w io.Writer, p *profile.Profile) error {
	out, err := Convert(p)
	if err != nil {
		return err
	}
	return out.Write(w)
}

type conv struct {
	p        *profile.Profile
	out      *pp.Profile
	metIdx   map[profile.MetricID]int
	maps     map[string]*pp.Mapping
	funcs    map[[2]string]*pp.Function
	locs     map[string]*pp.Location
	stacks   map[profile.NodeID][]*pp.Location
	children map[profile.NodeID][]profile.NodeID
	shares   map[profile.NodeID]*rankShares
}

// internalMetric reports the series that only serve derived statistics
// (the analysis' instance-time spread): not sample types.
func internalMetric(name string) bool {
	return strings.HasPrefix(name, "gpu.time_hist.") || strings.HasPrefix(name, "gpu.time_sq_")
}

// launchAttr reports launch-configuration metrics: sums over launches in
// the profile, labels (their mean per launch) in pprof.
func launchAttr(name string) bool { return strings.HasPrefix(name, "launch.") }

// sampleTypes are p's metrics that become pprof sample types.
func sampleTypes(p *profile.Profile) []profile.MetricID {
	var out []profile.MetricID
	for _, m := range view.Metrics(p) {
		if !internalMetric(m.Name()) && !launchAttr(m.Name()) {
			out = append(out, m)
		}
	}
	return out
}

// Convert builds the pprof profile of p.
func Convert(p *profile.Profile) (*pp.Profile, error) {
	if _, ok := p.Nodes[profile.RootID]; !ok {
		return nil, fmt.Errorf("pprof: profile has no root node")
	}
	c := &conv{p: p, out: &pp.Profile{}, metIdx: map[profile.MetricID]int{}, maps: map[string]*pp.Mapping{},
		funcs: map[[2]string]*pp.Function{}, locs: map[string]*pp.Location{}, stacks: map[profile.NodeID][]*pp.Location{},
		shares: map[profile.NodeID]*rankShares{}}
	metrics := sampleTypes(p)
	for i, m := range metrics {
		c.metIdx[m] = i
		c.out.SampleType = append(c.out.SampleType, &pp.ValueType{Type: m.Name(), Unit: Unit(m.Name())})
	}
	if len(metrics) > 0 {
		c.out.DefaultSampleType = metrics[0].Name()
	}
	c.out.Comments = comments(p)
	for _, id := range p.SortedNodeIDs() {
		n := p.Nodes[id]
		if id == profile.RootID || len(n.Metrics) == 0 {
			continue
		}
		stack := c.stack(id)
		rest := n.Metrics.Clone()
		if profile.IsLaunchContext(n.Frame.Kind) {
			for _, r := range p.SortedRanks() {
				vs := p.PerRank[r][id]
				if len(vs) == 0 {
					continue
				}
				c.sample(stack, vs, c.labels(r, "measured"), launchLabels(vs), int64(r))
				for _, v := range vs {
					rest = sub(rest, v)
				}
			}
			c.sample(stack, rest, nil, launchLabels(rest), -1)
			continue
		}
		c.splitSample(stack, p.KernelOf(id), rest)
	}
	// pprof presents the first mapping as the program: put host binaries
	// first (they come first in the calling context), GPU modules after.
	sort.SliceStable(c.out.Mapping, func(i, j int) bool {
		return c.out.Mapping[i].BuildID == "" && c.out.Mapping[j].BuildID != ""
	})
	for i, m := range c.out.Mapping {
		m.ID = uint64(i + 1)
	}
	if err := c.out.CheckValid(); err != nil {
		return nil, fmt.Errorf("pprof: %v", err)
	}
	return c.out, nil
}

// sub returns vs less v (clamped at zero: per-rank values never exceed
// the totals in a consistent profile).
func sub(vs profile.Values, v profile.MV) profile.Values {
	for i := range vs {
		if vs[i].ID == v.ID {
			if vs[i].V >= v.V {
				vs[i].V -= v.V
			} else {
				vs[i].V = 0
			}
		}
	}
	return vs
}

// labels are the string labels of rank r's samples.
func (c *conv) labels(r int32, how string) map[string][]string {
	l := map[string][]string{"rank_value": {how}}
	if ri := c.p.Ranks[r]; ri != nil && ri.Host != "" {
		l["host"] = []string{ri.Host}
	}
	return l
}

// sample adds a sample; rank >= 0 labels it. The rank label has a unit
// because pprof's encoding drops a unitless numeric label of value 0.
func (c *conv) sample(stack []*pp.Location, vs profile.Values, labels map[string][]string, num map[string]int64, rank int64) {
	vals := make([]int64, len(c.out.SampleType))
	any := false
	for _, v := range vs {
		i, ok := c.metIdx[v.ID]
		if !ok || v.V == 0 {
			continue
		}
		vals[i] = int64(min(v.V, math.MaxInt64))
		any = true
	}
	if !any {
		return
	}
	s := &pp.Sample{Location: stack, Value: vals, Label: labels}
	if rank >= 0 {
		num["rank"] = rank
	}
	if len(num) > 0 {
		s.NumLabel, s.NumUnit = map[string][]int64{}, map[string][]string{}
		for k, v := range num {
			s.NumLabel[k] = []int64{v}
			s.NumUnit[k] = []string{labelUnit(k)}
		}
	}
	c.out.Sample = append(c.out.Sample, s)
}

// labelUnit is a numeric label's unit (every numeric label has one, as a
// unitless label of value 0 is dropped by pprof's encoding).
func labelUnit(k string) string {
	switch {
	case k == "rank":
		return "rank"
	case strings.HasSuffix(k, "bytes") || strings.HasPrefix(k, "shared_"):
		return "bytes"
	case strings.HasSuffix(k, "regs"):
		return "registers"
	case k == "block_threads":
		return "threads"
	case k == "grid_blocks":
		return "blocks"
	}
	return "count"
}

// launchLabels are the mean launch configuration in vs (launch.* sums
// over launches): per launch for what every launch has, per launch with
// known cubin attributes for what the cubin gives.
func launchLabels(vs profile.Values) map[string]int64 {
	launches := vs.Get(profile.GPULaunches)
	attrs := vs.Get(profile.LaunchWithAttrs)
	out := map[string]int64{}
	for _, v := range vs {
		name := v.ID.Name()
		if !launchAttr(name) || name == "launch.with_attrs" {
			continue
		}
		per := launches
		switch name {
		case "launch.regs", "launch.shared_static", "launch.frame_bytes", "launch.max_regs":
			per = attrs
		}
		if per > 0 {
			out[strings.TrimPrefix(name, "launch.")] = int64((v.V + per/2) / per)
		}
	}
	return out
}

// rankShares are the ranks that launched a kernel context and their
// weights for splitting its GPU-internal values.
type rankShares struct {
	ranks []int32
	w     []uint64
	basis string // what the weights are
}

// sharesOf returns the split of kernel context k over ranks: by each
// rank's GPU time there, else by its launches; a kernel no rank has
// per-rank values of is split over every rank equally (a single-rank
// profile: that rank).
func (c *conv) sharesOf(k profile.NodeID) *rankShares {
	if s, ok := c.shares[k]; ok {
		return s
	}
	s := &rankShares{}
	for _, m := range []profile.MetricID{profile.GPUTime, profile.GPULaunches} {
		s.ranks, s.w = nil, nil
		for _, r := range c.p.SortedRanks() {
			if w := c.p.PerRank[r][k].Get(m); w > 0 {
				s.ranks, s.w = append(s.ranks, r), append(s.w, w)
			}
		}
		if len(s.ranks) > 0 {
			s.basis = "split by " + m.Name()
			break
		}
	}
	if len(s.ranks) == 0 {
		s.ranks = c.p.SortedRanks()
		s.w = make([]uint64, len(s.ranks))
		for i := range s.w {
			s.w[i] = 1
		}
		s.basis = "split equally"
		if len(s.ranks) == 1 {
			s.basis = "measured"
		}
	}
	c.shares[k] = s
	return s
}

// splitSample adds GPU-internal values vs (under kernel context k) as one
// sample per rank, each value split by the ranks' shares in whole units
// (largest remainders, ties to the lower rank) so the ranks add up to vs.
func (c *conv) splitSample(stack []*pp.Location, k profile.NodeID, vs profile.Values) {
	sh := c.sharesOf(k)
	if len(sh.ranks) == 0 {
		c.sample(stack, vs, nil, map[string]int64{}, -1)
		return
	}
	var total uint64
	for _, w := range sh.w {
		total += w
	}
	parts := make([]profile.Values, len(sh.ranks))
	rem := make([]float64, len(sh.ranks))
	order := make([]int, len(sh.ranks))
	for _, v := range vs {
		if v.V == 0 {
			continue
		}
		var given uint64
		for i, w := range sh.w {
			exact := float64(v.V) * float64(w) / float64(total)
			q := uint64(exact)
			given += q
			rem[i] = exact - float64(q)
			parts[i] = append(parts[i], profile.MV{ID: v.ID, V: q})
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return rem[order[a]] > rem[order[b]] })
		for j := 0; given < v.V; j = (j + 1) % len(order) {
			i := order[j]
			parts[i][len(parts[i])-1].V++
			given++
		}
	}
	for i, r := range sh.ranks {
		c.sample(stack, parts[i], c.labels(r, sh.basis), map[string]int64{}, int64(r))
	}
}

func comments(p *profile.Profile) []string {
	out := []string{"gpuprof job " + p.Job}
	if p.Synthetic {
		out = append(out, "SYNTHETIC data: some merged items were generated, not measured")
	}
	if p.Interrupted != "" {
		out = append(out, view.InterruptedNote(p.Interrupted))
	}
	out = append(out, fmt.Sprintf("%d items from %d ranks, %d sealed", p.MergedItems(), len(p.Items), p.SealedRanks()))
	for _, r := range p.SortedRanks() {
		ri := p.Ranks[r]
		s := fmt.Sprintf("rank %d: host %s, GPU %s, mode %s, source %s, block sampling 1/%d, kernel sampling 1/%d, dropped %d",
			r, ri.Host, ri.GPU, ri.Mode, ri.Source, ri.BlockP, ri.KernelK, ri.Dropped+ri.HostDropped)
		if ri.Incomplete != "" {
			s += ", INCOMPLETE: " + ri.Incomplete
		}
		out = append(out, s)
	}
	return out
}

// mapping returns the mapping of a module; each gets its own address
// range so addresses stay unique across modules.
func (c *conv) mapping(file, buildID string) *pp.Mapping {
	if m, ok := c.maps[file]; ok {
		return m
	}
	id := uint64(len(c.out.Mapping) + 1)
	m := &pp.Mapping{ID: id, Start: id << 40, Limit: (id + 1) << 40, File: file, BuildID: buildID,
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	c.maps[file] = m
	c.out.Mapping = append(c.out.Mapping, m)
	return m
}

func (c *conv) function(name, system, file string) *pp.Function {
	k := [2]string{system + "\x00" + name, file}
	if f, ok := c.funcs[k]; ok {
		return f
	}
	f := &pp.Function{ID: uint64(len(c.out.Function) + 1), Name: name, SystemName: system, Filename: file}
	c.funcs[k] = f
	c.out.Function = append(c.out.Function, f)
	return f
}

func (c *conv) location(m *pp.Mapping, off uint64, lines []pp.Line) *pp.Location {
	var key strings.Builder
	fmt.Fprintf(&key, "%d/%d", m.ID, off)
	for _, l := range lines {
		fmt.Fprintf(&key, "/%d:%d", l.Function.ID, l.Line)
	}
	if l, ok := c.locs[key.String()]; ok {
		return l
	}
	addr := m.Start + off%(m.Limit-m.Start)
	l := &pp.Location{ID: uint64(len(c.out.Location) + 1), Mapping: m, Address: addr, Line: lines}
	c.locs[key.String()] = l
	c.out.Location = append(c.out.Location, l)
	return l
}

// stack returns the locations of node id, leaf first.
func (c *conv) stack(id profile.NodeID) []*pp.Location {
	if s, ok := c.stacks[id]; ok {
		return s
	}
	p := c.p
	var out []*pp.Location
	// State of the GPU location being assembled while walking up.
	var (
		lines    []pp.Line
		addr     uint64
		file     string
		line     uint32
		pending  bool
		gpuStart = id
	)
	gpuMap := func(at profile.NodeID) *pp.Mapping {
		k := p.KernelOf(at)
		mod := ""
		if kn := p.Nodes[k]; kn != nil {
			mod = kn.Frame.Module
		}
		if n := p.Nodes[at]; n != nil && n.Frame.Kind == profile.KindGPUFunction && n.Frame.Module != "" {
			mod = n.Frame.Module
		}
		return c.mapping(view.GPUModulePath(p, mod), mod)
	}
	flush := func(fn string, at profile.NodeID) {
		lines = append(lines, pp.Line{Function: c.function(symname.Demangle(fn), fn, file), Line: int64(line)})
		out = append(out, c.location(gpuMap(at), addr, lines))
		lines, addr, file, line, pending = nil, 0, "", 0, false
	}
	for cur := id; cur != profile.RootID; {
		n, ok := p.Nodes[cur]
		if !ok {
			break
		}
		f := n.Frame
		switch f.Kind {
		case profile.KindInstruction:
			addr, pending = f.Offset, true
		case profile.KindLine, profile.KindLoop:
			if line == 0 && file == "" {
				file, line = f.File, f.Line
			}
			pending = true
		case profile.KindInlined:
			lines = append(lines, pp.Line{Function: c.function(symname.Demangle(f.Function), f.Function, file), Line: int64(line)})
			file, line, pending = f.File, f.Line, true
		case profile.KindGPUFunction:
			flush(f.Function, cur)
			gpuStart = cur
		case profile.KindKernel:
			if pending || len(lines) > 0 {
				flush(f.Function, gpuStart) // GPU code directly under the launch: the kernel's body
			}
			m := c.mapping(view.GPUModulePath(p, f.Module), f.Module)
			name := "<gpu kernel> " + symname.Demangle(f.Function)
			out = append(out, c.location(m, 0, []pp.Line{{Function: c.function(name, f.Function, "")}}))
		case profile.KindHostFrame:
			mod := f.Module
			if mod == "" {
				mod = "<unknown module>"
			}
			m := c.mapping(mod, "")
			name := symname.Demangle(f.Function)
			if name == "" {
				name = fmt.Sprintf("%s+0x%x", path.Base(mod), f.Offset)
			}
			out = append(out, c.location(m, f.Offset, []pp.Line{{Function: c.function(name, f.Function, f.File), Line: int64(f.Line)}}))
		}
		cur = n.Parent
	}
	if pending || len(lines) > 0 { // GPU code with no enclosing function or kernel
		flush("<unknown GPU function>", id)
	}
	c.stacks[id] = out
	return out
}

// Totals returns each sample type's total in pp (a test and tool helper).
func Totals(prof *pp.Profile) map[string]int64 {
	out := map[string]int64{}
	for _, s := range prof.Sample {
		for i, v := range s.Value {
			out[prof.SampleType[i].Type] += v
		}
	}
	return out
}

// RankTotals returns, per rank label, each sample type's total.
func RankTotals(prof *pp.Profile) map[int64]map[string]int64 {
	out := map[int64]map[string]int64{}
	for _, s := range prof.Sample {
		for _, r := range s.NumLabel["rank"] {
			if out[r] == nil {
				out[r] = map[string]int64{}
			}
			for i, v := range s.Value {
				out[r][prof.SampleType[i].Type] += v
			}
		}
	}
	return out
}
