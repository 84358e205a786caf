package main

import (
	"fmt"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// rankGen makes the data items of simulated ranks cheaply. Generating a
// realistic rank from scratch (proftest.Item) costs about 0.4 s of CPU, and
// a 4096-rank run would spend most of its time there; instead the SPMD
// part is generated once per simulator process (one template rank) and each
// rank is derived from it:
//   - every metric value and pair count is the template's scaled by a
//     factor of (rank, key), so no two ranks carry the same numbers;
//   - the rank-specific kernels (the shape's RankUnique percent, launched
//     from a host frame named after the rank) hang under the rank's own
//     host frame, so their whole GPU subtree and their pairs are the rank's
//     own contexts, as proftest.Item makes them. With variants > 0 ranks
//     share those paths by class (rank mod variants), as boundary and
//     interior ranks of a real SPMD code do.
type rankGen struct {
	job      string
	base     *profile.Profile
	baseFn   string          // the template's rank-specific host frame name
	order    []*profile.Node // template nodes, parents first
	variants int
}

func newRankGen(job string, s proftest.Shape, variants int) *rankGen {
	const baseRank = 1 << 20 // a rank no job here has, so its name is unique
	g := &rankGen{job: job, base: proftest.Item(job, 1, s, baseRank, 0, false, 0), baseFn: fmt.Sprintf("rank_path_%d", baseRank), variants: variants}
	ch := g.base.Children()
	var walk func(id profile.NodeID)
	walk = func(id profile.NodeID) {
		for _, c := range ch[id] {
			g.order = append(g.order, g.base.Nodes[c])
			walk(c)
		}
	}
	walk(profile.RootID)
	return g
}

// mix is a cheap deterministic hash of (rank, key).
func mix(r int32, k uint64) uint64 {
	x := k ^ uint64(r+1)*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return x
}

// scale returns v scaled by a factor in [0.5, 1.5) chosen by (r, k); a
// nonzero value stays nonzero.
func scale(r int32, k, v uint64) uint64 {
	if v == 0 {
		return 0
	}
	return max(v*(8+mix(r, k)%16)/16, 1)
}

// item returns data item (rank r, seq 0).
func (g *rankGen) item(r int32) *profile.Profile {
	b := g.base
	label := fmt.Sprintf("rank_path_%d", r)
	if g.variants > 0 {
		label = fmt.Sprintf("rank_path_class_%d", int(r)%g.variants)
	}
	q := profile.New(g.job)
	q.Synthetic = true
	// Node ids: the same as the template's except under the rank-specific
	// host frame, where they are recomputed from the rank's frame down.
	moved := map[profile.NodeID]profile.NodeID{}
	newID := func(id profile.NodeID) profile.NodeID {
		if m, ok := moved[id]; ok {
			return m
		}
		return id
	}
	q.Nodes = make(map[profile.NodeID]*profile.Node, len(b.Nodes))
	q.Nodes[profile.RootID] = &profile.Node{ID: profile.RootID, Parent: profile.RootID, Frame: profile.Frame{Kind: profile.KindRoot}}
	for _, n := range g.order {
		parent, f := newID(n.Parent), n.Frame
		id := n.ID
		if f.Kind == profile.KindHostFrame && f.Function == g.baseFn {
			f.Function = label
		}
		if parent != n.Parent || f != n.Frame {
			id = profile.ChildID(parent, f)
			moved[n.ID] = id
		}
		vs := make(profile.Values, len(n.Metrics))
		for i, v := range n.Metrics {
			vs[i] = profile.MV{ID: v.ID, V: scale(r, uint64(id)+uint64(v.ID), v.V)}
		}
		q.Nodes[id] = &profile.Node{ID: id, Parent: parent, Frame: f, Metrics: vs}
	}
	q.Modules, q.Funcs = b.Modules, b.Funcs // read only
	for id, o := range b.Objects {
		c := *o
		c.Context = newID(o.Context)
		q.Objects[id] = &c
	}
	q.Temporal = make(map[profile.TemporalKey]uint64, len(b.Temporal))
	for k, v := range b.Temporal {
		k.Context = newID(k.Context)
		q.Temporal[k] = scale(r, uint64(k.Context)^uint64(k.Old.Func)+uint64(k.Old.Offset)<<20+uint64(k.New.Offset), v)
	}
	for k, v := range b.Spatial {
		k.Context = newID(k.Context)
		q.Spatial[k] = scale(r, uint64(k.Object)+uint64(k.PC.Offset), v)
	}
	q.PCs = make(map[profile.PCKey]*profile.PCStat, len(b.PCs))
	for k, s := range b.PCs {
		k.Context = newID(k.Context)
		// The value sketch is shared: items are only encoded.
		q.PCs[k] = &profile.PCStat{Accesses: scale(r, uint64(k.PC.Offset)+uint64(k.Context), s.Accesses), Values: s.Values}
	}
	for k, s := range b.ObjStats {
		k.Context = newID(k.Context)
		q.ObjStats[k] = &profile.ObjectStat{Accesses: scale(r, uint64(k.Object), s.Accesses), Values: s.Values}
	}
	for _, ri := range b.Ranks {
		c := *ri
		c.Rank = r
		c.Host = fmt.Sprintf("node%04d", r/8)
		c.Batches, c.ExitCode = -1, -1
		q.Ranks[r] = &c
	}
	if err := q.AsItem(r, 0); err != nil {
		panic(err) // q is fresh: it holds no items
	}
	return q
}
