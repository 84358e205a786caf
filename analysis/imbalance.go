package analysis

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"gpuprof/profile"
	"gpuprof/symname"
)

// ImbalanceThresholds decide when a kernel context's spread over ranks is
// reported (docs/insights.md).
type ImbalanceThresholds struct {
	MinRatio float64 // max/mean GPU time over the job's ranks
	MinShare float64 // the kernel context's share of the job's GPU time
	Heavy    float64 // ranks above Heavy × mean are named
}

// DefaultImbalance: a 10% excess on the slowest rank of a kernel taking at
// least 1% of the job's GPU time.
var DefaultImbalance = ImbalanceThresholds{MinRatio: 1.1, MinShare: 0.01, Heavy: 1.1}

// Imbalance reports kernel contexts whose GPU time differs across ranks:
// the slowest rank's time over the mean of all ranks (absent ranks count
// zero). If the work were balanced the slowest rank's time in the kernel
// would drop to the mean, so max/mean is the estimated speedup of the
// kernel on the job's critical path.
func Imbalance(x *Index, th ImbalanceThresholds) []Advice {
	var out []Advice
	if len(x.P.Ranks) < 2 {
		return nil
	}
	gpus := GPUsOf(x.P)
	for _, k := range x.Kernels {
		if x.KernelShare(k) < th.MinShare {
			continue
		}
		st := x.Stats(k)
		ratio := st.Time.Imbalance()
		if ratio < th.MinRatio {
			continue
		}
		mean := st.Time.Mean()
		var heavy []int32
		var per []string
		for _, r := range x.P.SortedRanks() {
			v := x.P.PerRank[r][k].Get(profile.GPUTime)
			if float64(v) > th.Heavy*mean {
				heavy = append(heavy, r)
			}
			if len(per) < 16 {
				per = append(per, fmt.Sprintf("%d:%s", r, fmtNs(float64(v))))
			}
		}
		if len(heavy) == 0 {
			heavy = []int32{st.Time.Raw.ArgMax}
		}
		sort.Slice(heavy, func(i, j int) bool { return heavy[i] < heavy[j] })
		w := x.Where(k)
		w.Amount = float64(st.Time.Raw.Max)
		name := symname.Short(x.P.Nodes[k].Frame.Function)
		cause := "longer instances"
		if lr := st.Launches.Imbalance(); lr >= th.MinRatio && lr >= 0.8*ratio {
			cause = "more instances"
		}
		a := Advice{
			Kind: "load imbalance", Category: CatImbalance,
			Hint: fmt.Sprintf("rank%s %s spend%s %.2f× the mean time of all ranks in %s (%s): rebalance the work between ranks (domain decomposition, work stealing) so the others do not wait.",
				plural(len(heavy)), joinRanks(heavy), map[bool]string{true: "", false: "s"}[len(heavy) > 1], ratio, name, cause),
			Importance:  (float64(st.Time.Raw.Max) - mean) / float64(st.Time.Raw.Max),
			Speedup:     ratio,
			Hotspots:    []Where{w},
			Ranks:       heavy,
			KernelShare: x.KernelShare(k),
		}
		a.Evidence = fmt.Sprintf("gpu.time_ns over %d ranks: max %s at rank %d, mean %s, min %s; launches max/mean %.2f; per-instance mean %s (over ranks' means: min %s, max %s); per rank: %s",
			st.Ranks, fmtNs(float64(st.Time.Raw.Max)), st.Time.Raw.ArgMax, fmtNs(mean), fmtNs(minOver(st, x, k)),
			st.Launches.Imbalance(), fmtNs(st.InstanceMean), fmtNs(st.InstanceMin), fmtNs(st.InstanceMax), strings.Join(per, " "))
		// Ranks sharing GPUs: is it the ranks of one GPU or the GPUs?
		if sp, ok := SplitByGPU(x.P, gpus, k, th.MinRatio, th.Heavy); ok && sp.Where != "" {
			a.Hint += " " + sp.Sentence(gpus)
			if h := sp.HeavyOn(gpus); h != "" {
				a.Hint += " Heavy: " + h + "."
			}
			if !sp.OneRankPerGPU {
				a.Evidence += "; " + sp.Evidence(gpus)
			}
		}
		if note := sampledHeavy(gpus, heavy); note != "" {
			a.Evidence += "; " + note
		}
		if n := hostTimedSharing(x.P, gpus); n > 1 {
			// The value-tracing pass times kernels on the host around
			// instrumented launches: with several ranks time-sliced on a
			// GPU those times measure the sharing as much as the kernel
			// (docs/scale.md: a 68x spread at 32 ranks a GPU, against 1.7x
			// from CUPTI's activity records), so the ranks they name are
			// not the heavy ones.
			a.Speedup, a.SpeedupNA = 0, fmt.Sprintf("kernel times of the value-tracing pass are host-timed around instrumented launches, and up to %d ranks share a GPU: they measure the GPU's sharing as much as the kernels", n)
			a.Hint = fmt.Sprintf("%s's times vary %.2f× across ranks, but they cannot tell which ranks are heavy: the value-tracing pass times kernels on the host around instrumented launches, and up to %d ranks share a GPU. Measure the imbalance with --mode pcsampling or all (CUPTI's kernel records).", name, ratio, n)
			a.Ranks = nil
		}
		out = append(out, a)
	}
	return out
}

