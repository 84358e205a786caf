package profile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
)

// AsItem marks a profile built by one rank (through Add, Path, ...) as the
// single item (rank, seq): it sets Items and the rank's own open and
// per-rank values from the node values. A collector calls it once per batch.
func (p *Profile) AsItem(rank int32, seq uint32) error {
	if len(p.Items) != 0 {
		return fmt.Errorf("profile: AsItem(%d, %d): profile already holds %d items", rank, seq, p.MergedItems())
	}
	p.Items[rank] = roaring.BitmapOf(seq)
	p.Rank(rank)
	p.Open[rank], p.PerRank[rank] = p.nodeValues()
	p.sealIfComplete(rank)
	return nil
}

// nodeValues copies a one-rank profile's node values: all of them (the
// rank's open values) and those at launch contexts (its per-rank values).
func (p *Profile) nodeValues() (all, per map[NodeID]Values) {
	all, per = map[NodeID]Values{}, map[NodeID]Values{}
	for id, n := range p.Nodes {
		if len(n.Metrics) == 0 {
			continue
		}
		all[id] = n.Metrics.Clone()
		if IsLaunchContext(n.Frame.Kind) {
			per[id] = n.Metrics.Clone()
		}
	}
	return all, per
}

// OverlapError reports two profiles that share some but not all items, which
// no merge can combine without counting something twice.
type OverlapError struct {
	Rank   int32
	Shared uint64
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("profile: merge: rank %d: the profiles share %d items but neither contains the other", e.Rank, e.Shared)
}

// Merge adds o into p. Items of o already in p are not counted again: if
// every item of o is in p, Merge changes nothing; if o and p are disjoint,
// everything adds; a partial overlap is an *OverlapError and p is unchanged.
func (p *Profile) Merge(o *Profile) error {
	if o == nil {
		return nil
	}
	if p.Job != "" && o.Job != "" && p.Job != o.Job {
		return fmt.Errorf("profile: merge: job %q into job %q", o.Job, p.Job)
	}
	contained, disjoint := true, true
	for r, ob := range o.Items {
		pb := p.Items[r]
		if pb == nil {
			if !ob.IsEmpty() {
				contained = false
			}
			continue
		}
		and := pb.AndCardinality(ob)
		if and != ob.GetCardinality() {
			contained = false
		}
		if and != 0 {
			disjoint = false
			if !contained {
				return &OverlapError{Rank: r, Shared: and}
			}
		}
	}
	if contained {
		return nil
	}
	if !disjoint {
		for r, ob := range o.Items {
			if pb := p.Items[r]; pb != nil && pb.AndCardinality(ob) != 0 {
				return &OverlapError{Rank: r, Shared: pb.AndCardinality(ob)}
			}
		}
	}
	if p.Job == "" {
		p.Job = o.Job
	}
	p.Synthetic = p.Synthetic || o.Synthetic
	p.Interrupted = joinSet(p.Interrupted, o.Interrupted)
	for r, ob := range o.Items {
		if pb := p.Items[r]; pb != nil {
			pb.Or(ob)
		} else {
			p.Items[r] = ob.Clone()
		}
	}
	p.mergeNodes(o)
	p.mergeCode(o)
	p.mergeTemporal(o)
	p.mergePCStats(o)
	p.mergeObjStats(o)
	for r, ri := range o.Ranks {
		p.Rank(r).merge(ri)
	}
	p.mergeSummaries(o)
	p.mergeOpen(o)
	p.mergePerRank(o)
	for r := range o.Items {
		p.sealIfComplete(r)
	}
	return nil
}

// The table merges below are shared by Merge (one part) and MergeAll
// (each table on its own goroutine over the parts in order); each touches
// only its own tables of p.

func (p *Profile) mergeNodes(o *Profile) {
	for id, on := range o.Nodes {
		pn := p.Nodes[id]
		if pn == nil {
			pn = &Node{ID: on.ID, Parent: on.Parent, Frame: on.Frame}
			p.Nodes[id] = pn
		}
		pn.Metrics = pn.Metrics.AddAll(on.Metrics)
	}
}

