package profile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
)

// The profile encoding: deterministic (every table sorted by key, metric
// names written as a sorted table), varint-packed, versioned. Equal profiles
// have equal encodings, which the merge property tests rely on.

const (
	profileMagic   = "GPPF"
	profileVersion = 1
)

type enc struct {
	b       []byte
	metrics map[MetricID]uint64 // metric id -> index in the sorted name table
}

func (e *enc) u(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) i(v int64)    { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) s(v string)   { e.u(uint64(len(v))); e.b = append(e.b, v...) }

func (e *enc) values(vs Values) {
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

// Encode returns the profile's deterministic binary encoding.
func (p *Profile) Encode() []byte {
	e := &enc{metrics: map[MetricID]uint64{}}
	used := map[MetricID]bool{}
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
	byName := map[string]MetricID{}
	for id := range used {
		names = append(names, id.Name())
		byName[id.Name()] = id
	}
	sort.Strings(names)
	for i, n := range names {
		e.metrics[byName[n]] = uint64(i)
	}

	e.b = append(e.b, profileMagic...)
	e.u(profileVersion)
	e.s(p.Job)
	if p.Synthetic {
		e.u(1)
	} else {
		e.u(0)
	}
	e.u(uint64(len(names)))
	for _, n := range names {
		e.s(n)
	}
	// Items.
	ranks := sortedKeys(p.Items, func(a, b int32) bool { return a < b })
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
	tks := sortedKeys(p.Temporal, func(a, b TemporalKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.Old != b.Old {
			return pcLess(a.Old, b.Old)
		}
		if a.New != b.New {
			return pcLess(a.New, b.New)
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
	sks := sortedKeys(p.Spatial, func(a, b SpatialKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.Object != b.Object {
			return a.Object < b.Object
		}
		if a.PC != b.PC {
			return pcLess(a.PC, b.PC)
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
	pks := sortedKeys(p.PCs, func(a, b PCKey) bool {
		if a.Context != b.Context {
			return a.Context < b.Context
		}
		if a.PC != b.PC {
			return pcLess(a.PC, b.PC)
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
	oks := sortedKeys(p.ObjStats, func(a, b ObjectKey) bool {
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
		for _, v := range []uint64{uint64(ri.BlockP), uint64(ri.KernelK), ri.Launches, ri.LaunchesTraced, ri.Blocks, ri.BlocksTraced, ri.Records, ri.Dropped, ri.HostDropped} {
			e.u(v)
		}
		e.i(ri.Batches)
		e.i(int64(ri.ExitCode))
	}
	if _, single := p.singleRank(); single {
		e.u(0) // derived: see singleRank
		return e.b
	}
	e.u(1)
	sids := sortedKeys(p.Summaries, func(a, b NodeID) bool { return a < b })
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
	for _, m := range []map[int32]map[NodeID]Values{p.Open, p.PerRank} {
		rs := sortedKeys(m, func(a, b int32) bool { return a < b })
		e.u(uint64(len(rs)))
		for _, r := range rs {
			e.i(int64(r))
			vs := m[r]
			ids := sortedKeys(vs, func(a, b NodeID) bool { return a < b })
			e.u(uint64(len(ids)))
			for _, id := range ids {
				e.u64(uint64(id))
				e.values(vs[id])
			}
		}
	}
	return e.b
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
	metrics []MetricID
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
	vs := make(Values, 0, n)
	for k := 0; k < n && d.err == nil; k++ {
		m := d.metric()
		v := d.u()
		vs = vs.Add(m, v)
	}
	return vs
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
		s.HLL = append([]byte(nil), d.bytes(h)...)
	}
	return s
}

// Decode parses a profile encoding. It never panics; errors name the offset
// and the table being read.
func Decode(b []byte) (*Profile, error) {
	d := &dec{b: b, field: "magic"}
	if !bytes.HasPrefix(b, []byte(profileMagic)) {
		return nil, &DecodeError{0, "magic", "not a profile encoding"}
	}
	d.off = len(profileMagic)
	d.field = "version"
	if v := d.u(); d.err == nil && v != profileVersion {
		return nil, &DecodeError{d.off, "version", fmt.Sprintf("version %d, want %d", v, profileVersion)}
	}
	p := New("")
	d.field = "job"
	p.Job = d.s()
	p.Synthetic = d.u() == 1
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
	for k := 0; k < nn && d.err == nil; k++ {
		n := &Node{ID: NodeID(d.u64()), Parent: NodeID(d.u64())}
		kind := d.u()
		if kind >= uint64(numKinds) {
			d.fail(fmt.Sprintf("node kind %d", kind))
		}
		n.Frame = Frame{Kind: NodeKind(kind), Module: d.s(), Function: d.s(), File: d.s(), Line: uint32(d.u()), Offset: d.u()}
		n.Metrics = d.values()
		p.Nodes[n.ID] = n
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
	for k := 0; k < nt && d.err == nil; k++ {
		key := TemporalKey{Context: NodeID(d.u64()), Old: d.pc(), New: d.pc(), Access: d.access()}
		p.Temporal[key] = d.u()
	}
	ns := d.count("spatial", 28)
	for k := 0; k < ns && d.err == nil; k++ {
		key := SpatialKey{Context: NodeID(d.u64()), Object: ObjectID(d.u64()), PC: d.pc(), Access: d.access()}
		p.Spatial[key] = d.u()
	}
	np := d.count("pcs", 20)
	for k := 0; k < np && d.err == nil; k++ {
		key := PCKey{Context: NodeID(d.u64()), PC: d.pc(), Access: d.access()}
		p.PCs[key] = &PCStat{Accesses: d.u(), Values: d.sketch()}
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
			*s = d.s()
		}
		ri.BlockP, ri.KernelK = uint32(d.u()), uint32(d.u())
		for _, v := range []*uint64{&ri.Launches, &ri.LaunchesTraced, &ri.Blocks, &ri.BlocksTraced, &ri.Records, &ri.Dropped, &ri.HostDropped} {
			*v = d.u()
		}
		ri.Batches = d.i()
		ri.ExitCode = int32(d.i())
		p.Ranks[ri.Rank] = ri
	}
	d.field = "rank tables"
	explicit := d.u()
	if d.err == nil && explicit == 0 {
		if r, single := p.singleRank(); single {
			p.deriveSingle(r)
		} else if len(p.Items) > 1 {
			d.fail("derived rank tables in a profile of several ranks")
		}
	} else if d.err == nil {
		nsum := d.count("summaries", 9)
		for k := 0; k < nsum && d.err == nil; k++ {
			id := NodeID(d.u64())
			cnt := d.count("summaries", 9)
			var ss Summaries
			for j := 0; j < cnt && d.err == nil; j++ {
				m := d.metric()
				s := Summary{N: d.u(), Sum: d.u(), SumSqHi: d.u(), SumSqLo: d.u(), Min: d.u(), Max: d.u(), ArgMin: int32(d.i()), ArgMax: int32(d.i())}
				ss = ss.MergeAll(Summaries{{m, s}})
			}
			p.Summaries[id] = ss
		}
		for _, m := range []map[int32]map[NodeID]Values{p.Open, p.PerRank} {
			nr := d.count("rank values", 2)
			for k := 0; k < nr && d.err == nil; k++ {
				r := int32(d.i())
				cnt := d.count("rank values", 9)
				vals := make(map[NodeID]Values, cnt)
				for j := 0; j < cnt && d.err == nil; j++ {
					id := NodeID(d.u64())
					vals[id] = d.values()
				}
				m[r] = vals
			}
		}
	}
	if d.err == nil && d.off != len(b) {
		d.field = "end"
		d.fail(fmt.Sprintf("%d bytes after the profile", len(b)-d.off))
	}
	if d.err != nil {
		return nil, d.err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
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
