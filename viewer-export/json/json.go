// Package jsonexport writes a gpuprof profile and its advice as one JSON
// document whose schema is docs/json-schema.json ("gpuprof-profile",
// version 1). Ids (nodes, functions, objects, modules) are hex strings,
// since JSON numbers lose 64-bit integers in most readers; metric values
// are numbers keyed by metric name.
package jsonexport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/symname"
	"gpuprof/viewer-export/internal/view"
)

// Format and Version identify the document's schema.
const (
	Format  = "gpuprof-profile"
	Version = 1
)

// Document is the exported JSON document.
type Document struct {
	Format      string       `json:"format"`
	Version     int          `json:"version"`
	Job         string       `json:"job"`
	Synthetic   bool         `json:"synthetic"`
	Interrupted string       `json:"interrupted,omitempty"` // the signal that cut the job short
	Items       uint64       `json:"items"`
	SealedRanks uint64       `json:"sealed_ranks"`
	Ranks       []Rank       `json:"ranks"`
	Metrics     []Metric     `json:"metrics"`
	Modules     []Module     `json:"modules"`
	Functions   []Function   `json:"functions"`
	Nodes       []Node       `json:"nodes"`
	Kernels     []Kernel     `json:"kernels"`
	Temporal    []Temporal   `json:"temporal"`
	Spatial     []Spatial    `json:"spatial"`
	PCs         []PCStat     `json:"pcs"`
	Objects     []Object     `json:"objects"`
	ObjectStats []ObjectStat `json:"object_stats"`
	Advice      []Advice     `json:"advice"`
	GPUTime     GPUTime      `json:"gpu_time"`
	// GPUs groups the ranks by host and GPU (analysis.GPUsOf); kernels'
	// per-GPU imbalance refers to them by index.
	GPUs []GPU `json:"gpus"`
}

// GPU is one GPU of the job and the ranks that used it.
type GPU struct {
	Host    string  `json:"host"`
	Device  string  `json:"device"`
	UUID    string  `json:"uuid"`
	Name    string  `json:"name"`
	Ranks   []int32 `json:"ranks"`
	Sampled []int32 `json:"pc_sampled_ranks"`
	// TimesOnly: ranks of a PC-sampling pass that gave kernel times only
	// because another process sampled this GPU (by policy, not a failure).
	TimesOnly []int32 `json:"kernel_times_only_ranks"`
}

// GPUTime divides the kernels' GPU time (view.SplitTime).
type GPUTime struct {
	Total      uint64 `json:"total_ns"`
	Waiting    uint64 `json:"waiting_ns"`
	Autotuning uint64 `json:"autotuning_ns"`
	Compile    uint64 `json:"compile_ns"`
	Compute    uint64 `json:"compute_ns"`
}

// Rank is one rank's provenance.
type Rank struct {
	Rank           int32  `json:"rank"`
	Host           string `json:"host"`
	GPU            string `json:"gpu"`
	GPUUUID        string `json:"gpu_uuid"`
	Driver         string `json:"driver"`
	CUDA           string `json:"cuda"`
	Mode           string `json:"mode"`
	Source         string `json:"source"`
	BlockPeriod    uint32 `json:"block_period"`
	KernelPeriod   uint32 `json:"kernel_period"`
	Launches       uint64 `json:"launches"`
	LaunchesTraced uint64 `json:"launches_traced"`
	Blocks         uint64 `json:"blocks"`
	BlocksTraced   uint64 `json:"blocks_traced"`
	Records        uint64 `json:"records"`
	Dropped        uint64 `json:"dropped"`
	HostDropped    uint64 `json:"host_dropped"`
	SamplesDropped uint64 `json:"pc_samples_dropped"`
	Batches        int64  `json:"batches"`
	ExitCode       int32  `json:"exit_code"`
	Sealed         bool   `json:"sealed"`
	Incomplete     string `json:"incomplete"`
	Device         string `json:"device"`      // CUDA device ordinal on its host ("" if unknown)
	PCSampling     string `json:"pc_sampling"` // "sampled", "kernel times only: ...", or "" outside PC sampling
}

// Metric describes a metric name.
type Metric struct {
	Name        string `json:"name"`
	Unit        string `json:"unit"`
	Description string `json:"description"`
}

