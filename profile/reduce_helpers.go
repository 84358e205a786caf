package profile

import "sort"

// Helpers for the reduction tree, which owns a subset of a job's ranks per
// node and must seal only those.

// RankFinished reports whether rank r needs nothing more: it is sealed
// (every item merged), or it was sealed as incomplete (SealRanks, SealAll).
func (p *Profile) RankFinished(r int32) bool {
	if p.Sealed(r) {
		return true
	}
	ri := p.Ranks[r]
	_, open := p.Open[r]
	return ri != nil && ri.Incomplete != "" && !open
}

// SealRanks seals each listed rank that is not finished, marking it
// incomplete with the reason reasons(r) gives: a rank with items keeps
// them and is folded into the summaries as SealAll does; a rank with no
// items at all gets a provenance entry saying why, so the report can name
// it. It returns the ranks it sealed, ascending. Reasons are joined with
// '+', so they should not contain one.
func (p *Profile) SealRanks(ranks []int32, reason func(r int32) string) []int32 {
	rs := append([]int32(nil), ranks...)
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	var sealed []int32
	for i, r := range rs {
		if i > 0 && rs[i-1] == r || p.RankFinished(r) {
			continue
		}
		ri := p.Rank(r)
		ri.Incomplete = joinSet(ri.Incomplete, reason(r))
		if _, open := p.Open[r]; open {
			p.seal(r)
		}
		sealed = append(sealed, r)
	}
	return sealed
}

// IncompleteRanks lists the ranks marked incomplete, ascending.
func (p *Profile) IncompleteRanks() []int32 {
	var rs []int32
	for r, ri := range p.Ranks {
		if ri.Incomplete != "" {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// NewSized returns an empty profile of job whose tables are allocated for
// the merge of parts, so merging them does not grow (and rehash) every map
// on the way. SPMD ranks share most contexts, so the size is the largest
// part's plus an eighth of the others'.
func NewSized(job string, parts ...*Profile) *Profile {
	hint := func(n func(*Profile) int) int {
		largest, sum := 0, 0
		for _, q := range parts {
			if q != nil {
				largest, sum = max(largest, n(q)), sum+n(q)
			}
		}
		return largest + (sum-largest)/8
	}
	p := New(job)
	p.Nodes = make(map[NodeID]*Node, hint(func(q *Profile) int { return len(q.Nodes) }))
	p.Nodes[RootID] = &Node{ID: RootID, Parent: RootID, Frame: Frame{Kind: KindRoot}}
	p.Temporal = make(map[TemporalKey]uint64, hint(func(q *Profile) int { return len(q.Temporal) }))
	p.Spatial = make(map[SpatialKey]uint64, hint(func(q *Profile) int { return len(q.Spatial) }))
	p.PCs = make(map[PCKey]*PCStat, hint(func(q *Profile) int { return len(q.PCs) }))
	p.ObjStats = make(map[ObjectKey]*ObjectStat, hint(func(q *Profile) int { return len(q.ObjStats) }))
	p.Summaries = make(map[NodeID]Summaries, hint(func(q *Profile) int { return len(q.Summaries) + len(q.Nodes)/2 }))
	return p
}
