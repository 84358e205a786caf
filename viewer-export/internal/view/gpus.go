package view

import (
	"fmt"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
)

// The reports group ranks by host and GPU (host → GPU → ranks) and say
// which ranks' GPUs were PC-sampled: CUPTI samples one process per GPU,
// so with ranks sharing a GPU the others give kernel times only, by
// policy and not as a failure (docs/inject.md "One process per GPU").

// GPURow is one GPU of the job as the reports list it.
type GPURow struct {
	Index    int    // in analysis.GPUs.List
	Host     string // the host
	Device   string // CUDA ordinal, "?" if unknown
	UUID     string // short UUID (analysis.ShortUUID)
	Name     string
	Label    string // analysis.GPUs.Label
	Ranks    string // RankSet
	NRanks   int
	Sampling string // SamplingOf
}

// GPURows lists the job's GPUs with their ranks.
func GPURows(gs analysis.GPUs) []GPURow {
	rows := make([]GPURow, len(gs.List))
	for i, g := range gs.List {
		dev := g.Device
		if dev == "" {
			dev = "?"
		}
		rows[i] = GPURow{Index: i, Host: g.Host, Device: dev, UUID: analysis.ShortUUID(g.UUID), Name: g.Name, Label: gs.Label(i),
			Ranks: RankSet(g.Ranks), NRanks: len(g.Ranks), Sampling: SamplingOf(g)}
	}
	return rows
}

// SamplingOf says which of a GPU's ranks were PC-sampled: "rank 0 sampled,
// ranks 2,4 kernel times only", or "" when none of its ranks ran a
// PC-sampling pass (or the profile predates the record).
func SamplingOf(g analysis.GPU) string {
	var parts []string
	if n := len(g.Sampled); n > 0 {
		parts = append(parts, fmt.Sprintf("%s %s sampled", plural(n, "rank", "ranks"), RankSet(g.Sampled)))
	}
	if n := len(g.TimesOnly); n > 0 {
		parts = append(parts, fmt.Sprintf("%s %s kernel times only", plural(n, "rank", "ranks"), RankSet(g.TimesOnly)))
	}
	return strings.Join(parts, ", ")
}

// RankSampling is one rank's PC-sampling state in a word or two:
// "sampled", "kernel times only" (another process sampled its GPU) or "".
func RankSampling(ri *profile.RankInfo) string {
	switch s, t := analysis.PCSampled(ri); {
	case s:
		return "sampled"
	case t:
		return "kernel times only"
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// RankSet writes ranks compactly (analysis.RankSet).
func RankSet(rs []int32) string { return analysis.RankSet(rs) }

// GPUSummary is the provenance's line on GPUs: "2 GPUs on 1 host, 2
// ranks each" ("" when the ranks' GPUs are not known).
func GPUSummary(gs analysis.GPUs) string {
	if !gs.Known || len(gs.List) == 0 {
		return ""
	}
	lo, hi := len(gs.List[0].Ranks), 0
	for _, g := range gs.List {
		lo, hi = min(lo, len(g.Ranks)), max(hi, len(g.Ranks))
	}
	per := fmt.Sprintf("%d %s each", lo, plural(lo, "rank", "ranks"))
	if lo != hi {
		per = fmt.Sprintf("%d to %d ranks each", lo, hi)
	}
	return fmt.Sprintf("%d %s on %d %s, %s", len(gs.List), plural(len(gs.List), "GPU", "GPUs"), gs.Hosts, plural(gs.Hosts, "host", "hosts"), per)
}

// SplitKernels splits each kernel context's time over ranks by GPU
// (analysis.SplitByGPU with the default thresholds); nil when the ranks'
// GPUs say nothing more than the rank list.
func SplitKernels(p *profile.Profile, ks []Kernel) map[profile.NodeID]analysis.GPUSplit {
	gs := analysis.GPUsOf(p)
	if !gs.Grouped() {
		return nil
	}
	th := analysis.DefaultImbalance
	out := map[profile.NodeID]analysis.GPUSplit{}
	for _, k := range ks {
		if sp, ok := analysis.SplitByGPU(p, gs, k.Node, th.MinRatio, th.Heavy); ok {
			out[k.Node] = sp
		}
	}
	return out
}