// Module is a GPU module.
type Module struct {
	Hash string `json:"hash"`
	Name string `json:"name"`
	Size uint64 `json:"size"`
	SM   uint16 `json:"sm"`
}

// Function is a GPU function.
type Function struct {
	ID        string `json:"id"`
	Module    string `json:"module"`
	Name      string `json:"name"`
	Demangled string `json:"demangled"`
}

// Summary is a cross-rank summary of one metric at a node.
type Summary struct {
	N      uint64  `json:"n"`
	Sum    uint64  `json:"sum"`
	Min    uint64  `json:"min"`
	Max    uint64  `json:"max"`
	ArgMin int32   `json:"argmin"`
	ArgMax int32   `json:"argmax"`
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
}

// RankValues are one rank's values at a launch context.
type RankValues struct {
	Rank   int32             `json:"rank"`
	Values map[string]uint64 `json:"values"`
}

// Node is a calling context.
type Node struct {
	ID        string             `json:"id"`
	Parent    *string            `json:"parent"`
	Kind      string             `json:"kind"`
	Label     string             `json:"label"`
	Module    string             `json:"module,omitempty"`
	Function  string             `json:"function,omitempty"`
	Demangled string             `json:"demangled,omitempty"`
	File      string             `json:"file,omitempty"`
	Line      uint32             `json:"line,omitempty"`
	Offset    uint64             `json:"offset,omitempty"`
	Exclusive map[string]uint64  `json:"exclusive"`
	Inclusive map[string]uint64  `json:"inclusive"`
	Summary   map[string]Summary `json:"summary,omitempty"`
	PerRank   []RankValues       `json:"per_rank,omitempty"`
}

// Imbalance is a kernel context's GPU time over ranks.
type Imbalance struct {
	Min    uint64           `json:"min"`
	Mean   float64          `json:"mean"`
	Max    uint64           `json:"max"`
	ArgMin int32            `json:"argmin"`
	ArgMax int32            `json:"argmax"`
	Ratio  float64          `json:"max_over_mean"`
	Ranks  map[string]int64 `json:"per_rank_time_ns"`
	// ByGPU splits the imbalance by GPU when ranks share GPUs or use
	// several (analysis.SplitByGPU).
	ByGPU *GPUSplit `json:"by_gpu,omitempty"`
}

// GPUSplit is a kernel context's imbalance within and between GPUs: the
// slowest rank's max/mean = within × between.
type GPUSplit struct {
	Where      string     `json:"where"` // "within GPUs", "between GPUs", "within and between GPUs", or "" (balanced)
	Slowest    int32      `json:"slowest_rank"`
	SlowestGPU int        `json:"slowest_gpu"`
	Ratio      float64    `json:"max_over_mean"`
	Within     float64    `json:"within"`
	Between    float64    `json:"between"`
	MeanRatio  float64    `json:"gpu_mean_max_over_mean"`
	LoadRatio  float64    `json:"gpu_load_max_over_mean"`
	GPUs       []GPUShare `json:"gpus"`
}

// GPUShare is one GPU's ranks' time in a kernel context.
type GPUShare struct {
	GPU    int     `json:"gpu"`
	Ranks  int     `json:"ranks"`
	Sum    uint64  `json:"sum_ns"`
	Mean   float64 `json:"mean_ns"`
	Max    uint64  `json:"max_ns"`
	ArgMax int32   `json:"argmax"`
	Within float64 `json:"within"`
	Heavy  []int32 `json:"heavy_ranks"`
}

// Kernel is a kernel context's summary row.
type Kernel struct {
	Node             string    `json:"node"`
	Name             string    `json:"name"`
	Caller           string    `json:"caller"`
	TimeNS           uint64    `json:"time_ns"`
	Samples          uint64    `json:"samples"`
	Loads            uint64    `json:"loads"`
	Stores           uint64    `json:"stores"`
	TemporalFraction float64   `json:"temporal_fraction"`
	SpatialFraction  float64   `json:"spatial_fraction"`
	Waiting          bool      `json:"waiting"`
	Phase            string    `json:"phase"`
	Imbalance        Imbalance `json:"imbalance"`
}