// sampledHeavy warns when heavy ranks were PC-sampled while other ranks
// gave kernel times only: sampling (serialized, per kernel) lengthens the
// sampled ranks' kernels, so their times and the others' are not measured
// alike ("" otherwise).
func sampledHeavy(gs GPUs, heavy []int32) string {
	sampled := map[int32]bool{}
	only := 0
	for _, g := range gs.List {
		for _, r := range g.Sampled {
			sampled[r] = true
		}
		only += len(g.TimesOnly)
	}
	var hs []int32
	for _, r := range heavy {
		if sampled[r] {
			hs = append(hs, r)
		}
	}
	if len(hs) == 0 || only == 0 {
		return ""
	}
	return fmt.Sprintf("heavy rank%s %s PC-sampled %s GPU%s, which lengthens kernels, while %d rank%s gave kernel times only: compare with a pass without PC sampling before rebalancing",
		plural(len(hs)), joinRanks(hs), map[bool]string{true: "their", false: "its"}[len(hs) > 1], plural(len(hs)), only, plural(only))
}

// minOver is the smallest time of any rank, 0 if some rank did not run the
// kernel.
func minOver(st KernelStats, x *Index, k profile.NodeID) float64 {
	if st.Time.Raw.N < st.Ranks {
		return 0
	}
	return float64(st.Time.Raw.Min)
}

func fmtNs(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3gs", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3gms", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gus", v/1e3)
	}
	return fmt.Sprintf("%.0fns", v)
}

// GPUShare is one GPU's part of a kernel context's time over ranks.
type GPUShare struct {
	GPU    int     // index in GPUs.List
	Ranks  int     // ranks on the GPU
	Sum    uint64  // their time in the kernel context
	Mean   float64 // Sum / Ranks
	Max    uint64
	ArgMax int32   // lowest rank on ties
	Within float64 // Max / Mean over the GPU's ranks (0 without time)
	Heavy  []int32 // the GPU's ranks above the threshold × the job's mean
}

