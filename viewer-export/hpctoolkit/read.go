package hpctoolkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Database is an HPCToolkit v4 database as read from meta.db, profile.db and
// (if present) cct.db. Pointers of the files are resolved to indices.
type Database struct {
	Title, Description string
	IDNames            []string // identifier kind names, indexed by kind
	Scopes             []Scope
	Metrics            []Metric
	Modules            []string // load module paths
	Files              []string // source file paths
	Functions          []Function
	Entries            []*Context // entry points (Lexical is unused; Entry and PrettyName are set)
	// Contexts by ctxId (entries included).
	Contexts map[uint32]*Context
	Profiles []Profile
	// CCT: per context, per metric, the values by profile index (cct.db);
	// nil if cct.db is absent.
	CCT map[uint32]map[uint16]map[uint32]float64
}

// Scope is a propagation scope.
type Scope struct {
	Name  string
	Type  uint8 // 0 custom, 1 point, 2 execution, 3 transitive
	Index uint8 // propagation bit, for transitive scopes
}

// ScopeInst is one propagated variant of a metric.
type ScopeInst struct {
	Scope  int // index into Database.Scopes
	PropID uint16
}

// SummaryStat is one summary statistic of a metric.
type SummaryStat struct {
	Scope   int
	Formula string
	Combine uint8 // 0 sum, 1 min, 2 max
	StatID  uint16
}

// Metric is a performance metric with its propagated variants and summaries.
type Metric struct {
	Name      string
	Insts     []ScopeInst
	Summaries []SummaryStat
}

// Function is a named source construct. Module and File are -1 if absent.
type Function struct {
	Name   string
	Module int
	Offset uint64
	File   int
	Line   uint32
}

// Context is one node of the context tree. Function, File and Module are
// indices (or -1 when the context has no such field).
type Context struct {
	ID          uint32
	Parent      uint32 // 0 for entry points
	IsEntry     bool
	Entry       uint16
	PrettyName  string
	Relation    uint8
	Lexical     uint8
	Propagation uint16
	Function    int
	File        int
	Line        uint32
	Module      int
	Offset      uint64
	Children    []*Context
}

// ID is one identification of a hierarchical identifier tuple.
type ID struct {
	Kind     uint8
	Flags    uint16
	Logical  uint32
	Physical uint64
}

// Profile is one profile of profile.db.
type Profile struct {
	Summary bool
	IDs     []ID // nil for the canonical summary profile
	// Values: per ctxId, per metric id, the value.
	Values map[uint32]map[uint16]float64
}

// FormatError reports a malformed database file.
type FormatError struct {
	File string
	Msg  string
}

func (e *FormatError) Error() string { return "hpctoolkit: " + e.File + ": " + e.Msg }