// PC is a normalised GPU instruction.
type PC struct {
	Function string `json:"function"`
	Offset   uint32 `json:"offset"`
	Label    string `json:"label"`
}

// Temporal is a temporal redundancy pair.
type Temporal struct {
	Context   string  `json:"context"`
	Access    string  `json:"access"`
	Old       PC      `json:"old"`
	New       PC      `json:"new"`
	Redundant uint64  `json:"redundant"`
	Accesses  uint64  `json:"accesses"`
	Fraction  float64 `json:"fraction"`
}

// Spatial is a spatial redundancy pair.
type Spatial struct {
	Context   string `json:"context"`
	Access    string `json:"access"`
	Object    string `json:"object"`
	PC        PC     `json:"pc"`
	Redundant uint64 `json:"redundant"`
}

// TopValue is a heavy hitter of a value sketch.
type TopValue struct {
	Raw   string  `json:"raw"`
	Value string  `json:"value"`
	Count uint64  `json:"count"`
	Err   uint64  `json:"err"`
	Share float64 `json:"share"`
}

// Sketch is a value sketch.
type Sketch struct {
	Kind     string     `json:"kind"`
	Bits     uint8      `json:"bits"`
	Total    uint64     `json:"total"`
	Distinct float64    `json:"distinct"`
	Min      string     `json:"min"`
	Max      string     `json:"max"`
	Top      []TopValue `json:"top"`
}

// PCStat is an instruction's access statistics.
type PCStat struct {
	Context  string  `json:"context"`
	Access   string  `json:"access"`
	PC       PC      `json:"pc"`
	Accesses uint64  `json:"accesses"`
	Values   *Sketch `json:"values"`
}

// Object is a data object.
type Object struct {
	ID      string `json:"id"`
	Context string `json:"context"`
	Label   string `json:"label"`
	Size    uint64 `json:"size"`
	Count   uint64 `json:"count"`
	Space   uint8  `json:"space"`
}

// ObjectStat is a data object's access statistics in a kernel context.
type ObjectStat struct {
	Context   string  `json:"context"`
	Object    string  `json:"object"`
	Access    string  `json:"access"`
	Accesses  uint64  `json:"accesses"`
	Redundant uint64  `json:"redundant"`
	Fraction  float64 `json:"fraction"`
	Values    *Sketch `json:"values"`
}

// Where locates advice.
type Where struct {
	Context  string `json:"context"`
	Kernel   string `json:"kernel"`
	Function string `json:"function"`
	File     string `json:"file"`
	Line     uint32 `json:"line"`
	Loop     string `json:"loop"`
	PC       *PC    `json:"pc"`
	Object   string `json:"object"`
	SASS     string `json:"sass"`
}

// Advice is one finding.
type Advice struct {
	Kind       string  `json:"kind"`
	Category   string  `json:"category"`
	Hint       string  `json:"hint"`
	Importance float64 `json:"importance"`
	Speedup    float64 `json:"speedup"`
	Hotspots   []Where `json:"hotspots"`
	Ranks      []int32 `json:"ranks"`
	Evidence   string  `json:"evidence"`
	Phase      string  `json:"phase"`
	SpeedupNA  string  `json:"speedup_na"`
	// SampledRanks: for advice built from PC samples, the ranks whose
	// samples it rests on.
	SampledRanks []int32 `json:"sampled_ranks,omitempty"`
}

func hex(v uint64) string { return fmt.Sprintf("%016x", v) }

func values(vs profile.Values) map[string]uint64 {
	out := make(map[string]uint64, len(vs))
	for _, v := range vs {
		if v.V != 0 {
			out[v.ID.Name()] = v.V
		}
	}
	return out
}

func pc(p *profile.Profile, x profile.PC) PC {
	return PC{Function: hex(uint64(x.Func)), Offset: x.Offset, Label: view.PCLabel(p, x)}
}

