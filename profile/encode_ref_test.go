package profile_test

import (
	"bytes"
	"encoding/binary"
	"sort"

	"gpuprof/profile"
)

// The encoder as it was before it was made parallel, kept verbatim (names
// prefixed with ref) so that tests can check the new one writes the same
// bytes.

type refEnc struct {
	b       []byte
	metrics map[profile.MetricID]uint64 // metric id -> index in the sorted name table
}

func (e *refEnc) u(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *refEnc) i(v int64)    { e.b = binary.AppendVarint(e.b, v) }
func (e *refEnc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *refEnc) s(v string)   { e.u(uint64(len(v))); e.b = append(e.b, v...) }

func (e *refEnc) values(vs profile.Values) {
	// Written in name order, so the encoding does not depend on the
	// process-local ids.
	idx := make([]uint64, len(vs))
	order := make([]int, len(vs))
	for i, v := range vs {
		idx[i] = e.metrics[v.ID]
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return idx[order[a]] < idx[order[b]] })
	e.u(uint64(len(vs)))
	for _, o := range order {
		e.u(idx[o])
		e.u(vs[o].V)
	}
}

func (e *refEnc) pc(pc profile.PC) { e.u64(uint64(pc.Func)); e.u(uint64(pc.Offset)) }

func (e *refEnc) sketch(s *profile.ValueSketch) {
	if s == nil {
		e.u(0)
		return
	}
	e.u(1)
	e.u(uint64(s.Kind))
	e.u(uint64(s.Bits))
	e.u(s.Total)
	e.u(s.Min)
	e.u(s.Max)
	e.u(uint64(len(s.Top)))
	for _, t := range s.Top {
		e.u(t.Value)
		e.u(t.Count)
		e.u(t.Err)
	}
	e.u(uint64(len(s.HLL)))
	e.b = append(e.b, s.HLL...)
}

func refSortedKeys[K comparable, V any](m map[K]V, less func(a, b K) bool) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return less(ks[i], ks[j]) })
	return ks
}

func refPCLess(a, b profile.PC) bool {
	if a.Func != b.Func {
		return a.Func < b.Func
	}
	return a.Offset < b.Offset
}

// singleRank reports the one rank of a profile of one rank's items: its open
// values, per-rank values and summaries are then derived from the node
// values and not written.
func refSingleRank(p *profile.Profile) (int32, bool) {
	if len(p.Items) != 1 {
		return 0, false
	}
	for r := range p.Items {
		return r, true
	}
	return 0, false
}

