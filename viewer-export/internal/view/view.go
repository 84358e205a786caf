// Package view holds what every exporter shares: readable names of frames
// and metrics, the metric order, and the per-kernel, per-rank and
// redundancy tables the reports show.
package view

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/symname"
)

// ModuleHash parses a kernel frame's module field (the hex content hash).
func ModuleHash(s string) (profile.ModuleHash, bool) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, false
	}
	return profile.ModuleHash(v), true
}

// GPUModulePath is the load-module path gpuprof gives a GPU module: its
// content hash (the identity every rank agrees on) and its readable name.
func GPUModulePath(p *profile.Profile, hash string) string {
	name := "module"
	if h, ok := ModuleHash(hash); ok {
		if m := p.Modules[h]; m != nil && m.Name != "" {
			name = path.Base(m.Name)
		}
	}
	return "gpubins/" + hash + "/" + name
}

// FrameLabel is a one-line readable label of a node's frame.
func FrameLabel(f profile.Frame) string {
	switch f.Kind {
	case profile.KindRoot:
		return "<program root>"
	case profile.KindHostFrame:
		return hostLabel(f)
	case profile.KindKernel:
		return "kernel " + symname.Short(f.Function)
	case profile.KindGPUFunction:
		return symname.Short(f.Function)
	case profile.KindInlined:
		return fmt.Sprintf("[inlined] %s (%s)", symname.Short(f.Function), Place(f.File, f.Line))
	case profile.KindLoop:
		if f.File == "" {
			return fmt.Sprintf("loop at +%#x (%s)", f.Offset, NoLine)
		}
		return fmt.Sprintf("loop %s:%d", path.Base(f.File), f.Line)
	case profile.KindLine:
		if f.File == "" {
			if f.Line == 0 {
				return NoLine
			}
			return fmt.Sprintf("line %d", f.Line)
		}
		return fmt.Sprintf("%s:%d", path.Base(f.File), f.Line)
	case profile.KindInstruction:
		return fmt.Sprintf("pc +%#x", f.Offset)
	}
	if f.Function != "" || f.Module != "" {
		return hostLabel(f) // a host frame of a kind this version does not name
	}
	return f.String()
}

// hostLabel labels a host frame: "function (file:line)", the function
// alone, or "module+0xOFFSET" when it could not be symbolised.
func hostLabel(f profile.Frame) string {
	if f.Function == "" {
		return fmt.Sprintf("%s+%#x", path.Base(f.Module), f.Offset)
	}
	if f.File != "" && f.Line == 0 { // a Python function whose definition was not found
		return fmt.Sprintf("%s (%s)", symname.Short(f.Function), path.Base(f.File))
	}
	if f.File != "" {
		return fmt.Sprintf("%s (%s:%d)", symname.Short(f.Function), path.Base(f.File), f.Line)
	}
	return symname.Short(f.Function)
}

// NoLine is what a place without line information reads.
const NoLine = analysis.NoLine

// Place renders a source position ("file.cu:31"), or NoLine.
func Place(file string, line uint32) string {
	if file == "" {
		return NoLine
	}
	return fmt.Sprintf("%s:%d", path.Base(file), line)
}

// metricRank orders metric names for display: time first, then samples
// and stalls, memory, redundancy, then the rest.
func metricRank(name string) int {
	switch {
	case name == profile.GPUTime.Name():
		return 0
	case strings.HasPrefix(name, "gpu."):
		return 1
	case strings.HasPrefix(name, "inst."):
		return 2
	case strings.HasPrefix(name, profile.StallPrefix):
		return 3
	case strings.HasPrefix(name, "mem."):
		return 4
	case strings.HasPrefix(name, "red."):
		return 5
	case strings.HasPrefix(name, "alloc."):
		return 6
	}
	return 7
}

// SortMetrics orders metric ids for display (see metricRank), by name
// within a group.
func SortMetrics(ids []profile.MetricID) []profile.MetricID {
	out := append([]profile.MetricID(nil), ids...)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Name(), out[j].Name()
		if ra, rb := metricRank(a), metricRank(b); ra != rb {
			return ra < rb
		}
		return a < b
	})
	return out
}

// Metrics returns every metric with a value anywhere in p (nodes and
// per-rank tables), in display order.
func Metrics(p *profile.Profile) []profile.MetricID {
	seen := map[profile.MetricID]bool{}
	for _, n := range p.Nodes {
		for _, v := range n.Metrics {
			seen[v.ID] = true
		}
	}
	for _, per := range p.PerRank {
		for _, vs := range per {
			for _, v := range vs {
				seen[v.ID] = true
			}
		}
	}
	ids := make([]profile.MetricID, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	return SortMetrics(ids)
}

// MetricDescription says what a metric counts, in a sentence.
func MetricDescription(name string) string {
	if d, ok := descriptions[name]; ok {
		return d
	}
	if r, ok := strings.CutPrefix(name, profile.StallPrefix); ok {
		return "PC samples of warps stalled on " + strings.ReplaceAll(r, "_", " ") + " (CUPTI stall reason)"
	}
	return name
}

var descriptions = map[string]string{
	"gpu.time_ns":         "GPU kernel execution time, nanoseconds",
	"gpu.launches":        "kernel launches",
	"gpu.launches_traced": "kernel launches instrumented (kernel sampling)",
	"gpu.launches_graph":  "kernel launches as nodes of CUDA graph launches",
	"gpu.blocks":          "thread blocks launched",
	"gpu.blocks_traced":   "thread blocks traced (block sampling)",
	"inst.samples":        "PC samples, all stall reasons",
	"inst.executed":       "warp-level instruction executions",
	"mem.loads":           "lane loads measured",
	"mem.stores":          "lane stores measured",
	"red.temporal.load":   "temporally redundant loads: the same value loaded again by the same PC pair (GVProf III.1)",
	"red.temporal.store":  "temporally redundant stores: a store of the value already there (GVProf III.2)",
	"red.spatial.load":    "spatially redundant loads: loads of a value repeated across the data object (GVProf III.3)",
	"red.spatial.store":   "spatially redundant stores: stores of a value repeated across the data object (GVProf III.4)",
	"mem.warp_accesses":   "warp-level memory instructions traced",
	"mem.sectors":         "distinct 32-byte sectors touched by traced memory instructions",
	"alloc.bytes":         "bytes allocated",
	"alloc.count":         "allocations",
}

// Fraction is a derived ratio of two metrics (GVProf eq. 1 and 2 at a
// context: redundant accesses over measured accesses).
type Fraction struct {
	Name, Num, Den, Description string
}

// Fractions are the redundancy fractions every viewer derives.
var Fractions = []Fraction{
	{"red.temporal.load.fraction", "red.temporal.load", "mem.loads", "fraction of loads that are temporally redundant (GVProf eq. 1)"},
	{"red.temporal.store.fraction", "red.temporal.store", "mem.stores", "fraction of stores that are temporally redundant (GVProf eq. 1)"},
	{"red.spatial.load.fraction", "red.spatial.load", "mem.loads", "fraction of loads that are spatially redundant (GVProf eq. 2)"},
	{"red.spatial.store.fraction", "red.spatial.store", "mem.stores", "fraction of stores that are spatially redundant (GVProf eq. 2)"},
}
