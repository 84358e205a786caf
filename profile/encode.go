package profile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"
	"sort"
)

// The profile encoding: deterministic (every table sorted by key, metric
// names written as a sorted table), varint-packed, versioned. Equal profiles
// have equal encodings, which the merge property tests rely on.

const (
	profileMagic   = "GPPF"
	profileVersion = 6
	// Version 1 lacks RankInfo.SamplesDropped, version 2 RankInfo.ReuseP,
	// version 3 RankInfo.Device, PCSampling and Props, version 4
	// Profile.Interrupted, version 5 RankInfo.SpatialLevel; all are still
	// read.
	oldestVersion = 1
)

// FormatVersion is the version of the profile encoding (profile.gpuprof,
// reducer partials) this package writes; it reads OldestFormatVersion up.
const (
	FormatVersion       = profileVersion
	OldestFormatVersion = oldestVersion
)

type enc struct {
	b []byte
	// metrics maps a process-local metric id to its index in the sorted
	// name table (-1: not used by this profile).
	metrics []int32
}

func (e *enc) u(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) i(v int64)    { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) s(v string)   { e.u(uint64(len(v))); e.b = append(e.b, v...) }

func (e *enc) values(vs Values) {
	// Written in name order, so the encoding does not depend on the
	// process-local ids. A node has a handful of values: an insertion sort
	// on the stack, no allocation.
	e.u(uint64(len(vs)))
	if len(vs) <= 8 {
		var buf [8]MV
		s := buf[:len(vs)]
		for i, v := range vs {
			v.ID = MetricID(e.metrics[v.ID])
			j := i
			for ; j > 0 && s[j-1].ID > v.ID; j-- {
				s[j] = s[j-1]
			}
			s[j] = v
		}
		for _, v := range s {
			e.u(uint64(v.ID))
			e.u(v.V)
		}
		return
	}
	s := make([]MV, len(vs))
	for i, v := range vs {
		s[i] = MV{MetricID(e.metrics[v.ID]), v.V}
	}
	slices.SortFunc(s, func(a, b MV) int { return cmp.Compare(a.ID, b.ID) })
	for _, v := range s {
		e.u(uint64(v.ID))
		e.u(v.V)
	}
}

func (e *enc) pc(pc PC) { e.u64(uint64(pc.Func)); e.u(uint64(pc.Offset)) }

func (e *enc) sketch(s *ValueSketch) {
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

func sortedKeys[K comparable, V any](m map[K]V, less func(a, b K) bool) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return less(ks[i], ks[j]) })
	return ks
}

func pcLess(a, b PC) bool {
	if a.Func != b.Func {
		return a.Func < b.Func
	}
	return a.Offset < b.Offset
}