// mergeCode merges modules, functions, data objects and spatial pairs.
func (p *Profile) mergeCode(o *Profile) {
	for h, m := range o.Modules {
		if _, ok := p.Modules[h]; !ok {
			mm := *m
			p.Modules[h] = &mm
		}
	}
	for id, f := range o.Funcs {
		if _, ok := p.Funcs[id]; !ok {
			ff := *f
			p.Funcs[id] = &ff
		}
	}
	for id, ob := range o.Objects {
		if pb, ok := p.Objects[id]; ok {
			pb.Count += ob.Count
		} else {
			c := *ob
			p.Objects[id] = &c
		}
	}
	for k, v := range o.Spatial {
		p.Spatial[k] += v
	}
}

func (p *Profile) mergeTemporal(o *Profile) {
	for k, v := range o.Temporal {
		p.Temporal[k] += v
	}
}

func (p *Profile) mergePCStats(o *Profile) {
	for k, s := range o.PCs {
		ps := p.PCStatOf(k)
		ps.Accesses += s.Accesses
		ps.Values = mergeSketch(ps.Values, s.Values)
	}
}

func (p *Profile) mergeObjStats(o *Profile) {
	for k, s := range o.ObjStats {
		ps := p.ObjStatOf(k)
		ps.Accesses += s.Accesses
		ps.Values = mergeSketch(ps.Values, s.Values)
	}
}

func (p *Profile) mergeSummaries(o *Profile) {
	for id, ss := range o.Summaries {
		p.Summaries[id] = p.Summaries[id].MergeAll(ss)
	}
}

func (p *Profile) mergeOpen(o *Profile) {
	for r, vals := range o.Open {
		addValues(p.Open, r, vals)
	}
}

func (p *Profile) mergePerRank(o *Profile) {
	for r, vals := range o.PerRank {
		addValues(p.PerRank, r, vals)
	}
}

func addValues(dst map[int32]map[NodeID]Values, r int32, vals map[NodeID]Values) {
	d := dst[r]
	if d == nil {
		d = make(map[NodeID]Values, len(vals))
		dst[r] = d
	}
	for id, v := range vals {
		d[id] = d[id].AddAll(v)
	}
}

func mergeSketch(a, b *ValueSketch) *ValueSketch {
	if b == nil {
		return a
	}
	if a == nil {
		return b.Clone()
	}
	a.Merge(b)
	return a
}

// merge adds o's items into ri. Every field comes out the same whatever
// the order the items arrive in: items of one rank that disagree (passes
// of one rank run on different nodes or GPUs) keep both values as a set.
func (ri *RankInfo) merge(o *RankInfo) {
	for _, f := range [...]struct {
		dst *string
		v   string
	}{
		{&ri.Host, o.Host}, {&ri.GPU, o.GPU}, {&ri.GPUUUID, o.GPUUUID}, {&ri.Driver, o.Driver},
		{&ri.CUDA, o.CUDA}, {&ri.Source, o.Source}, {&ri.Mode, o.Mode}, {&ri.Device, o.Device}, {&ri.PCSampling, o.PCSampling},
	} {
		*f.dst = joinSet(*f.dst, f.v)
	}
	// Passes of one rank may differ (PC sampling traces no blocks): the
	// coarsest period, whatever the order items arrive in.
	ri.BlockP = max(ri.BlockP, o.BlockP)
	ri.KernelK = max(ri.KernelK, o.KernelK)
	ri.ReuseP = max(ri.ReuseP, o.ReuseP)
	ri.SpatialLevel = max(ri.SpatialLevel, o.SpatialLevel)
	// One GPU's properties; passes that saw none leave them.
	of := o.Props.fields()
	for i, f := range ri.Props.fields() {
		*f = max(*f, *of[i])
	}
	ri.Props.MemBytes = max(ri.Props.MemBytes, o.Props.MemBytes)
	ri.Launches += o.Launches
	ri.LaunchesTraced += o.LaunchesTraced
	ri.Blocks += o.Blocks
	ri.BlocksTraced += o.BlocksTraced
	ri.Records += o.Records
	ri.Dropped += o.Dropped
	ri.HostDropped += o.HostDropped
	ri.SamplesDropped += o.SamplesDropped
	ri.Batches = max(ri.Batches, o.Batches)
	// A failing pass's exit code wins over a clean one (-1: unknown).
	if exitOrder(o.ExitCode) > exitOrder(ri.ExitCode) {
		ri.ExitCode = o.ExitCode
	}
	ri.Incomplete = joinSet(ri.Incomplete, o.Incomplete)
}

