package profile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
)

// The profile encoding: deterministic (every table sorted by key, metric
// names written as a sorted table), varint-packed, versioned. Equal profiles
// have equal encodings, which the merge property tests rely on.

const (
	profileMagic   = "GPPF"
	profileVersion = 5
	// Version 1 lacks RankInfo.SamplesDropped, version 2 RankInfo.ReuseP,
	// version 3 RankInfo.Device, PCSampling and Props, version 4
	// Profile.Interrupted; all are still read.
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
	var tables []table
	var total int
	add := func(t table) {
		tables = append(tables, t)
		total += t.n
	}

	var nodes []*Node
	add(table{n: len(p.Nodes), per: 48,
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
		}})
	// Modules, functions and objects: small tables, written in one piece.
	add(table{n: 1, nocount: true, per: 64 * (len(p.Modules) + len(p.Funcs) + len(p.Objects)), put: func(e *enc, _, _ int) {
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
	}})
	var tks []kv[TemporalKey, uint64]
	add(table{n: len(p.Temporal), per: 34,
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
		}})
	var sks []kv[SpatialKey, uint64]
	add(table{n: len(p.Spatial), per: 34,
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
		}})
	var pks []kv[PCKey, *PCStat]
	add(table{n: len(p.PCs), per: 330,
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
		}})
	var oks []kv[ObjectKey, *ObjectStat]
	add(table{n: len(p.ObjStats), per: 40,
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
		}})
	var rks []int32
	add(table{n: len(p.Ranks), per: 96,
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
			}
		}})
	_, single := p.singleRank()
	add(table{n: 1, nocount: true, per: 1, put: func(e *enc, _, _ int) {
		if single {
			e.u(0) // derived: see singleRank
		} else {
			e.u(1)
		}
	}})
	if !single {
		var sids []kv[NodeID, Summaries]
		add(table{n: len(p.Summaries), per: 60,
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
			}})
		for _, m := range [...]map[int32]map[NodeID]Values{p.Open, p.PerRank} {
			add(rankValuesTable(m))
		}
	}

	// Gather and sort every table, then write them in chunks.
	e0 := enc{metrics: index}
	if total < parMin {
		e0.b = make([]byte, 0, 64+16*len(names)+estimate(tables))
	}
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
		e := &enc{metrics: index, b: make([]byte, 0, size)}
		pieces = append(pieces, e)
		writes = append(writes, func() { f(e) })
	}
	pieces = append(pieces, &e0)
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

// DecodeError says where a profile encoding is wrong.
type DecodeError struct {
	Offset int
	Field  string
	Msg    string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("profile: decode: offset %d: %s: %s", e.Offset, e.Field, e.Msg)
}

type dec struct {
	b       []byte
	off     int
	err     error
	field   string
	version uint64
	metrics []MetricID
	// Allocation in blocks: node values, sketch registers, and frame
	// strings interned (a few file and module names repeat on every node).
	vals []MV
	hll  []byte
	strs map[string]string
}

func (d *dec) fail(msg string) {
	if d.err == nil {
		d.err = &DecodeError{Offset: d.off, Field: d.field, Msg: msg}
	}
}

func (d *dec) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad or truncated varint")
		return 0
	}
	d.off += n
	return v
}

func (d *dec) i() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad or truncated varint")
		return 0
	}
	d.off += n
	return v
}

func (d *dec) u64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *dec) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(fmt.Sprintf("length %d runs past the end", n))
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *dec) s() string { return string(d.bytes(d.u())) }

// str reads a string, interned.
func (d *dec) str() string {
	b := d.bytes(d.u())
	if len(b) == 0 {
		return ""
	}
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	d.strs[s] = s
	return s
}

