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
// line. Host frames and kernel launches, where gpuprof keeps values per
// rank, get one sample per rank with a numeric rank label and a host label; GPU-internal
// contexts are summed over ranks and carry no rank label.
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
}

// Convert builds the pprof profile of p.
func Convert(p *profile.Profile) (*pp.Profile, error) {
	if _, ok := p.Nodes[profile.RootID]; !ok {
		return nil, fmt.Errorf("pprof: profile has no root node")
	}
	c := &conv{p: p, out: &pp.Profile{}, metIdx: map[profile.MetricID]int{}, maps: map[string]*pp.Mapping{},
		funcs: map[[2]string]*pp.Function{}, locs: map[string]*pp.Location{}, stacks: map[profile.NodeID][]*pp.Location{}}
	metrics := view.Metrics(p)
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
				var labels map[string][]string
				if ri := p.Ranks[r]; ri != nil && ri.Host != "" {
					labels = map[string][]string{"host": {ri.Host}}
				}
				c.sample(stack, vs, labels, int64(r))
				for _, v := range vs {
					rest = sub(rest, v)
				}
			}
		}
		c.sample(stack, rest, nil, -1)
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

// sample adds a sample; rank >= 0 labels it. The rank label has a unit
// because pprof's encoding drops a unitless numeric label of value 0.
func (c *conv) sample(stack []*pp.Location, vs profile.Values, labels map[string][]string, rank int64) {
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
		s.NumLabel = map[string][]int64{"rank": {rank}}
		s.NumUnit = map[string][]string{"rank": {"rank"}}
	}
	c.out.Sample = append(c.out.Sample, s)
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
		lines = append(lines, pp.Line{Function: c.function(view.Demangle(fn), fn, file), Line: int64(line)})
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
			lines = append(lines, pp.Line{Function: c.function(view.Demangle(f.Function), f.Function, file), Line: int64(line)})
			file, line, pending = f.File, f.Line, true
		case profile.KindGPUFunction:
			flush(f.Function, cur)
			gpuStart = cur
		case profile.KindKernel:
			if pending || len(lines) > 0 {
				flush(f.Function, gpuStart) // GPU code directly under the launch: the kernel's body
			}
			m := c.mapping(view.GPUModulePath(p, f.Module), f.Module)
			name := "<gpu kernel> " + view.Demangle(f.Function)
			out = append(out, c.location(m, 0, []pp.Line{{Function: c.function(name, f.Function, "")}}))
		case profile.KindHostFrame:
			mod := f.Module
			if mod == "" {
				mod = "<unknown module>"
			}
			m := c.mapping(mod, "")
			name := view.Demangle(f.Function)
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