// refEncode is the sequential encoder the package shipped before the
// parallel one; it stays as the reference the canonical bytes are checked
// against. It returns the profile's deterministic binary encoding.
func refEncode(p *profile.Profile) []byte {
	e := &refEnc{metrics: map[profile.MetricID]uint64{}}
	used := map[profile.MetricID]bool{}
	for _, n := range p.Nodes {
		for _, v := range n.Metrics {
			used[v.ID] = true
		}
	}
	for _, ss := range p.Summaries {
		for _, s := range ss {
			used[s.ID] = true
		}
	}
	for _, m := range p.Open {
		for _, vs := range m {
			for _, v := range vs {
				used[v.ID] = true
			}
		}
	}
	for _, m := range p.PerRank {
		for _, vs := range m {
			for _, v := range vs {
				used[v.ID] = true
			}
		}
	}
	names := make([]string, 0, len(used))
	byName := map[string]profile.MetricID{}
	for id := range used {
		names = append(names, id.Name())
		byName[id.Name()] = id
	}
	sort.Strings(names)
	for i, n := range names {
		e.metrics[byName[n]] = uint64(i)
	}

	e.b = append(e.b, "GPPF"...)
	e.u(6) // version 2 added RankInfo.SamplesDropped, version 3 RankInfo.ReuseP, version 4 RankInfo.Device, PCSampling and Props, version 5 Profile.Interrupted, version 6 RankInfo.SpatialLevel
	e.s(p.Job)
	if p.Synthetic {
		e.u(1)
	} else {
		e.u(0)
	}
	e.s(p.Interrupted)
	e.u(uint64(len(names)))
	for _, n := range names {
		e.s(n)
	}
	// Items.
	ranks := refSortedKeys(p.Items, func(a, b int32) bool { return a < b })
	e.u(uint64(len(ranks)))
	for _, r := range ranks {
		e.i(int64(r))
		bm := p.Items[r]
		bm.RunOptimize()
		var buf bytes.Buffer
		bm.WriteTo(&buf)
		e.u(uint64(buf.Len()))
		e.b = append(e.b, buf.Bytes()...)
	}
	// Nodes, parents first is not needed: ids are sorted, parents named.
	ids := p.SortedNodeIDs()
	e.u(uint64(len(ids)))
	for _, id := range ids {
		n := p.Nodes[id]
		e.u64(uint64(id))
		e.u64(uint64(n.Parent))
		e.u(uint64(n.Frame.Kind))
		e.s(n.Frame.Module)
		e.s(n.Frame.Function)
		e.s(n.Frame.File)
		e.u(uint64(n.Frame.Line))
		e.u(n.Frame.Offset)
		e.values(n.Metrics)
	}
	mods := refSortedKeys(p.Modules, func(a, b profile.ModuleHash) bool { return a < b })
	e.u(uint64(len(mods)))
	for _, h := range mods {
		m := p.Modules[h]
		e.u64(uint64(h))
		e.u(m.Size)
		e.s(m.Name)
		e.u(uint64(m.SM))
	}
	fns := refSortedKeys(p.Funcs, func(a, b profile.FuncID) bool { return a < b })
	e.u(uint64(len(fns)))
	for _, id := range fns {
		f := p.Funcs[id]
		e.u64(uint64(id))
		e.u64(uint64(f.Module))
		e.s(f.Name)
	}
	objs := refSortedKeys(p.Objects, func(a, b profile.ObjectID) bool { return a < b })
	e.u(uint64(len(objs)))
	for _, id := range objs {
		o := p.Objects[id]
		e.u64(uint64(id))
		e.u64(uint64(o.Context))
		e.u(o.Size)
		e.u(o.Count)
		e.u(uint64(o.Space))
	}
	tks := refSortedKeys(p.Temporal, func(a, b profile.TemporalKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.Old != b.Old {
			return refPCLess(a.Old, b.Old)
		}
		if a.New != b.New {
			return refPCLess(a.New, b.New)
		}
		return a.Access < b.Access
	})
	e.u(uint64(len(tks)))
	for _, k := range tks {
		e.u64(uint64(k.Context))
		e.pc(k.Old)
		e.pc(k.New)
		e.u(uint64(k.Access))
		e.u(p.Temporal[k])
	}
	sks := refSortedKeys(p.Spatial, func(a, b profile.SpatialKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.Object != b.Object {
			return a.Object < b.Object
		}
		if a.PC != b.PC {
			return refPCLess(a.PC, b.PC)
		}
		return a.Access < b.Access
	})
	e.u(uint64(len(sks)))
	for _, k := range sks {
		e.u64(uint64(k.Context))
		e.u64(uint64(k.Object))
		e.pc(k.PC)
		e.u(uint64(k.Access))
		e.u(p.Spatial[k])
	}
	pks := refSortedKeys(p.PCs, func(a, b profile.PCKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.PC != b.PC {
			return refPCLess(a.PC, b.PC)
		}
		return a.Access < b.Access
	})
	e.u(uint64(len(pks)))
	for _, k := range pks {
		s := p.PCs[k]
		e.u64(uint64(k.Context))
		e.pc(k.PC)
		e.u(uint64(k.Access))
		e.u(s.Accesses)
		e.sketch(s.Values)
	}
	oks := refSortedKeys(p.ObjStats, func(a, b profile.ObjectKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.Object != b.Object {
			return a.Object < b.Object
		}
		return a.Access < b.Access
	})
	e.u(uint64(len(oks)))
	for _, k := range oks {
		s := p.ObjStats[k]
		e.u64(uint64(k.Context))
		e.u64(uint64(k.Object))
		e.u(uint64(k.Access))
		e.u(s.Accesses)
		e.sketch(s.Values)
	}
	rks := p.SortedRanks()
	e.u(uint64(len(rks)))
	for _, r := range rks {
		ri := p.Ranks[r]
		e.i(int64(r))
		for _, s := range []string{ri.Host, ri.GPU, ri.GPUUUID, ri.Driver, ri.CUDA, ri.Mode, ri.Source, ri.Incomplete} {
			e.s(s)
		}
		for _, v := range []uint64{uint64(ri.BlockP), uint64(ri.KernelK), ri.Launches, ri.LaunchesTraced, ri.Blocks, ri.BlocksTraced, ri.Records, ri.Dropped, ri.HostDropped, ri.SamplesDropped} {
			e.u(v)
		}
		e.i(ri.Batches)
		e.i(int64(ri.ExitCode))
		e.u(uint64(ri.ReuseP))
		e.s(ri.Device)
		e.s(ri.PCSampling)
		g := ri.Props
		for _, v := range []uint32{g.SMs, g.ClockKHz, g.MemClockKHz, g.MemBusBits, g.L2Bytes, g.RegsPerSM, g.SharedPerSM, g.ThreadsPerSM} {
			e.u(uint64(v))
		}
		e.u(g.MemBytes)
		e.u(uint64(ri.SpatialLevel))
	}
	if _, single := refSingleRank(p); single {
		e.u(0) // derived: see singleRank
		return e.b
	}
	e.u(1)
	sids := refSortedKeys(p.Summaries, func(a, b profile.NodeID) bool { return a < b })
	e.u(uint64(len(sids)))
	for _, id := range sids {
		ss := p.Summaries[id]
		order := make([]int, len(ss))
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(a, b int) bool { return e.metrics[ss[order[a]].ID] < e.metrics[ss[order[b]].ID] })
		e.u64(uint64(id))
		e.u(uint64(len(ss)))
		for _, o := range order {
			s := ss[o].S
			e.u(e.metrics[ss[o].ID])
			e.u(s.N)
			e.u(s.Sum)
			e.u(s.SumSqHi)
			e.u(s.SumSqLo)
			e.u(s.Min)
			e.u(s.Max)
			e.i(int64(s.ArgMin))
			e.i(int64(s.ArgMax))
		}
	}
	for _, m := range []map[int32]map[profile.NodeID]profile.Values{p.Open, p.PerRank} {
		rs := refSortedKeys(m, func(a, b int32) bool { return a < b })
		e.u(uint64(len(rs)))
		for _, r := range rs {
			e.i(int64(r))
			vs := m[r]
			ids := refSortedKeys(vs, func(a, b profile.NodeID) bool { return a < b })
			e.u(uint64(len(ids)))
			for _, id := range ids {
				e.u64(uint64(id))
				e.values(vs[id])
			}
		}
	}
	return e.b
}