func sketch(s *profile.ValueSketch) *Sketch {
	if s == nil {
		return nil
	}
	kind := map[profile.ValueKind]string{profile.ValUnknown: "unknown", profile.ValInt: "int", profile.ValFloat: "float", profile.ValHashed: "hashed"}[s.Kind]
	if kind == "" {
		kind = "unknown"
	}
	out := &Sketch{Kind: kind, Bits: s.Bits, Total: s.Total, Distinct: s.Distinct(), Top: []TopValue{}}
	if s.Total > 0 && s.Kind != profile.ValHashed {
		out.Min, out.Max = view.Value(s, s.Min), view.Value(s, s.Max)
	}
	for _, t := range s.Heaviest() {
		share := 0.0
		if s.Total > 0 {
			share = float64(t.Count) / float64(s.Total)
		}
		out.Top = append(out.Top, TopValue{Raw: fmt.Sprintf("%#x", t.Value), Value: view.Value(s, t.Value), Count: t.Count, Err: t.Err, Share: share})
	}
	return out
}

// Build returns the document of p and its advice.
func Build(p *profile.Profile, advice []analysis.Advice) *Document {
	d := &Document{Format: Format, Version: Version, Job: p.Job, Synthetic: p.Synthetic, Interrupted: p.Interrupted, Items: p.MergedItems(), SealedRanks: p.SealedRanks(),
		Ranks: []Rank{}, Metrics: []Metric{}, Modules: []Module{}, Functions: []Function{}, Nodes: []Node{}, Kernels: []Kernel{},
		Temporal: []Temporal{}, Spatial: []Spatial{}, PCs: []PCStat{}, Objects: []Object{}, ObjectStats: []ObjectStat{}, Advice: []Advice{}}
	d.addRanks(p)
	d.addSymbols(p)
	d.addNodes(p)
	d.addKernels(p, advice)
	d.addRedundancy(p)
	d.addAdvice(p, advice)
	return d
}

// addRanks fills in the ranks and the GPUs.
func (d *Document) addRanks(p *profile.Profile) {
	for _, r := range p.SortedRanks() {
		ri := p.Ranks[r]
		d.Ranks = append(d.Ranks, Rank{Rank: r, Host: ri.Host, GPU: ri.GPU, GPUUUID: ri.GPUUUID, Driver: ri.Driver, CUDA: ri.CUDA,
			Mode: ri.Mode, Source: ri.Source, BlockPeriod: ri.BlockP, KernelPeriod: ri.KernelK, Launches: ri.Launches,
			LaunchesTraced: ri.LaunchesTraced, Blocks: ri.Blocks, BlocksTraced: ri.BlocksTraced, Records: ri.Records,
			Dropped: ri.Dropped, HostDropped: ri.HostDropped, SamplesDropped: ri.SamplesDropped, Batches: ri.Batches, ExitCode: ri.ExitCode,
			Sealed: p.Sealed(r), Incomplete: ri.Incomplete, Device: ri.Device, PCSampling: ri.PCSampling})
	}
	gs := analysis.GPUsOf(p)
	d.GPUs = []GPU{}
	for _, g := range gs.List {
		d.GPUs = append(d.GPUs, GPU{Host: g.Host, Device: g.Device, UUID: g.UUID, Name: g.Name, Ranks: g.Ranks,
			Sampled: orEmpty(g.Sampled), TimesOnly: orEmpty(g.TimesOnly)})
	}
}

// addSymbols fills in the metrics, modules and functions.
func (d *Document) addSymbols(p *profile.Profile) {
	for _, m := range view.Metrics(p) {
		unit := "count"
		switch m.Name() {
		case profile.GPUTime.Name():
			unit = "nanoseconds"
		case profile.AllocBytes.Name():
			unit = "bytes"
		}
		d.Metrics = append(d.Metrics, Metric{Name: m.Name(), Unit: unit, Description: view.MetricDescription(m.Name())})
	}
	hashes := make([]profile.ModuleHash, 0, len(p.Modules))
	for h := range p.Modules {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return hashes[i] < hashes[j] })
	for _, h := range hashes {
		m := p.Modules[h]
		d.Modules = append(d.Modules, Module{Hash: h.String(), Name: m.Name, Size: m.Size, SM: m.SM})
	}
	fids := make([]profile.FuncID, 0, len(p.Funcs))
	for id := range p.Funcs {
		fids = append(fids, id)
	}
	sort.Slice(fids, func(i, j int) bool { return fids[i] < fids[j] })
	for _, id := range fids {
		f := p.Funcs[id]
		d.Functions = append(d.Functions, Function{ID: hex(uint64(id)), Module: f.Module.String(), Name: f.Name, Demangled: symname.Demangle(f.Name)})
	}
}