// count reads a table length, bounded by the bytes left (each entry takes at
// least minSize bytes), so a corrupt length cannot make us allocate wildly.
func (d *dec) count(field string, minSize int) int {
	d.field = field
	n := d.u()
	if d.err == nil && n > uint64(len(d.b)-d.off)/uint64(minSize) {
		d.fail(fmt.Sprintf("count %d larger than the data left", n))
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *dec) metric() MetricID {
	i := d.u()
	if d.err == nil && i >= uint64(len(d.metrics)) {
		d.fail(fmt.Sprintf("metric index %d out of range (%d names)", i, len(d.metrics)))
		return 0
	}
	if d.err != nil {
		return 0
	}
	return d.metrics[i]
}

func (d *dec) values() Values {
	n := d.count(d.field, 2)
	if n == 0 {
		return nil
	}
	if cap(d.vals)-len(d.vals) < n {
		d.vals = make([]MV, 0, max(n, 1<<12))
	}
	// The values' room in the block, capped, so a later Add that grows them
	// copies rather than writes over the next node's.
	at := len(d.vals)
	vs := Values(d.vals[at : at : at+n])
	for k := 0; k < n && d.err == nil; k++ {
		m := d.metric()
		v := d.u()
		vs = vs.Add(m, v)
	}
	d.vals = d.vals[:at+len(vs)]
	return vs[:len(vs):len(vs)]
}

func (d *dec) pc() PC { return PC{Func: FuncID(d.u64()), Offset: uint32(d.u())} }

func (d *dec) access() Access {
	a := d.u()
	if a > 1 {
		d.fail(fmt.Sprintf("access kind %d", a))
	}
	return Access(a)
}

func (d *dec) sketch() *ValueSketch {
	if d.u() == 0 {
		return nil
	}
	s := &ValueSketch{Kind: ValueKind(d.u()), Bits: uint8(d.u()), Total: d.u(), Min: d.u(), Max: d.u()}
	n := d.count("value sketch", 3)
	if n > SketchK {
		d.fail(fmt.Sprintf("%d heavy hitters, at most %d", n, SketchK))
		return nil
	}
	for k := 0; k < n; k++ {
		s.Top = append(s.Top, TopValue{d.u(), d.u(), d.u()})
	}
	h := d.u()
	if h != 0 && h != 1<<sketchP {
		d.fail(fmt.Sprintf("HLL of %d registers", h))
		return nil
	}
	if h != 0 {
		if len(d.hll) < int(h) {
			d.hll = make([]byte, 64<<sketchP)
		}
		s.HLL = d.hll[:h:h]
		d.hll = d.hll[h:]
		copy(s.HLL, d.bytes(h))
	}
	return s
}

// Decode parses a profile encoding. It never panics; errors name the offset
// and the table being read. The tables are parsed in order; a large
// profile's maps are filled on other goroutines while the next table is
// parsed (map insertion, not parsing, is most of the work).
func Decode(b []byte) (*Profile, error) {
	d := &dec{b: b, field: "magic", strs: map[string]string{}}
	if !bytes.HasPrefix(b, []byte(profileMagic)) {
		return nil, &DecodeError{0, "magic", "not a profile encoding"}
	}
	d.off = len(profileMagic)
	d.field = "version"
	d.version = d.u()
	if d.err == nil && (d.version < oldestVersion || d.version > profileVersion) {
		return nil, &DecodeError{d.off, "version", fmt.Sprintf("version %d, want %d to %d", d.version, oldestVersion, profileVersion)}
	}
	var wg sync.WaitGroup
	parallel := len(b) >= 64*parMin && workers() > 1
	fill := func(f func()) {
		if !parallel {
			f()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	p, single, err := d.profile(fill)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if single {
		r, _ := p.singleRank()
		p.deriveSingle(r)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// profile parses the tables after the version; fill runs map fills (on
// another goroutine for large profiles: nothing here reads a map it hands
// to fill). single: the rank tables are to be derived (see singleRank).
func (d *dec) profile(fill func(func())) (p *Profile, single bool, err error) {
	b := d.b
	p = New("")
	d.field = "job"
	p.Job = d.s()
	p.Synthetic = d.u() == 1
	if d.version >= 5 {
		d.field = "interrupted"
		p.Interrupted = d.s()
	}
	nm := d.count("metric names", 1)
	for k := 0; k < nm; k++ {
		d.metrics = append(d.metrics, Metric(d.s()))
	}
	nr := d.count("items", 2)
	for k := 0; k < nr && d.err == nil; k++ {
		r := int32(d.i())
		raw := d.bytes(d.u())
		if d.err != nil {
			break
		}
		bm := roaring.New()
		if _, err := bm.FromUnsafeBytes(append([]byte(nil), raw...)); err != nil {
			d.fail(fmt.Sprintf("rank %d bitmap: %v", r, err))
			break
		}
		if _, dup := p.Items[r]; dup {
			d.fail(fmt.Sprintf("rank %d twice", r))
		}
		p.Items[r] = bm
	}
	nn := d.count("nodes", 20)
	nodes := make([]Node, nn)
	for k := 0; k < nn && d.err == nil; k++ {
		n := &nodes[k]
		n.ID, n.Parent = NodeID(d.u64()), NodeID(d.u64())
		kind := d.u()
		if kind >= uint64(numKinds) {
			d.fail(fmt.Sprintf("node kind %d", kind))
		}
		n.Frame = Frame{Kind: NodeKind(kind), Module: d.str(), Function: d.str(), File: d.str(), Line: uint32(d.u()), Offset: d.u()}
		n.Metrics = d.values()
	}
	if d.err == nil {
		fill(func() {
			m := make(map[NodeID]*Node, nn+1)
			m[RootID] = p.Nodes[RootID]
			for k := range nodes {
				m[nodes[k].ID] = &nodes[k]
			}
			p.Nodes = m
		})
	}
	nmod := d.count("modules", 11)
	for k := 0; k < nmod && d.err == nil; k++ {
		m := &Module{Hash: ModuleHash(d.u64()), Size: d.u(), Name: d.s(), SM: uint16(d.u())}
		p.Modules[m.Hash] = m
	}
	nf := d.count("funcs", 17)
	for k := 0; k < nf && d.err == nil; k++ {
		f := &Func{ID: FuncID(d.u64()), Module: ModuleHash(d.u64()), Name: d.s()}
		p.Funcs[f.ID] = f
	}
	no := d.count("objects", 19)
	for k := 0; k < no && d.err == nil; k++ {
		o := &DataObject{ID: ObjectID(d.u64()), Context: NodeID(d.u64()), Size: d.u(), Count: d.u(), Space: uint8(d.u())}
		p.Objects[o.ID] = o
	}
	nt := d.count("temporal", 29)
	ts := make([]kv[TemporalKey, uint64], nt)
	for k := 0; k < nt && d.err == nil; k++ {
		ts[k] = kv[TemporalKey, uint64]{TemporalKey{Context: NodeID(d.u64()), Old: d.pc(), New: d.pc(), Access: d.access()}, d.u()}
	}
	if d.err == nil {
		fill(func() { p.Temporal = fillMap(ts) })
	}
	ns := d.count("spatial", 28)
	ss := make([]kv[SpatialKey, uint64], ns)
	for k := 0; k < ns && d.err == nil; k++ {
		ss[k] = kv[SpatialKey, uint64]{SpatialKey{Context: NodeID(d.u64()), Object: ObjectID(d.u64()), PC: d.pc(), Access: d.access()}, d.u()}
	}
	if d.err == nil {
		fill(func() { p.Spatial = fillMap(ss) })
	}
	np := d.count("pcs", 20)
	ps := make([]kv[PCKey, *PCStat], np)
	stats := make([]PCStat, np)
	for k := 0; k < np && d.err == nil; k++ {
		key := PCKey{Context: NodeID(d.u64()), PC: d.pc(), Access: d.access()}
		stats[k] = PCStat{Accesses: d.u(), Values: d.sketch()}
		ps[k] = kv[PCKey, *PCStat]{key, &stats[k]}
	}
	if d.err == nil {
		fill(func() { p.PCs = fillMap(ps) })
	}
	nos := d.count("object stats", 19)
	for k := 0; k < nos && d.err == nil; k++ {
		key := ObjectKey{Context: NodeID(d.u64()), Object: ObjectID(d.u64()), Access: d.access()}
		p.ObjStats[key] = &ObjectStat{Accesses: d.u(), Values: d.sketch()}
	}
	nri := d.count("ranks", 20)
	for k := 0; k < nri && d.err == nil; k++ {
		ri := &RankInfo{Rank: int32(d.i())}
		for _, s := range []*string{&ri.Host, &ri.GPU, &ri.GPUUUID, &ri.Driver, &ri.CUDA, &ri.Mode, &ri.Source, &ri.Incomplete} {
			*s = d.str()
		}
		ri.BlockP, ri.KernelK = uint32(d.u()), uint32(d.u())
		for _, v := range []*uint64{&ri.Launches, &ri.LaunchesTraced, &ri.Blocks, &ri.BlocksTraced, &ri.Records, &ri.Dropped, &ri.HostDropped} {
			*v = d.u()
		}
		if d.version >= 2 {
			ri.SamplesDropped = d.u()
		}
		ri.Batches = d.i()
		ri.ExitCode = int32(d.i())
		if d.version >= 3 {
			ri.ReuseP = uint32(d.u())
		}
		if d.version >= 4 {
			ri.Device, ri.PCSampling = d.str(), d.str()
			for _, f := range ri.Props.fields() {
				*f = uint32(d.u())
			}
			ri.Props.MemBytes = d.u()
		}
		p.Ranks[ri.Rank] = ri
	}
	d.field = "rank tables"
	explicit := d.u()
	if d.err == nil && explicit == 0 {
		if _, ok := p.singleRank(); ok {
			single = true
		} else if len(p.Items) > 1 {
			d.fail("derived rank tables in a profile of several ranks")
		}
	} else if d.err == nil {
		nsum := d.count("summaries", 9)
		sums := make([]kv[NodeID, Summaries], nsum)
		for k := 0; k < nsum && d.err == nil; k++ {
			id := NodeID(d.u64())
			cnt := d.count("summaries", 9)
			var ss Summaries
			for j := 0; j < cnt && d.err == nil; j++ {
				m := d.metric()
				s := Summary{N: d.u(), Sum: d.u(), SumSqHi: d.u(), SumSqLo: d.u(), Min: d.u(), Max: d.u(), ArgMin: int32(d.i()), ArgMax: int32(d.i())}
				ss = ss.MergeAll(Summaries{{m, s}})
			}
			sums[k] = kv[NodeID, Summaries]{id, ss}
		}
		if d.err == nil {
			fill(func() { p.Summaries = fillMap(sums) })
		}
		for _, m := range []map[int32]map[NodeID]Values{p.Open, p.PerRank} {
			nr := d.count("rank values", 2)
			rows := make([]kv[int32, []kv[NodeID, Values]], nr)
			for k := 0; k < nr && d.err == nil; k++ {
				r := int32(d.i())
				cnt := d.count("rank values", 9)
				vals := make([]kv[NodeID, Values], cnt)
				for j := 0; j < cnt && d.err == nil; j++ {
					vals[j] = kv[NodeID, Values]{NodeID(d.u64()), d.values()}
				}
				rows[k] = kv[int32, []kv[NodeID, Values]]{r, vals}
			}
			if d.err == nil {
				fill(func() {
					for _, row := range rows {
						m[row.k] = fillMap(row.v)
					}
				})
			}
		}
	}
	if d.err == nil && d.off != len(b) {
		d.field = "end"
		d.fail(fmt.Sprintf("%d bytes after the profile", len(b)-d.off))
	}
	if d.err != nil {
		return nil, false, d.err
	}
	return p, single, nil
}

// fillMap makes a map of entries (a later duplicate key replaces an
// earlier one, as inserting in order would).
func fillMap[K comparable, V any](es []kv[K, V]) map[K]V {
	m := make(map[K]V, len(es))
	for _, e := range es {
		m[e.k] = e.v
	}
	return m
}

// deriveSingle rebuilds the rank tables of a one-rank profile from its node
// values (they are not written; see singleRank).
func (p *Profile) deriveSingle(r int32) {
	all, per := p.nodeValues()
	p.PerRank[r] = per
	if p.Sealed(r) || (p.Ranks[r] != nil && p.Ranks[r].Incomplete != "") {
		for id, v := range all {
			p.Summaries[id] = FromValues(r, v)
		}
		return
	}
	p.Open[r] = all
}
