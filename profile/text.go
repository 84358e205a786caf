package profile

import (
	"fmt"
	"sort"
	"strings"
)

// String renders the profile as canonical text: the same profile always
// renders the same way, so golden tests compare it (as pprof does with its
// .string files).
func (p *Profile) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job: %s\n", p.Job)
	if p.Synthetic {
		b.WriteString("source: synthetic\n")
	}
	if p.Interrupted != "" {
		fmt.Fprintf(&b, "interrupted: %s\n", p.Interrupted)
	}
	fmt.Fprintf(&b, "items: %d from %d ranks, %d sealed\n", p.MergedItems(), len(p.Items), p.SealedRanks())
	for _, r := range p.SortedRanks() {
		ri := p.Ranks[r]
		items := ""
		if bm := p.Items[r]; bm != nil {
			items = bm.String()
		}
		fmt.Fprintf(&b, "rank %d: host=%s gpu=%q mode=%s source=%s P=%d K=%d launches=%d/%d blocks=%d/%d records=%d dropped=%d+%d batches=%d exit=%d items=%s",
			r, ri.Host, ri.GPU, ri.Mode, ri.Source, ri.BlockP, ri.KernelK, ri.LaunchesTraced, ri.Launches,
			ri.BlocksTraced, ri.Blocks, ri.Records, ri.Dropped, ri.HostDropped, ri.Batches, ri.ExitCode, items)
		if ri.ReuseP > 1 {
			fmt.Fprintf(&b, " reuse_sampling=%d", ri.ReuseP)
		}
		if ri.SpatialLevel > 0 {
			fmt.Fprintf(&b, " spatial_level=%d", ri.SpatialLevel)
		}
		if ri.SamplesDropped != 0 {
			fmt.Fprintf(&b, " pc_samples_dropped=%d", ri.SamplesDropped)
		}
		if ri.Incomplete != "" {
			fmt.Fprintf(&b, " incomplete=%q", ri.Incomplete)
		}
		if ri.Device != "" {
			fmt.Fprintf(&b, " device=%s", ri.Device)
		}
		if ri.PCSampling != "" {
			fmt.Fprintf(&b, " pc_sampling=%q", ri.PCSampling)
		}
		if g := ri.Props; g.SMs != 0 {
			fmt.Fprintf(&b, " props=%d/%d/%d/%d/%d/%d/%d/%d/%d", g.SMs, g.ClockKHz, g.MemClockKHz, g.MemBusBits, g.L2Bytes, g.RegsPerSM, g.SharedPerSM, g.ThreadsPerSM, g.MemBytes)
		}
		b.WriteString("\n")
	}
	b.WriteString("tree:\n")
	ch := p.Children()
	var walk func(id NodeID, depth int)
	walk = func(id NodeID, depth int) {
		n := p.Nodes[id]
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), n.Frame)
		writeValues(&b, n.Metrics)
		if ss := p.Summaries[id]; len(ss) > 0 {
			for _, s := range sortSummaries(ss) {
				fmt.Fprintf(&b, " ~%s[n=%d min=%d@%d max=%d@%d sum=%d]", s.ID.Name(), s.S.N, s.S.Min, s.S.ArgMin, s.S.Max, s.S.ArgMax, s.S.Sum)
			}
		}
		b.WriteString("\n")
		kids := ch[id]
		sort.Slice(kids, func(i, j int) bool {
			a, c := p.Nodes[kids[i]].Frame.String(), p.Nodes[kids[j]].Frame.String()
			if a != c {
				return a < c
			}
			return kids[i] < kids[j]
		})
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	walk(RootID, 0)
	fname := func(pc PC) string {
		if f := p.Funcs[pc.Func]; f != nil {
			return fmt.Sprintf("%s+%#x", f.Name, pc.Offset)
		}
		return fmt.Sprintf("%#x+%#x", uint64(pc.Func), pc.Offset)
	}
	ctx := func(id NodeID) string {
		if n := p.Nodes[id]; n != nil {
			return n.Frame.Function
		}
		return fmt.Sprintf("%#x", uint64(id))
	}
	lines := []string{}
	for k, v := range p.Temporal {
		lines = append(lines, fmt.Sprintf("temporal %s %s: %s -> %s = %d", ctx(k.Context), k.Access, fname(k.Old), fname(k.New), v))
	}
	for k, v := range p.Spatial {
		lines = append(lines, fmt.Sprintf("spatial %s %s: object %#x @ %s = %d", ctx(k.Context), k.Access, uint64(k.Object), fname(k.PC), v))
	}
	for k, s := range p.PCs {
		lines = append(lines, fmt.Sprintf("pc %s %s %s: accesses=%d%s", ctx(k.Context), k.Access, fname(k.PC), s.Accesses, sketchString(s.Values)))
	}
	for k, s := range p.ObjStats {
		lines = append(lines, fmt.Sprintf("objstat %s %s object %#x: accesses=%d%s", ctx(k.Context), k.Access, uint64(k.Object), s.Accesses, sketchString(s.Values)))
	}
	for id, o := range p.Objects {
		lines = append(lines, fmt.Sprintf("object %#x: context=%#x size=%d count=%d space=%d", uint64(id), uint64(o.Context), o.Size, o.Count, o.Space))
	}
	for h, m := range p.Modules {
		lines = append(lines, fmt.Sprintf("module %v: %s size=%d sm=%d", h, m.Name, m.Size, m.SM))
	}
	for r, vals := range p.Open {
		for id, v := range vals {
			var vb strings.Builder
			writeValues(&vb, v)
			lines = append(lines, fmt.Sprintf("open rank %d %#x:%s", r, uint64(id), vb.String()))
		}
	}
	for r, vals := range p.PerRank {
		for id, v := range vals {
			var vb strings.Builder
			writeValues(&vb, v)
			lines = append(lines, fmt.Sprintf("perrank %d %#x:%s", r, uint64(id), vb.String()))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteString("\n")
	}
	return b.String()
}

func writeValues(b *strings.Builder, vs Values) {
	type nv struct {
		n string
		v uint64
	}
	out := make([]nv, 0, len(vs))
	for _, v := range vs {
		out = append(out, nv{v.ID.Name(), v.V})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	for _, x := range out {
		fmt.Fprintf(b, " %s=%d", x.n, x.v)
	}
}

func sortSummaries(ss Summaries) Summaries {
	out := append(Summaries(nil), ss...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID.Name() < out[j].ID.Name() })
	return out
}

func sketchString(s *ValueSketch) string {
	if s == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, " values{n=%d distinct~%.0f top=", s.Total, s.Distinct())
	for i, t := range s.Heaviest() {
		if i == 4 {
			break
		}
		fmt.Fprintf(&b, "%#x:%d ", t.Value, t.Count)
	}
	b.WriteString("}")
	return b.String()
}