// GPUSplit divides a kernel context's imbalance over ranks between the
// ranks sharing a GPU and the GPUs (docs/advice.md, "Imbalance within and
// between GPUs"). With t_r a rank's time, μ the mean over all ranks and
// m_g the mean of GPU g's ranks, the slowest rank s on GPU g* gives
//
//	t_s/μ = (t_s/m_g*) × (m_g*/μ) = Within × Between
//
// exactly: the first factor is the spread among the ranks of one GPU, the
// second that GPU's excess over the job.
type GPUSplit struct {
	Per           []GPUShare // in GPUs.List order
	Mean          float64    // μ, absent ranks counting zero
	Slowest       int32
	SlowestGPU    int
	Ratio         float64 // t_s / μ
	Within        float64 // t_s / m_g*
	Between       float64 // m_g* / μ
	MeanRatio     float64 // max_g m_g / μ: the GPU whose ranks take longest on average
	LoadRatio     float64 // max_g Sum_g / mean_g Sum_g: the GPUs' load (time of all their ranks)
	WithinMax     float64 // max_g Within_g over the GPUs with two ranks or more
	WithinGPU     bool    // WithinMax ≥ the threshold
	BetweenGPUs   bool    // MeanRatio ≥ the threshold
	OneRankPerGPU bool
	Where         string // "within GPUs", "between GPUs", "within and between GPUs", or "" (balanced)
	minRatio      float64
}

// SplitByGPU splits kernel context k's GPU time in p (gs = GPUsOf(p)) over ranks by GPU (ok
// false when the ranks' GPUs are not known, or there is one rank on one
// GPU). minRatio decides which part counts as imbalanced, heavy names the
// ranks above heavy × μ.
func SplitByGPU(p *profile.Profile, gs GPUs, k profile.NodeID, minRatio, heavy float64) (GPUSplit, bool) {
	if !gs.Grouped() {
		return GPUSplit{}, false
	}
	sp := GPUSplit{Per: make([]GPUShare, len(gs.List)), SlowestGPU: -1, Slowest: -1, OneRankPerGPU: !gs.Shared(), minRatio: minRatio}
	var total uint64
	var n int
	var maxT uint64
	for i, g := range gs.List {
		s := &sp.Per[i]
		s.GPU, s.Ranks, s.ArgMax = i, len(g.Ranks), -1
		for _, r := range g.Ranks {
			t := p.PerRank[r][k].Get(profile.GPUTime)
			s.Sum += t
			if s.ArgMax < 0 || t > s.Max {
				s.Max, s.ArgMax = t, r
			}
			if sp.Slowest < 0 || t > maxT || (t == maxT && r < sp.Slowest) {
				maxT, sp.Slowest, sp.SlowestGPU = t, r, i
			}
		}
		total += s.Sum
		n += len(g.Ranks)
		if s.Ranks > 0 {
			s.Mean = float64(s.Sum) / float64(s.Ranks)
		}
		if s.Mean > 0 {
			s.Within = float64(s.Max) / s.Mean
		}
	}
	if n == 0 || total == 0 {
		return sp, true
	}
	sp.Mean = float64(total) / float64(n)
	gpuMean := float64(total) / float64(len(gs.List))
	for i, g := range gs.List {
		s := &sp.Per[i]
		for _, r := range g.Ranks {
			if float64(p.PerRank[r][k].Get(profile.GPUTime)) > heavy*sp.Mean {
				s.Heavy = append(s.Heavy, r)
			}
		}
		sp.MeanRatio = math.Max(sp.MeanRatio, s.Mean/sp.Mean)
		sp.LoadRatio = math.Max(sp.LoadRatio, float64(s.Sum)/gpuMean)
		if s.Ranks > 1 {
			sp.WithinMax = math.Max(sp.WithinMax, s.Within)
		}
	}
	g := sp.Per[sp.SlowestGPU]
	sp.Ratio = float64(maxT) / sp.Mean
	sp.Within = g.Within
	sp.Between = g.Mean / sp.Mean
	sp.WithinGPU = sp.WithinMax >= minRatio
	sp.BetweenGPUs = sp.MeanRatio >= minRatio
	switch {
	case sp.WithinGPU && sp.BetweenGPUs:
		sp.Where = "within and between GPUs"
	case sp.WithinGPU:
		sp.Where = "within GPUs"
	case sp.BetweenGPUs:
		sp.Where = "between GPUs"
	}
	return sp, true
}

