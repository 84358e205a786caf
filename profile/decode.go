package profile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
)

// Decoding of the profile encoding (encode.go): every field checked,
// errors naming the offset and the field.

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
	d.head(p)
	d.nodes(p, fill)
	d.symbols(p)
	d.accessTables(p, fill)
	d.rankInfos(p)
	single = d.rankTables(p, fill)
	if d.err == nil && d.off != len(b) {
		d.field = "end"
		d.fail(fmt.Sprintf("%d bytes after the profile", len(b)-d.off))
	}
	if d.err != nil {
		return nil, false, d.err
	}
	return p, single, nil
}

// head reads the job, the metric name table and every rank's items.
func (d *dec) head(p *Profile) {
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
}

// nodes reads the node table into one block of nodes.
func (d *dec) nodes(p *Profile, fill func(func())) {
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
}

// symbols reads the modules, functions and objects.
func (d *dec) symbols(p *Profile) {
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
}

// accessTables reads the temporal, spatial, PC and object statistics.
func (d *dec) accessTables(p *Profile, fill func(func())) {
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
}

// rankInfos reads the rank information table.
func (d *dec) rankInfos(p *Profile) {
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
		if d.version >= 6 {
			ri.SpatialLevel = uint32(d.u())
		}
		p.Ranks[ri.Rank] = ri
	}
}

// rankTables reads the summaries and the Open and PerRank tables, or the
// mark that they are to be derived (single, see singleRank).
func (d *dec) rankTables(p *Profile, fill func(func())) (single bool) {
	d.field = "rank tables"
	explicit := d.u()
	if d.err == nil && explicit == 0 {
		if _, ok := p.singleRank(); ok {
			return true
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
	return false
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
