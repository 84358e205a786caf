package analysis

import (
	"fmt"
	"sort"

	"gpuprof/profile"
)

// Spread is how one metric at one node is spread over the job's ranks.
type Spread struct {
	Ranks uint64          // ranks in the job
	Raw   profile.Summary // over the ranks with a nonzero value
}

// Spread returns the spread of metric m at node id, from the sealed ranks'
// summaries and the open ranks' own values.
func (x *Index) Spread(id profile.NodeID, m profile.MetricID) Spread {
	s := x.P.Summaries[id].Get(m)
	for _, r := range sortedOpen(x.P) {
		if v := x.P.Open[r][id].Get(m); v != 0 {
			s = s.Merge(profile.One(r, v))
		}
	}
	return Spread{Ranks: uint64(len(x.P.Ranks)), Raw: s}
}

func sortedOpen(p *profile.Profile) []int32 {
	rs := make([]int32, 0, len(p.Open))
	for r := range p.Open {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// Mean is the mean over every rank of the job, absent ranks counting 0.
func (s Spread) Mean() float64 {
	if s.Ranks == 0 {
		return 0
	}
	return float64(s.Raw.Sum) / float64(s.Ranks)
}

// presentRanks returns the ranks with a nonzero value of m at id and the
// job's rank count; the list is exact only where per-rank values are kept
// (launch contexts), else nil.
func (x *Index) presentRanks(id profile.NodeID, m profile.MetricID) []int32 {
	var out []int32
	for _, r := range x.P.SortedRanks() {
		if vals, ok := x.P.PerRank[r]; ok {
			if vals[id].Get(m) != 0 {
				out = append(out, r)
			}
		}
	}
	return out
}

// KernelRanks returns the ranks kernel context k ran on, or nil if it ran
// on every rank (or the per-rank values are missing).
func (x *Index) KernelRanks(k profile.NodeID) []int32 {
	if len(x.P.PerRank) == 0 {
		return nil
	}
	var out []int32
	for _, r := range x.P.SortedRanks() {
		if len(x.P.PerRank[r][k]) > 0 {
			out = append(out, r)
		}
	}
	if len(out) == 0 || len(out) == len(x.P.Ranks) {
		return nil
	}
	return out
}

// nodeRanks narrows the ranks an instruction-level finding applies to: the
// kernel context's ranks, or, when the metric at the hotspot node is nonzero
// on one or two ranks only, those (the summaries keep their identities).
// It returns the list (nil = all) and a note for the evidence.
func (x *Index) nodeRanks(k, node profile.NodeID, m profile.MetricID) ([]int32, string) {
	ranks := x.KernelRanks(k)
	total := uint64(len(x.P.Ranks))
	if total <= 1 {
		return ranks, ""
	}
	raw := x.Spread(node, m).Raw
	if raw.N == 0 {
		return ranks, ""
	}
	note := fmt.Sprintf("%s on %d/%d ranks (max %d at rank %d, mean over those %.0f)", m.Name(), raw.N, total, raw.Max, raw.ArgMax, raw.Mean())
	switch {
	case raw.N == 1:
		return []int32{raw.ArgMax}, note
	case raw.N == 2 && raw.ArgMin != raw.ArgMax:
		a, b := raw.ArgMin, raw.ArgMax
		if a > b {
			a, b = b, a
		}
		return []int32{a, b}, note
	}
	return ranks, note
}