// HeavyOn names the heavy ranks with their GPUs, by lowest rank: "rank
// 1 on GPU 1, rank 2 on GPU 0" (at most 8 GPUs).
func (sp GPUSplit) HeavyOn(gs GPUs) string {
	var per []GPUShare
	for _, s := range sp.Per {
		if len(s.Heavy) > 0 {
			per = append(per, s)
		}
	}
	sort.Slice(per, func(i, j int) bool { return per[i].Heavy[0] < per[j].Heavy[0] })
	var parts []string
	for i, s := range per {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and on %d more GPUs", len(per)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("rank%s %s on %s", plural(len(s.Heavy)), RankSet(s.Heavy), gs.Label(s.GPU)))
	}
	return strings.Join(parts, ", ")
}

// Sentence says where the imbalance lies, in words the report and the
// advice share.
func (sp GPUSplit) Sentence(gs GPUs) string {
	var within []string
	for _, s := range sp.Per {
		if s.Ranks > 1 && s.Within >= sp.minRatio {
			within = append(within, fmt.Sprintf("%s %.2f", gs.Label(s.GPU), s.Within))
		}
	}
	switch {
	case sp.OneRankPerGPU:
		return fmt.Sprintf("One rank per GPU, so the imbalance is between GPUs (max/mean of the GPUs' times %.2f).", sp.Ratio)
	case sp.Where == "within GPUs":
		return fmt.Sprintf("The imbalance is among the ranks sharing a GPU (max/mean within %s), not between GPUs (their mean per rank: max/mean %.2f).",
			strings.Join(within, ", "), sp.MeanRatio)
	case sp.Where == "between GPUs":
		return fmt.Sprintf("The imbalance is between GPUs: the ranks of %s take %.2f× the job's mean (load max/mean over the GPUs %.2f), while the ranks sharing a GPU agree (max/mean within at most %.2f).",
			gs.Label(sp.SlowestGPU), sp.Between, sp.LoadRatio, sp.WithinMax)
	case sp.Where != "":
		return fmt.Sprintf("The imbalance is both within and between GPUs: the slowest rank's %.2f× = %.2f within %s × %.2f for that GPU's mean over the job's.",
			sp.Ratio, sp.Within, gs.Label(sp.SlowestGPU), sp.Between)
	}
	return ""
}

// Evidence gives the per-GPU numbers behind Sentence (at most 8 GPUs).
func (sp GPUSplit) Evidence(gs GPUs) string {
	var per []string
	for i, s := range sp.Per {
		if i == 8 {
			per = append(per, fmt.Sprintf("%d more GPUs", len(sp.Per)-i))
			break
		}
		per = append(per, fmt.Sprintf("%s: %d rank%s, sum %s, mean %s, max %s at rank %d, within %.2f",
			gs.Label(s.GPU), s.Ranks, plural(s.Ranks), fmtNs(float64(s.Sum)), fmtNs(s.Mean), fmtNs(float64(s.Max)), s.ArgMax, s.Within))
	}
	return fmt.Sprintf("per GPU: %s; between GPUs: mean per rank max/mean %.2f, GPU load max/mean %.2f; slowest rank %d: %.2f = %.2f within %s × %.2f between",
		strings.Join(per, "; "), sp.MeanRatio, sp.LoadRatio, sp.Slowest, sp.Ratio, sp.Within, gs.Label(sp.SlowestGPU), sp.Between)
}

// hostTimedSharing returns the most ranks that share one GPU when every
// rank's kernel times come from the value-tracing pass alone (host-timed),
// and 0 otherwise.
func hostTimedSharing(p *profile.Profile, gpus GPUs) int {
	for _, ri := range p.Ranks {
		if ri.Mode != "redundancy" {
			return 0
		}
	}
	most := 0
	for _, g := range gpus.List {
		most = max(most, len(g.Ranks))
	}
	return most
}

// Imbalance is max/mean over all ranks (1 when balanced, 0 when absent).
func (s Spread) Imbalance() float64 {
	if m := s.Mean(); m > 0 {
		return float64(s.Raw.Max) / m
	}
	return 0
}