// addNodes fills in the calling context tree.
func (d *Document) addNodes(p *profile.Profile) {
	inc := p.Inclusive()
	for _, id := range p.SortedNodeIDs() {
		n := p.Nodes[id]
		node := Node{ID: hex(uint64(id)), Kind: n.Frame.Kind.String(), Label: view.FrameLabel(n.Frame), Module: n.Frame.Module,
			Function: n.Frame.Function, Demangled: symname.Demangle(n.Frame.Function), File: n.Frame.File, Line: n.Frame.Line,
			Offset: n.Frame.Offset, Exclusive: values(n.Metrics), Inclusive: values(inc[id])}
		if id != profile.RootID {
			par := hex(uint64(n.Parent))
			node.Parent = &par
		}
		if ss := p.Summaries[id]; len(ss) > 0 {
			node.Summary = map[string]Summary{}
			for _, s := range ss {
				node.Summary[s.ID.Name()] = Summary{N: s.S.N, Sum: s.S.Sum, Min: s.S.Min, Max: s.S.Max, ArgMin: s.S.ArgMin,
					ArgMax: s.S.ArgMax, Mean: s.S.Mean(), Stddev: s.S.Stddev()}
			}
		}
		for _, r := range p.SortedRanks() {
			if vs := p.PerRank[r][id]; len(vs) > 0 {
				node.PerRank = append(node.PerRank, RankValues{Rank: r, Values: values(vs)})
			}
		}
		d.Nodes = append(d.Nodes, node)
	}
}

// addKernels fills in the GPU time split and the kernels with their
// imbalance.
func (d *Document) addKernels(p *profile.Profile, advice []analysis.Advice) {
	kernels := view.Kernels(p)
	view.Classify(p, kernels, advice)
	split := view.SplitTime(kernels)
	d.GPUTime = GPUTime{Total: split.Total, Waiting: split.Waiting, Autotuning: split.Phase[analysis.PhaseAutotuning],
		Compile: split.Phase[analysis.PhaseCompile], Compute: split.Compute}
	splits := view.SplitKernels(p, kernels)
	for _, k := range kernels {
		im := Imbalance{Min: k.Imbalance.Min, Mean: k.Imbalance.Mean, Max: k.Imbalance.Max, ArgMin: k.Imbalance.ArgMin,
			ArgMax: k.Imbalance.ArgMax, Ratio: k.Imbalance.Ratio(), Ranks: map[string]int64{}}
		for r, v := range k.Imbalance.PerRank {
			im.Ranks[fmt.Sprint(r)] = int64(v)
		}
		if sp, ok := splits[k.Node]; ok && k.Imbalance.Max > 0 {
			js := &GPUSplit{Where: sp.Where, Slowest: sp.Slowest, SlowestGPU: sp.SlowestGPU, Ratio: sp.Ratio, Within: sp.Within, Between: sp.Between,
				MeanRatio: sp.MeanRatio, LoadRatio: sp.LoadRatio, GPUs: []GPUShare{}}
			for _, g := range sp.Per {
				js.GPUs = append(js.GPUs, GPUShare{GPU: g.GPU, Ranks: g.Ranks, Sum: g.Sum, Mean: g.Mean, Max: g.Max, ArgMax: g.ArgMax,
					Within: g.Within, Heavy: orEmpty(g.Heavy)})
			}
			im.ByGPU = js
		}
		d.Kernels = append(d.Kernels, Kernel{Node: hex(uint64(k.Node)), Name: k.Full, Caller: k.CallerFull, TimeNS: k.Time,
			Waiting: k.Waiting, Phase: k.Phase,
			Samples: k.Samples, Loads: k.Loads, Stores: k.Stores, TemporalFraction: k.TemporalFraction,
			SpatialFraction: k.SpatialFraction, Imbalance: im})
	}
}