// exitOrder ranks exit codes: unknown, then success, then failures by
// code.
func exitOrder(c int32) int64 {
	switch c {
	case -1:
		return -1
	case 0:
		return 0
	}
	return 1 + int64(uint32(c))
}

// joinSet joins two '+'-separated sets, sorted, so the result does not
// depend on merge order.
func joinSet(a, b string) string {
	if b == "" || a == b {
		return a
	}
	if a == "" {
		return b
	}
	set := map[string]bool{}
	for _, s := range strings.Split(a+"+"+b, "+") {
		if s != "" {
			set[s] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, "+")
}

// Sealed reports whether every item of rank r is merged: its done item
// (sequence Batches) and data items 0..Batches-1.
func (p *Profile) Sealed(r int32) bool {
	ri := p.Ranks[r]
	b := p.Items[r]
	if ri == nil || b == nil || ri.Batches < 0 {
		return false
	}
	n := uint64(ri.Batches) + 1
	return b.GetCardinality() == n && uint64(b.Maximum()) == n-1
}

// sealIfComplete folds a complete rank's open values into the summaries.
func (p *Profile) sealIfComplete(r int32) {
	if _, open := p.Open[r]; !open || !p.Sealed(r) {
		return
	}
	p.seal(r)
}

func (p *Profile) seal(r int32) {
	for id, v := range p.Open[r] {
		p.Summaries[id] = p.Summaries[id].addRank(r, v)
	}
	delete(p.Open, r)
}

// SealAll seals every rank still open, marking it incomplete with reason.
// The root calls it when a rank misses its deadline: the rank's data so far
// counts, and the report names it.
func (p *Profile) SealAll(reason string) []int32 {
	var rs []int32
	for r := range p.Open {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	for _, r := range rs {
		p.Rank(r).Incomplete = joinSet(p.Rank(r).Incomplete, reason)
		p.seal(r)
	}
	return rs
}

// SealedRanks counts the ranks folded into the summaries.
func (p *Profile) SealedRanks() uint64 {
	var n uint64
	for r := range p.Items {
		if _, open := p.Open[r]; !open {
			n++
		}
	}
	return n
}

// Clone returns a deep copy of p (through its encoding, which is exact).
func (p *Profile) Clone() *Profile {
	q, err := Decode(p.Encode())
	if err != nil {
		panic("profile: Clone: " + err.Error()) // an encoding we wrote must decode
	}
	return q
}

// DropMetric removes metric m everywhere in p. A collector uses it on a
// pass whose values of m are not to be trusted beside another pass's (the
// kernel times of an instrumented pass, when a CUPTI pass measured them).
func (p *Profile) DropMetric(m MetricID) {
	p.DropMetrics(func(id MetricID) bool { return id == m })
}

// DropMetrics removes every metric for which drop holds, everywhere in p.
func (p *Profile) DropMetrics(drop func(MetricID) bool) {
	clean := func(vs Values) Values {
		out := vs[:0:0]
		for _, v := range vs {
			if !drop(v.ID) {
				out = append(out, v)
			}
		}
		if len(out) == len(vs) {
			return vs
		}
		return out
	}
	for _, n := range p.Nodes {
		n.Metrics = clean(n.Metrics)
	}
	for _, t := range []map[int32]map[NodeID]Values{p.Open, p.PerRank} {
		for _, vals := range t {
			for id, v := range vals {
				vals[id] = clean(v)
			}
		}
	}
	for id, ss := range p.Summaries {
		var keep Summaries
		for _, s := range ss {
			if !drop(s.ID) {
				keep = append(keep, s)
			}
		}
		if len(keep) != len(ss) {
			p.Summaries[id] = keep
		}
	}
}