func pcCmp(a, b PC) int {
	if c := cmp.Compare(a.Func, b.Func); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

// singleRank reports the one rank of a profile of one rank's items: its open
// values, per-rank values and summaries are then derived from the node
// values and not written.
func (p *Profile) singleRank() (int32, bool) {
	if len(p.Items) != 1 {
		return 0, false
	}
	for r := range p.Items {
		return r, true
	}
	return 0, false
}

// kv is a table entry gathered for sorting.
type kv[K any, V any] struct {
	k K
	v V
}

func entries[K comparable, V any](m map[K]V) []kv[K, V] {
	out := make([]kv[K, V], 0, len(m))
	for k, v := range m {
		out = append(out, kv[K, V]{k, v})
	}
	return out
}

// table is one table of the encoding: a count, then n entries in key
// order. sort (if set) gathers and orders the entries; put writes entries
// [lo, hi). per estimates an entry's bytes, so buffers rarely grow.
type table struct {
	n       int
	per     int
	sort    func()
	put     func(e *enc, lo, hi int)
	nocount bool // put writes the whole table, count included, as one entry
	chunk   int  // entries per parallel task (default parChunk)
}

// Encode returns the profile's deterministic binary encoding. Large
// profiles are gathered, sorted and written table by table in parallel, in
// chunks that are joined in order at the end: the bytes are the same as a
// sequential walk's.
func (p *Profile) Encode() []byte {
	names, index := p.metricTable()
	tables := p.tables()
	total := 0
	for _, t := range tables {
		total += t.n
	}
	e0 := enc{metrics: index}
	if total < parMin {
		e0.b = make([]byte, 0, 64+16*len(names)+estimate(tables))
	}
	p.encodeHead(&e0, names)
	if total < parMin {
		// A collector's batch or a test profile: one buffer, one goroutine.
		for _, t := range tables {
			if t.sort != nil {
				t.sort()
			}
			if !t.nocount {
				e0.u(uint64(t.n))
			}
			t.put(&e0, 0, t.n)
		}
		return e0.b
	}
	return writeParallel(&e0, tables)
}

// encodeHead writes what precedes the tables: magic, version, job, the
// metric name table and every rank's items.
func (p *Profile) encodeHead(e0 *enc, names []string) {
	e0.b = append(e0.b, profileMagic...)
	e0.u(profileVersion)
	e0.s(p.Job)
	if p.Synthetic {
		e0.u(1)
	} else {
		e0.u(0)
	}
	e0.s(p.Interrupted)
	e0.u(uint64(len(names)))
	for _, n := range names {
		e0.s(n)
	}
	// Items.
	ranks := sortedKeys(p.Items, func(a, b int32) bool { return a < b })
	e0.u(uint64(len(ranks)))
	for _, r := range ranks {
		e0.i(int64(r))
		bm := p.Items[r]
		bm.RunOptimize()
		var buf bytes.Buffer
		bm.WriteTo(&buf)
		e0.u(uint64(buf.Len()))
		e0.b = append(e0.b, buf.Bytes()...)
	}
}

// writeParallel sorts every table, then writes them in chunks after the
// head e0, each chunk into its own buffer, and joins the buffers in order.
func writeParallel(e0 *enc, tables []table) []byte {
	var sorts []func()
	for _, t := range tables {
		if t.sort != nil {
			sorts = append(sorts, t.sort)
		}
	}
	runAll(sorts)
	// Pieces in output order: each table's count, then its chunks.
	var pieces []*enc
	var writes []func()
	piece := func(f func(e *enc), size int) {
		e := &enc{metrics: e0.metrics, b: make([]byte, 0, size)}
		pieces = append(pieces, e)
		writes = append(writes, func() { f(e) })
	}
	pieces = append(pieces, e0)
	for _, t := range tables {
		if !t.nocount {
			piece(func(e *enc) { e.u(uint64(t.n)) }, 10)
		}
		chunk := t.chunk
		if chunk == 0 {
			chunk = parChunk
		}
		for lo := 0; lo < t.n; lo += chunk {
			hi := min(lo+chunk, t.n)
			piece(func(e *enc) { t.put(e, lo, hi) }, (hi-lo)*t.per)
		}
	}
	runAll(writes)
	size := 0
	for _, e := range pieces {
		size += len(e.b)
	}
	out := make([]byte, 0, size)
	for _, e := range pieces {
		out = append(out, e.b...)
	}
	return out
}

// tables returns the tables of the encoding after the head, in order: one
// function per table (or group of small tables) below.
func (p *Profile) tables() []table {
	tables := []table{p.nodeTable(), p.symbolTables(), p.temporalTable(), p.spatialTable(),
		p.pcTable(), p.objStatTable(), p.rankInfoTable()}
	_, single := p.singleRank()
	tables = append(tables, table{n: 1, nocount: true, per: 1, put: func(e *enc, _, _ int) {
		if single {
			e.u(0) // derived: see singleRank
		} else {
			e.u(1)
		}
	}})
	if !single {
		tables = append(tables, p.summaryTable())
		for _, m := range [...]map[int32]map[NodeID]Values{p.Open, p.PerRank} {
			tables = append(tables, rankValuesTable(m))
		}
	}
	return tables
}

func (p *Profile) nodeTable() table {
	var nodes []*Node
	return table{n: len(p.Nodes), per: 48,
		sort: func() {
			nodes = make([]*Node, 0, len(p.Nodes))
			for _, n := range p.Nodes {
				nodes = append(nodes, n)
			}
			nodes = psort(nodes, func(n **Node) uint64 { return uint64((*n).ID) }, func(a, b *Node) int { return cmp.Compare(a.ID, b.ID) })
		},
		put: func(e *enc, lo, hi int) {
			for _, n := range nodes[lo:hi] {
				e.u64(uint64(n.ID))
				e.u64(uint64(n.Parent))
				e.u(uint64(n.Frame.Kind))
				e.s(n.Frame.Module)
				e.s(n.Frame.Function)
				e.s(n.Frame.File)
				e.u(uint64(n.Frame.Line))
				e.u(n.Frame.Offset)
				e.values(n.Metrics)
			}
		}}
}

// symbolTables is modules, functions and objects: small tables, written in
// one piece.
func (p *Profile) symbolTables() table {
	return table{n: 1, nocount: true, per: 64 * (len(p.Modules) + len(p.Funcs) + len(p.Objects)), put: func(e *enc, _, _ int) {
		mods := sortedKeys(p.Modules, func(a, b ModuleHash) bool { return a < b })
		e.u(uint64(len(mods)))
		for _, h := range mods {
			m := p.Modules[h]
			e.u64(uint64(h))
			e.u(m.Size)
			e.s(m.Name)
			e.u(uint64(m.SM))
		}
		fns := sortedKeys(p.Funcs, func(a, b FuncID) bool { return a < b })
		e.u(uint64(len(fns)))
		for _, id := range fns {
			f := p.Funcs[id]
			e.u64(uint64(id))
			e.u64(uint64(f.Module))
			e.s(f.Name)
		}
		objs := sortedKeys(p.Objects, func(a, b ObjectID) bool { return a < b })
		e.u(uint64(len(objs)))
		for _, id := range objs {
			o := p.Objects[id]
			e.u64(uint64(id))
			e.u64(uint64(o.Context))
			e.u(o.Size)
			e.u(o.Count)
			e.u(uint64(o.Space))
		}
	}}
}

func (p *Profile) temporalTable() table {
	var tks []kv[TemporalKey, uint64]
	return table{n: len(p.Temporal), per: 34,
		sort: func() {
			tks = psort(entries(p.Temporal), func(x *kv[TemporalKey, uint64]) uint64 { return uint64(x.k.Context) },
				func(a, b kv[TemporalKey, uint64]) int {
					if c := cmp.Compare(a.k.Context, b.k.Context); c != 0 {
						return c
					}
					if c := pcCmp(a.k.Old, b.k.Old); c != 0 {
						return c
					}
					if c := pcCmp(a.k.New, b.k.New); c != 0 {
						return c
					}
					return cmp.Compare(a.k.Access, b.k.Access)
				})
		},
		put: func(e *enc, lo, hi int) {
			for _, x := range tks[lo:hi] {
				e.u64(uint64(x.k.Context))
				e.pc(x.k.Old)
				e.pc(x.k.New)
				e.u(uint64(x.k.Access))
				e.u(x.v)
			}
		}}
}

func (p *Profile) spatialTable() table {
	var sks []kv[SpatialKey, uint64]
	return table{n: len(p.Spatial), per: 34,
		sort: func() {
			sks = psort(entries(p.Spatial), func(x *kv[SpatialKey, uint64]) uint64 { return uint64(x.k.Context) },
				func(a, b kv[SpatialKey, uint64]) int {
					if c := cmp.Compare(a.k.Context, b.k.Context); c != 0 {
						return c
					}
					if c := cmp.Compare(a.k.Object, b.k.Object); c != 0 {
						return c
					}
					if c := pcCmp(a.k.PC, b.k.PC); c != 0 {
						return c
					}
					return cmp.Compare(a.k.Access, b.k.Access)
				})
		},
		put: func(e *enc, lo, hi int) {
			for _, x := range sks[lo:hi] {
				e.u64(uint64(x.k.Context))
				e.u64(uint64(x.k.Object))
				e.pc(x.k.PC)
				e.u(uint64(x.k.Access))
				e.u(x.v)
			}
		}}
}

func (p *Profile) pcTable() table {
	var pks []kv[PCKey, *PCStat]
	return table{n: len(p.PCs), per: 330,
		sort: func() {
			pks = psort(entries(p.PCs), func(x *kv[PCKey, *PCStat]) uint64 { return uint64(x.k.Context) },
				func(a, b kv[PCKey, *PCStat]) int {
					if c := cmp.Compare(a.k.Context, b.k.Context); c != 0 {
						return c
					}
					if c := pcCmp(a.k.PC, b.k.PC); c != 0 {
						return c
					}
					return cmp.Compare(a.k.Access, b.k.Access)
				})
		},
		put: func(e *enc, lo, hi int) {
			for _, x := range pks[lo:hi] {
				e.u64(uint64(x.k.Context))
				e.pc(x.k.PC)
				e.u(uint64(x.k.Access))
				e.u(x.v.Accesses)
				e.sketch(x.v.Values)
			}
		}}
}

func (p *Profile) objStatTable() table {
	var oks []kv[ObjectKey, *ObjectStat]
	return table{n: len(p.ObjStats), per: 40,
		sort: func() {
			oks = psort(entries(p.ObjStats), func(x *kv[ObjectKey, *ObjectStat]) uint64 { return uint64(x.k.Context) },
				func(a, b kv[ObjectKey, *ObjectStat]) int {
					if c := cmp.Compare(a.k.Context, b.k.Context); c != 0 {
						return c
					}
					if c := cmp.Compare(a.k.Object, b.k.Object); c != 0 {
						return c
					}
					return cmp.Compare(a.k.Access, b.k.Access)
				})
		},
		put: func(e *enc, lo, hi int) {
			for _, x := range oks[lo:hi] {
				e.u64(uint64(x.k.Context))
				e.u64(uint64(x.k.Object))
				e.u(uint64(x.k.Access))
				e.u(x.v.Accesses)
				e.sketch(x.v.Values)
			}
		}}
}

func (p *Profile) rankInfoTable() table {
	var rks []int32
	return table{n: len(p.Ranks), per: 96,
		sort: func() { rks = p.SortedRanks() },
		put: func(e *enc, lo, hi int) {
			for _, r := range rks[lo:hi] {
				ri := p.Ranks[r]
				e.i(int64(r))
				for _, s := range [...]string{ri.Host, ri.GPU, ri.GPUUUID, ri.Driver, ri.CUDA, ri.Mode, ri.Source, ri.Incomplete} {
					e.s(s)
				}
				for _, v := range [...]uint64{uint64(ri.BlockP), uint64(ri.KernelK), ri.Launches, ri.LaunchesTraced, ri.Blocks, ri.BlocksTraced, ri.Records, ri.Dropped, ri.HostDropped, ri.SamplesDropped} {
					e.u(v)
				}
				e.i(ri.Batches)
				e.i(int64(ri.ExitCode))
				e.u(uint64(ri.ReuseP))
				e.s(ri.Device)
				e.s(ri.PCSampling)
				for _, f := range ri.Props.fields() {
					e.u(uint64(*f))
				}
				e.u(ri.Props.MemBytes)
				e.u(uint64(ri.SpatialLevel))
			}
		}}
}

func (p *Profile) summaryTable() table {
	var sids []kv[NodeID, Summaries]
	return table{n: len(p.Summaries), per: 60,
		sort: func() {
			sids = psort(entries(p.Summaries), func(x *kv[NodeID, Summaries]) uint64 { return uint64(x.k) },
				func(a, b kv[NodeID, Summaries]) int { return cmp.Compare(a.k, b.k) })
		},
		put: func(e *enc, lo, hi int) {
			var buf [8]MS
			for _, x := range sids[lo:hi] {
				ss := append(buf[:0], x.v...)
				for i := range ss {
					ss[i].ID = MetricID(e.metrics[ss[i].ID])
				}
				slices.SortFunc(ss, func(a, b MS) int { return cmp.Compare(a.ID, b.ID) })
				e.u64(uint64(x.k))
				e.u(uint64(len(ss)))
				for _, m := range ss {
					s := m.S
					e.u(uint64(m.ID))
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
		}}
}

func estimate(ts []table) int {
	n := 0
	for _, t := range ts {
		n += 10 + t.n*t.per
	}
	return n
}

// rankValuesTable is Open or PerRank: per rank (ascending), its node values
// by node id. An entry of the table is a rank.
func rankValuesTable(m map[int32]map[NodeID]Values) table {
	var rs []int32
	values := 0
	for _, vs := range m {
		values += len(vs)
	}
	per := 8 + 20*values/max(len(m), 1)
	return table{n: len(m), per: per, chunk: max(1, parChunk*len(m)/max(values, 1)),
		sort: func() { rs = sortedKeys(m, func(a, b int32) bool { return a < b }) },
		put: func(e *enc, lo, hi int) {
			var ids []kv[NodeID, Values]
			for _, r := range rs[lo:hi] {
				e.i(int64(r))
				vs := m[r]
				ids = ids[:0]
				for id, v := range vs {
					ids = append(ids, kv[NodeID, Values]{id, v})
				}
				slices.SortFunc(ids, func(a, b kv[NodeID, Values]) int { return cmp.Compare(a.k, b.k) })
				e.u(uint64(len(ids)))
				for _, x := range ids {
					e.u64(uint64(x.k))
					e.values(x.v)
				}
			}
		}}
}

// metricTable returns the sorted names of the metrics p uses and, indexed
// by metric id, each one's position among them (-1: unused).
func (p *Profile) metricTable() ([]string, []int32) {
	var used []bool
	mark := func(id MetricID) {
		if int(id) >= len(used) {
			used = append(used, make([]bool, int(id)+1-len(used))...)
		}
		used[id] = true
	}
	for _, n := range p.Nodes {
		for _, v := range n.Metrics {
			mark(v.ID)
		}
	}
	for _, ss := range p.Summaries {
		for _, s := range ss {
			mark(s.ID)
		}
	}
	for _, t := range [...]map[int32]map[NodeID]Values{p.Open, p.PerRank} {
		for _, m := range t {
			for _, vs := range m {
				for _, v := range vs {
					mark(v.ID)
				}
			}
		}
	}
	type named struct {
		name string
		id   MetricID
	}
	var ns []named
	for id, u := range used {
		if u {
			ns = append(ns, named{MetricID(id).Name(), MetricID(id)})
		}
	}
	slices.SortFunc(ns, func(a, b named) int { return cmp.Compare(a.name, b.name) })
	names := make([]string, len(ns))
	index := make([]int32, len(used))
	for i := range index {
		index[i] = -1
	}
	for i, n := range ns {
		names[i] = n.name
		index[n.id] = int32(i)
	}
	return names, index
}