// addRedundancy fills in the temporal and spatial redundancy, the PC and
// object statistics and the data objects.
func (d *Document) addRedundancy(p *profile.Profile) {
	for _, pr := range view.TopPairs(p, 0) {
		d.Temporal = append(d.Temporal, Temporal{Context: hex(uint64(pr.Key.Context)), Access: pr.Key.Access.String(),
			Old: pc(p, pr.Key.Old), New: pc(p, pr.Key.New), Redundant: pr.Redundant, Accesses: pr.Accesses, Fraction: pr.Fraction})
	}
	skeys := make([]profile.SpatialKey, 0, len(p.Spatial))
	for k := range p.Spatial {
		skeys = append(skeys, k)
	}
	sort.Slice(skeys, func(i, j int) bool {
		a, b := skeys[i], skeys[j]
		if p.Spatial[a] != p.Spatial[b] {
			return p.Spatial[a] > p.Spatial[b]
		}
		return view.SpatialLess(a, b)
	})
	for _, k := range skeys {
		d.Spatial = append(d.Spatial, Spatial{Context: hex(uint64(k.Context)), Access: k.Access.String(), Object: hex(uint64(k.Object)),
			PC: pc(p, k.PC), Redundant: p.Spatial[k]})
	}
	pkeys := make([]profile.PCKey, 0, len(p.PCs))
	for k := range p.PCs {
		pkeys = append(pkeys, k)
	}
	sort.Slice(pkeys, func(i, j int) bool { return view.PCKeyLess(pkeys[i], pkeys[j]) })
	for _, k := range pkeys {
		s := p.PCs[k]
		d.PCs = append(d.PCs, PCStat{Context: hex(uint64(k.Context)), Access: k.Access.String(), PC: pc(p, k.PC), Accesses: s.Accesses, Values: sketch(s.Values)})
	}
	oids := make([]profile.ObjectID, 0, len(p.Objects))
	for id := range p.Objects {
		oids = append(oids, id)
	}
	sort.Slice(oids, func(i, j int) bool { return oids[i] < oids[j] })
	for _, id := range oids {
		o := p.Objects[id]
		d.Objects = append(d.Objects, Object{ID: hex(uint64(id)), Context: hex(uint64(o.Context)), Label: view.ObjectLabel(p, id),
			Size: o.Size, Count: o.Count, Space: o.Space})
	}
	for _, o := range view.TopObjects(p, 0) {
		d.ObjectStats = append(d.ObjectStats, ObjectStat{Context: hex(uint64(o.Context)), Object: hex(uint64(o.Object)),
			Access: o.Access.String(), Accesses: o.Accesses, Redundant: o.Redundant, Fraction: o.Fraction, Values: sketch(o.Values)})
	}
}

// addAdvice fills in the advice.
func (d *Document) addAdvice(p *profile.Profile, advice []analysis.Advice) {
	for _, a := range advice {
		ja := Advice{Kind: a.Kind, Category: a.Category, Hint: a.Hint, Importance: finite(a.Importance), Speedup: finite(a.Speedup),
			Hotspots: []Where{}, Ranks: a.Ranks, Evidence: a.Evidence, Phase: a.Phase, SpeedupNA: a.SpeedupNA, SampledRanks: a.SampledRanks}
		if ja.Ranks == nil {
			ja.Ranks = []int32{}
		}
		for _, w := range a.Hotspots {
			jw := Where{Context: hex(uint64(w.Context)), Kernel: w.Kernel, Function: w.Function, File: w.File, Line: w.Line, Loop: w.Loop, SASS: w.SASS}
			if w.PC != nil {
				x := pc(p, *w.PC)
				jw.PC = &x
			}
			if w.Object != nil {
				jw.Object = hex(uint64(*w.Object))
			}
			ja.Hotspots = append(ja.Hotspots, jw)
		}
		d.Advice = append(d.Advice, ja)
	}
}

func orEmpty(rs []int32) []int32 {
	if rs == nil {
		return []int32{}
	}
	return rs
}

// finite keeps NaN and infinities (which JSON cannot hold) out.
func finite(f float64) float64 {
	if f != f || f > 1e308 || f < -1e308 {
		return 0
	}
	return f
}

// Write writes the document of p and its advice to w (compact: profiles
// of real jobs run to many megabytes; pretty-print with jq if needed).
func Write(w io.Writer, p *profile.Profile, advice []analysis.Advice) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := json.NewEncoder(bw).Encode(Build(p, advice)); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteFile writes the document to file.
func WriteFile(file string, p *profile.Profile, advice []analysis.Advice) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := Write(f, p, advice); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