// Read reads the database in dir (meta.db and profile.db, cct.db if present).
func Read(dir string) (*Database, error) {
	meta, err := os.ReadFile(filepath.Join(dir, "meta.db"))
	if err != nil {
		return nil, err
	}
	prof, err := os.ReadFile(filepath.Join(dir, "profile.db"))
	if err != nil {
		return nil, err
	}
	cct, err := os.ReadFile(filepath.Join(dir, "cct.db"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return Parse(meta, prof, cct)
}

// Parse reads a database from the bytes of its files; cct may be nil.
// Malformed input gives a *FormatError, never a panic.
func Parse(meta, prof, cct []byte) (*Database, error) {
	db := &Database{Contexts: map[uint32]*Context{}}
	if err := db.parseMeta(meta); err != nil {
		return nil, err
	}
	if err := db.parseProfiles(prof); err != nil {
		return nil, err
	}
	if cct != nil {
		if err := db.parseCCT(cct); err != nil {
			return nil, err
		}
	}
	return db, nil
}

// rd reads little-endian fields at absolute offsets, remembering the first
// out-of-range access instead of panicking.
type rd struct {
	b    []byte
	file string
	err  error
}

func (r *rd) fail(format string, a ...any) {
	if r.err == nil {
		r.err = &FormatError{File: r.file, Msg: fmt.Sprintf(format, a...)}
	}
}

func (r *rd) ok(off, n uint64) bool {
	if r.err != nil {
		return false
	}
	if off > uint64(len(r.b)) || n > uint64(len(r.b))-off {
		r.fail("read of %d bytes at %#x past the end (%d bytes)", n, off, len(r.b))
		return false
	}
	return true
}

func (r *rd) u8(off uint64) uint8 {
	if !r.ok(off, 1) {
		return 0
	}
	return r.b[off]
}

func (r *rd) u16(off uint64) uint16 {
	if !r.ok(off, 2) {
		return 0
	}
	return binary.LittleEndian.Uint16(r.b[off:])
}

func (r *rd) u32(off uint64) uint32 {
	if !r.ok(off, 4) {
		return 0
	}
	return binary.LittleEndian.Uint32(r.b[off:])
}

func (r *rd) u64(off uint64) uint64 {
	if !r.ok(off, 8) {
		return 0
	}
	return binary.LittleEndian.Uint64(r.b[off:])
}

func (r *rd) f64(off uint64) float64 { return math.Float64frombits(r.u64(off)) }

func (r *rd) str(off uint64) string {
	if !r.ok(off, 0) {
		return ""
	}
	for i := off; i < uint64(len(r.b)); i++ {
		if r.b[i] == 0 {
			return string(r.b[off:i])
		}
	}
	r.fail("string at %#x is not terminated", off)
	return ""
}

// header checks the common file header and footer and returns the section
// (size, pointer) pairs.
func (r *rd) header(format, footer string, nSections int) [][2]uint64 {
	if len(r.b) < 16+16*nSections+8 {
		r.fail("too short for a header (%d bytes)", len(r.b))
		return nil
	}
	if string(r.b[:10]) != "HPCTOOLKIT" {
		r.fail("bad magic %q", r.b[:10])
		return nil
	}
	if string(r.b[10:14]) != format {
		r.fail("format %q, want %q", r.b[10:14], format)
		return nil
	}
	if r.b[14] != 4 {
		r.fail("major version %d, want 4", r.b[14])
		return nil
	}
	if string(r.b[len(r.b)-8:]) != footer {
		r.fail("footer %q, want %q", r.b[len(r.b)-8:], footer)
		return nil
	}
	secs := make([][2]uint64, nSections)
	for i := range secs {
		sz, p := r.u64(uint64(16+16*i)), r.u64(uint64(24+16*i))
		if !r.ok(p, sz) {
			return nil
		}
		secs[i] = [2]uint64{sz, p}
	}
	return secs
}

// count bounds an element count by what the file can hold.
func (r *rd) count(n, stride, at uint64, what string) uint64 {
	if n == 0 {
		return 0
	}
	if stride == 0 {
		r.fail("%s: zero stride", what)
		return 0
	}
	if min := minStride[what]; stride < min {
		r.fail("%s: element size %d, below the format's %d", what, stride, min)
		return 0
	}
	if n > uint64(len(r.b))/stride { // also keeps n*stride from overflowing
		r.fail("%s: %d elements of %d bytes do not fit in the file", what, n, stride)
		return 0
	}
	if !r.ok(at, n*stride) {
		return 0
	}
	return n
}

// minStride is the smallest element size each array may declare: the
// fields this reader uses must lie inside one element.
var minStride = map[string]uint64{
	"scopes": 10, "metrics": 28, "scope instances": 10, "summaries": 20, "modules": 16, "files": 16,
	"functions": 36, "entry points": 32, "profiles": 44, "contexts": 32,
}

func (db *Database) parseMeta(b []byte) error {
	r := &rd{b: b, file: "meta.db"}
	secs := r.header("meta", "_meta.db", 8)
	if r.err != nil {
		return r.err
	}
	gen, names, mets, ctx, _, mods, files, funcs := secs[0], secs[1], secs[2], secs[3], secs[4], secs[5], secs[6], secs[7]
	db.Title = r.str(r.u64(gen[1]))
	db.Description = r.str(r.u64(gen[1] + 8))

	pNames, nKinds := r.u64(names[1]), uint64(r.u8(names[1]+8))
	for i := range r.count(nKinds, 8, pNames, "identifier names") {
		db.IDNames = append(db.IDNames, r.str(r.u64(pNames+8*i)))
	}
	db.parseMetrics(r, mets[1])
	mr := &metaRefs{r: r, db: db, seen: map[uint64]bool{}}
	db.Modules, mr.modAt = r.nameTable(mods[1], "modules")
	db.Files, mr.fileAt = r.nameTable(files[1], "files")
	mr.funcAt = mr.functions(funcs[1])

	pEntries, nEntries, szEntry := r.u64(ctx[1]), uint64(r.u16(ctx[1]+8)), uint64(r.u8(ctx[1]+10))
	if r.err != nil {
		return r.err
	}
	for i := range r.count(nEntries, szEntry, pEntries, "entry points") {
		o := pEntries + i*szEntry
		e := &Context{ID: r.u32(o + 16), IsEntry: true, Entry: r.u16(o + 20), PrettyName: r.str(r.u64(o + 24)), Function: -1, File: -1, Module: -1}
		db.addContext(r, e)
		db.Entries = append(db.Entries, e)
		mr.children(e, r.u64(o+8), r.u64(o), 1)
	}
	return r.err
}

// parseMetrics reads the Performance Metrics section at m: scopes first,
// as metrics refer to them by pointer.
func (db *Database) parseMetrics(r *rd, m uint64) {
	pMetrics, nMetrics := r.u64(m), uint64(r.u32(m+8))
	szMetric, szInst, szSum := uint64(r.u8(m+12)), uint64(r.u8(m+13)), uint64(r.u8(m+14))
	pScopes, nScopes, szScope := r.u64(m+16), uint64(r.u16(m+24)), uint64(r.u8(m+26))
	scopeAt := map[uint64]int{}
	for i := range r.count(nScopes, szScope, pScopes, "scopes") {
		o := pScopes + i*szScope
		scopeAt[o] = len(db.Scopes)
		db.Scopes = append(db.Scopes, Scope{Name: r.str(r.u64(o)), Type: r.u8(o + 8), Index: r.u8(o + 9)})
	}
	scope := func(p uint64) int {
		i, ok := scopeAt[p]
		if !ok {
			r.fail("metric refers to scope at %#x, which is not one", p)
		}
		return i
	}
	for i := range r.count(nMetrics, szMetric, pMetrics, "metrics") {
		o := pMetrics + i*szMetric
		md := Metric{Name: r.str(r.u64(o))}
		pInsts, pSums := r.u64(o+8), r.u64(o+16)
		nInsts, nSums := uint64(r.u16(o+24)), uint64(r.u16(o+26))
		for j := range r.count(nInsts, szInst, pInsts, "scope instances") {
			q := pInsts + j*szInst
			md.Insts = append(md.Insts, ScopeInst{Scope: scope(r.u64(q)), PropID: r.u16(q + 8)})
		}
		for j := range r.count(nSums, szSum, pSums, "summaries") {
			q := pSums + j*szSum
			md.Summaries = append(md.Summaries, SummaryStat{Scope: scope(r.u64(q)), Formula: r.str(r.u64(q + 8)), Combine: r.u8(q + 16), StatID: r.u16(q + 18)})
		}
		db.Metrics = append(db.Metrics, md)
	}
}

// nameTable reads the Load Modules or the Source Files section at p (the
// same layout): the paths, and each entry's index by its address.
func (r *rd) nameTable(p uint64, what string) ([]string, map[uint64]int) {
	var names []string
	at := map[uint64]int{}
	pNames, n, sz := r.u64(p), uint64(r.u32(p+8)), uint64(r.u16(p+12))
	for i := range r.count(n, sz, pNames, what) {
		o := pNames + i*sz
		at[o] = len(names)
		names = append(names, r.str(r.u64(o+8)))
	}
	return names, at
}

// metaRefs resolves meta.db's pointers to modules, files and functions
// into indexes while the functions and the context tree are read.
type metaRefs struct {
	r                     *rd
	db                    *Database
	modAt, fileAt, funcAt map[uint64]int
	seen                  map[uint64]bool // child arrays already read: a cycle would recurse forever
}

// ref is the index of the entry at p in at, -1 for none (p == 0).
func (mr *metaRefs) ref(at map[uint64]int, p uint64, what string) int {
	if p == 0 {
		return -1
	}
	i, ok := at[p]
	if !ok {
		mr.r.fail("reference to a %s at %#x, which is not one", what, p)
		return -1
	}
	return i
}

// functions reads the Functions section at p; it returns each entry's
// index by its address.
func (mr *metaRefs) functions(p uint64) map[uint64]int {
	r, db := mr.r, mr.db
	str := func(p uint64) string {
		if p == 0 {
			return ""
		}
		return r.str(p)
	}
	funcAt := map[uint64]int{}
	pFuncs, nFuncs, szFunc := r.u64(p), uint64(r.u32(p+8)), uint64(r.u16(p+12))
	for i := range r.count(nFuncs, szFunc, pFuncs, "functions") {
		o := pFuncs + i*szFunc
		funcAt[o] = len(db.Functions)
		db.Functions = append(db.Functions, Function{
			Name: str(r.u64(o)), Module: mr.ref(mr.modAt, r.u64(o+8), "module"), Offset: r.u64(o + 16),
			File: mr.ref(mr.fileAt, r.u64(o+24), "file"), Line: r.u32(o + 32),
		})
	}
	return funcAt
}

// children reads the children array of parent at p (sz bytes), and theirs
// in turn.
func (mr *metaRefs) children(parent *Context, p, sz uint64, depth int) {
	r := mr.r
	if sz == 0 || r.err != nil {
		return
	}
	if depth > 10000 || mr.seen[p] {
		r.fail("context %d: children at %#x loop or nest too deep", parent.ID, p)
		return
	}
	mr.seen[p] = true
	if !r.ok(p, sz) {
		return
	}
	for o := p; o < p+sz && r.err == nil; {
		c, nFlex := mr.context(parent, o)
		if c == nil {
			return
		}
		mr.db.addContext(r, c)
		parent.Children = append(parent.Children, c)
		mr.children(c, r.u64(o+8), r.u64(o), depth+1)
		o += 32 + 8*nFlex
	}
}

// context reads the child of parent at o and the number of its flex
// words; nil if they run past the data.
func (mr *metaRefs) context(parent *Context, o uint64) (*Context, uint64) {
	r := mr.r
	c := &Context{
		ID: r.u32(o + 16), Parent: parent.ID, Relation: r.u8(o + 21), Lexical: r.u8(o + 22),
		Propagation: r.u16(o + 24), Function: -1, File: -1, Module: -1,
	}
	flags, nFlex := r.u8(o+20), uint64(r.u8(o+23))
	if !r.ok(o, 32+8*nFlex) {
		return nil, 0
	}
	// flex sub-fields pack in order; two u32 share a word.
	w, half := o+32, false
	next := func(size uint64) uint64 {
		var at uint64
		if size == 4 && half {
			at, half = w-4, false
		} else {
			if w+size > o+32+8*nFlex {
				r.fail("context %d: flex fields overrun %d words", c.ID, nFlex)
				return o
			}
			at = w
			w += 8
			half = size == 4
		}
		return at
	}
	if flags&1 != 0 {
		c.Function = mr.ref(mr.funcAt, r.u64(next(8)), "function")
	}
	if flags&2 != 0 {
		c.File = mr.ref(mr.fileAt, r.u64(next(8)), "file")
		c.Line = r.u32(next(4))
	}
	if flags&4 != 0 {
		c.Module = mr.ref(mr.modAt, r.u64(next(8)), "module")
		c.Offset = r.u64(next(8))
	}
	return c, nFlex
}

func (db *Database) addContext(r *rd, c *Context) {
	if c.ID == 0 {
		r.fail("context id 0 is reserved for the global context")
		return
	}
	if _, dup := db.Contexts[c.ID]; dup {
		r.fail("context id %d appears twice", c.ID)
		return
	}
	db.Contexts[c.ID] = c
}

func (db *Database) parseProfiles(b []byte) error {
	r := &rd{b: b, file: "profile.db"}
	secs := r.header("prof", "_prof.db", 2)
	if r.err != nil {
		return r.err
	}
	pi := secs[0][1]
	pProfs, nProfs, szProf := r.u64(pi), uint64(r.u32(pi+8)), uint64(r.u8(pi+12))
	for i := range r.count(nProfs, szProf, pProfs, "profiles") {
		o := pProfs + i*szProf
		pr := Profile{Summary: r.u32(o+40)&1 != 0, Values: map[uint32]map[uint16]float64{}}
		if pt := r.u64(o + 32); pt != 0 {
			n := uint64(r.u16(pt))
			for j := range r.count(n, 16, pt+8, "identifier tuple") {
				q := pt + 8 + 16*j
				pr.IDs = append(pr.IDs, ID{Kind: r.u8(q), Flags: r.u16(q + 2), Logical: r.u32(q + 4), Physical: r.u64(q + 8)})
			}
		}
		nValues, pValues := r.u64(o), r.u64(o+8)
		nCtxs, pIdx := uint64(r.u32(o+16)), r.u64(o+24)
		nValues = r.count(nValues, 10, pValues, "values")
		nCtxs = r.count(nCtxs, 12, pIdx, "context indices")
		for j := uint64(0); j < nCtxs && r.err == nil; j++ {
			ctx, start := r.u32(pIdx+12*j), r.u64(pIdx+12*j+4)
			end := nValues
			if j+1 < nCtxs {
				end = r.u64(pIdx + 12*(j+1) + 4)
			}
			if start > end || end > nValues {
				r.fail("profile %d context %d: value range [%d, %d) outside %d values", i, ctx, start, end, nValues)
				break
			}
			vals := map[uint16]float64{}
			for k := start; k < end; k++ {
				vals[r.u16(pValues+10*k)] = r.f64(pValues + 10*k + 2)
			}
			pr.Values[ctx] = vals
		}
		db.Profiles = append(db.Profiles, pr)
	}
	return r.err
}

func (db *Database) parseCCT(b []byte) error {
	r := &rd{b: b, file: "cct.db"}
	secs := r.header("ctxt", "__ctx.db", 1)
	if r.err != nil {
		return r.err
	}
	ci := secs[0][1]
	pCtxs, nCtxs, szCtx := r.u64(ci), uint64(r.u32(ci+8)), uint64(r.u8(ci+12))
	db.CCT = map[uint32]map[uint16]map[uint32]float64{}
	for i := range r.count(nCtxs, szCtx, pCtxs, "contexts") {
		o := pCtxs + i*szCtx
		nValues, pValues := r.u64(o), r.u64(o+8)
		nMets, pIdx := uint64(r.u16(o+16)), r.u64(o+24)
		nValues = r.count(nValues, 12, pValues, "values")
		nMets = r.count(nMets, 10, pIdx, "metric indices")
		if nMets == 0 {
			continue
		}
		per := map[uint16]map[uint32]float64{}
		for j := uint64(0); j < nMets && r.err == nil; j++ {
			met, start := r.u16(pIdx+10*j), r.u64(pIdx+10*j+2)
			end := nValues
			if j+1 < nMets {
				end = r.u64(pIdx + 10*(j+1) + 2)
			}
			if start > end || end > nValues {
				r.fail("context %d metric %d: value range [%d, %d) outside %d values", i, met, start, end, nValues)
				break
			}
			vals := map[uint32]float64{}
			for k := start; k < end; k++ {
				vals[r.u32(pValues+12*k)] = r.f64(pValues + 12*k + 4)
			}
			per[met] = vals
		}
		db.CCT[uint32(i)] = per
	}
	return r.err
}

// MetricByProp returns the metric and scope name of a propagated metric id.
func (db *Database) MetricByProp(id uint16) (metric, scope string, ok bool) {
	for _, m := range db.Metrics {
		for _, in := range m.Insts {
			if in.PropID == id && in.Scope >= 0 && in.Scope < len(db.Scopes) {
				return m.Name, db.Scopes[in.Scope].Name, true
			}
		}
	}
	return "", "", false
}

// ContextIDs returns every context id, ascending.
func (db *Database) ContextIDs() []uint32 {
	ids := make([]uint32, 0, len(db.Contexts))
	for id := range db.Contexts {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Name is a readable name of a context: its function, file:line or
// module+offset, as its lexical type says.
func (db *Database) Name(c *Context) string {
	if c.IsEntry {
		return c.PrettyName
	}
	switch c.Lexical {
	case LexFunction:
		if c.Function >= 0 && c.Function < len(db.Functions) {
			return db.Functions[c.Function].Name
		}
		return "<unknown function>"
	case LexInstruction:
		m := "?"
		if c.Module >= 0 && c.Module < len(db.Modules) {
			m = db.Modules[c.Module]
		}
		return fmt.Sprintf("%s+%#x", m, c.Offset)
	default:
		f := "?"
		if c.File >= 0 && c.File < len(db.Files) {
			f = db.Files[c.File]
		}
		return fmt.Sprintf("%s:%d", f, c.Line)
	}
}
