package hpctoolkit

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/symname"
	"gpuprof/viewer-export/internal/view"
)

// Scope order of every metric's propagated variants: propMetricId is
// 4*metric + scope, as hpcprof numbers them.
const (
	scPoint = iota
	scFunction
	scLexAware
	scExecution
	nScopes
)

var scopeDefs = [nScopes]Scope{
	{Name: "point", Type: ScopePoint, Index: 255},
	{Name: "function", Type: ScopeTransitive, Index: 0},
	{Name: "lex_aware", Type: ScopeCustom, Index: 255},
	{Name: "execution", Type: ScopeExecution, Index: 255},
}

// Summary statistics per scope. The sum statistic reuses the propagated id
// (as hpcprof does, and as readers that key the summary profile by
// propagated id expect); the others get ids after all propagated ids.
const (
	stSum = iota
	stMin
	stMax
	stCount
	stSumSq
	nStats
)

var statDefs = [nStats]struct {
	formula string
	combine uint8
}{
	{"$$", 0}, {"$$", 1}, {"$$", 2}, {"1", 0}, {"$$^2", 0},
}

// Identifier kinds, in hpcprof's order.
var idNames = []string{"SUMMARY", "NODE", "RANK", "THREAD", "GPUDEVICE", "GPUCONTEXT", "GPUSTREAM", "CORE"}

const (
	idNode      = 1
	idRank      = 2
	idGPUDevice = 4
)

// ctx is a context of the database tree being built.
type ctx struct {
	id       uint32
	parent   *ctx
	rel, lex uint8
	fn, file int // indices, -1 if absent
	mod      int
	line     uint32
	off      uint64
	children []*ctx
	kids     map[string]*ctx // children by identity, so equal frames share a context
	nodes    []profile.NodeID
	internal bool // represents GPU-internal nodes (no per-rank values)
}

func (c *ctx) flags() uint8 {
	var f uint8
	if c.fn >= 0 {
		f |= 1
	}
	if c.file >= 0 {
		f |= 2
	}
	if c.mod >= 0 {
		f |= 4
	}
	return f
}

func (c *ctx) flexWords() int {
	n := 0
	if c.fn >= 0 {
		n++
	}
	if c.file >= 0 {
		n += 2
	}
	if c.mod >= 0 {
		n += 2
	}
	return n
}

func (c *ctx) size() uint64 { return 32 + 8*uint64(c.flexWords()) }

type function struct {
	name      string
	raw       string // the symbol as measured: distinct symbols stay distinct functions even if they demangle alike
	mod, file int
	off       uint64
}

// builder turns a profile into the database's tables.
type builder struct {
	p        *profile.Profile
	modules  []string
	modIdx   map[string]int
	files    []string
	fileIdx  map[string]int
	funcs    []function
	funcIdx  map[function]int
	entry    *ctx
	all      []*ctx // by id-1
	rep      map[profile.NodeID]*ctx
	metrics  []profile.MetricID
	metIdx   map[profile.MetricID]int
	ranks    []int32
	gpus     analysis.GPUs
	nextStat int
}

func (b *builder) module(path string) int {
	if i, ok := b.modIdx[path]; ok {
		return i
	}
	b.modIdx[path] = len(b.modules)
	b.modules = append(b.modules, path)
	return len(b.modules) - 1
}

func (b *builder) file(path string) int {
	if path == "" {
		path = "<unknown file>"
	}
	if i, ok := b.fileIdx[path]; ok {
		return i
	}
	b.fileIdx[path] = len(b.files)
	b.files = append(b.files, path)
	return len(b.files) - 1
}

func (b *builder) function(f function) int {
	if i, ok := b.funcIdx[f]; ok {
		return i
	}
	b.funcIdx[f] = len(b.funcs)
	b.funcs = append(b.funcs, f)
	return len(b.funcs) - 1
}

// child returns parent's child of the given shape, creating it once.
func (b *builder) child(parent *ctx, rel, lex uint8, fn, file int, line uint32, mod int, off uint64) *ctx {
	key := fmt.Sprint(rel, lex, fn, file, line, mod, off)
	if c, ok := parent.kids[key]; ok {
		return c
	}
	c := &ctx{parent: parent, rel: rel, lex: lex, fn: fn, file: file, line: line, mod: mod, off: off, kids: map[string]*ctx{}}
	parent.kids[key] = c
	parent.children = append(parent.children, c)
	return c
}

// FunctionName is the name the database gives a frame's function: the
// demangled symbol, "<gpu kernel> NAME" for a kernel launch, or a
// placeholder with the address for an unsymbolised host frame.
func FunctionName(f profile.Frame) string {
	name := symname.Demangle(f.Function)
	switch {
	case f.Kind == profile.KindKernel:
		if name == "" {
			name = "<unknown>"
		}
		return "<gpu kernel> " + name
	case name == "" && f.Kind == profile.KindHostFrame:
		return fmt.Sprintf("<unknown function 0x%x>", f.Offset)
	case name == "":
		return "<unknown function>"
	}
	return name
}

// unknownOff keeps an unsymbolised host frame's address as its function's
// entry offset.
func unknownOff(f profile.Frame) uint64 {
	if f.Function == "" {
		return f.Offset
	}
	return 0
}

// build maps the calling-context tree onto HPCToolkit's lexical contexts:
//   - root: the "main thread" entry point;
//   - host frame: function (call) + source line (lexical) of the call site,
//     the frame's values on the line; an unsymbolised frame is a function
//     named by its address;
//   - kernel: a function "<gpu kernel> NAME" in the GPU module (call);
//   - GPU function: function (call);
//   - inlined frame: call-site line (lexical) + function (inlined call);
//   - loop: loop at its header line, with the header's offset;
//   - line: line; instruction: instruction (GPU module, offset in its function).
func (b *builder) build() {
	p := b.p
	b.entry = &ctx{fn: -1, file: -1, mod: -1, kids: map[string]*ctx{}}
	ch := p.Children()
	for _, kids := range ch {
		sort.Slice(kids, func(i, j int) bool {
			a, c := p.Nodes[kids[i]].Frame.String(), p.Nodes[kids[j]].Frame.String()
			if a != c {
				return a < c
			}
			return kids[i] < kids[j]
		})
	}
	// Load modules: host binaries as they appear, then every GPU module.
	hashes := make([]profile.ModuleHash, 0, len(p.Modules))
	for h := range p.Modules {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool { return hashes[i] < hashes[j] })
	for _, h := range hashes {
		b.module(view.GPUModulePath(p, h.String()))
	}
	var walk func(id profile.NodeID, at *ctx, gpuMod int)
	walk = func(id profile.NodeID, at *ctx, gpuMod int) {
		n := p.Nodes[id]
		f := n.Frame
		rep := at
		switch f.Kind {
		case profile.KindRoot:
			rep = b.entry
		case profile.KindHostFrame:
			mod := -1
			if f.Module != "" {
				mod = b.module(f.Module)
			}
			fl := -1
			if f.File != "" {
				fl = b.file(f.File)
			}
			fn := b.function(function{name: FunctionName(f), raw: f.Function, mod: mod, file: fl, off: unknownOff(f)})
			rep = b.child(at, RelCall, LexFunction, fn, -1, 0, -1, 0)
			if f.File != "" || f.Line != 0 {
				rep = b.child(rep, RelLexical, LexLine, -1, b.file(f.File), f.Line, -1, 0)
			}
		case profile.KindKernel:
			gpuMod = b.module(view.GPUModulePath(p, f.Module))
			fn := b.function(function{name: FunctionName(f), raw: f.Function, mod: gpuMod, file: -1})
			rep = b.child(at, RelCall, LexFunction, fn, -1, 0, -1, 0)
		case profile.KindGPUFunction:
			if f.Module != "" {
				gpuMod = b.module(view.GPUModulePath(p, f.Module))
			}
			fn := b.function(function{name: FunctionName(f), raw: f.Function, mod: gpuMod, file: -1})
			rep = b.child(at, RelCall, LexFunction, fn, -1, 0, -1, 0)
		case profile.KindInlined:
			site := at
			if f.File != "" || f.Line != 0 {
				site = b.child(at, RelLexical, LexLine, -1, b.file(f.File), f.Line, -1, 0)
			}
			fn := b.function(function{name: FunctionName(f), raw: f.Function, mod: gpuMod, file: -1})
			rep = b.child(site, RelInlined, LexFunction, fn, -1, 0, -1, 0)
		case profile.KindLoop:
			rep = b.child(at, RelLexical, LexLoop, -1, b.file(f.File), f.Line, gpuMod, f.Offset)
		case profile.KindLine:
			rep = b.child(at, RelLexical, LexLine, -1, b.file(f.File), f.Line, -1, 0)
		case profile.KindInstruction:
			mod := gpuMod
			if mod < 0 {
				mod = b.module("<unknown module>")
			}
			rep = b.child(at, RelLexical, LexInstruction, -1, -1, 0, mod, f.Offset)
		}
		rep.nodes = append(rep.nodes, id)
		if !profile.IsLaunchContext(f.Kind) && f.Kind != profile.KindRoot && len(n.Metrics) > 0 {
			rep.internal = true
		}
		b.rep[id] = rep
		for _, c := range ch[id] {
			walk(c, rep, gpuMod)
		}
	}
	walk(profile.RootID, b.entry, -1)
	// Ids in depth-first order, children as built (sorted frames).
	var number func(c *ctx)
	number = func(c *ctx) {
		b.all = append(b.all, c)
		c.id = uint32(len(b.all))
		for _, k := range c.children {
			number(k)
		}
	}
	number(b.entry)
}

// values holds one profile's values: per context index (id-1), per metric
// index, per scope.
type values [][][nScopes]float64

func (b *builder) newValues() values {
	v := make(values, len(b.all))
	for i := range v {
		v[i] = make([][nScopes]float64, len(b.metrics))
	}
	return v
}

// propagate fills the function, lex_aware and execution scopes from the
// point values: execution sums every descendant, function (and lex_aware)
// the descendants reached through lexical nesting only.
func (b *builder) propagate(v values) {
	for i := len(b.all) - 1; i >= 0; i-- { // children have larger ids
		c := b.all[i]
		for m := range b.metrics {
			v[i][m][scFunction] += v[i][m][scPoint]
			v[i][m][scLexAware] = v[i][m][scFunction]
			v[i][m][scExecution] += v[i][m][scPoint]
		}
		if c.parent == nil {
			continue
		}
		pi := c.parent.id - 1
		for m := range b.metrics {
			v[pi][m][scExecution] += v[i][m][scExecution]
			if c.rel == RelLexical {
				v[pi][m][scFunction] += v[i][m][scFunction]
			}
		}
	}
}

func (b *builder) pointValues(get func(id profile.NodeID) profile.Values) values {
	v := b.newValues()
	for i, c := range b.all {
		for _, id := range c.nodes {
			for _, mv := range get(id) {
				if m, ok := b.metIdx[mv.ID]; ok {
					v[i][m][scPoint] += float64(mv.V)
				}
			}
		}
	}
	b.propagate(v)
	return v
}

// stat is a summary statistic over ranks of one (context, metric, scope).
type stat struct {
	ok                 bool
	min, max, n, sumSq float64
}

// Write writes p as an HPCToolkit database into dir (created if needed):
// meta.db, profile.db (the summary profile, then one profile per rank),
// cct.db and metrics/default.yaml.
func Write(dir string, p *profile.Profile) error {
	meta, prof, cct, yaml, err := Encode(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "metrics"), 0o755); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"meta.db": meta, "profile.db": prof, "cct.db": cct, "metrics/default.yaml": yaml} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Encode returns the bytes of meta.db, profile.db, cct.db and
// metrics/default.yaml for p.
func Encode(p *profile.Profile) (meta, prof, cct, yaml []byte, err error) {
	b := &builder{p: p, modIdx: map[string]int{}, fileIdx: map[string]int{}, funcIdx: map[function]int{}, rep: map[profile.NodeID]*ctx{}}
	if _, ok := p.Nodes[profile.RootID]; !ok {
		return nil, nil, nil, nil, fmt.Errorf("hpctoolkit: profile has no root node")
	}
	b.metrics = view.Metrics(p)
	if nScopes*(1+nStats)*len(b.metrics) > math.MaxUint16 {
		return nil, nil, nil, nil, fmt.Errorf("hpctoolkit: %d metrics exceed the format's 16-bit metric ids", len(b.metrics))
	}
	b.metIdx = map[profile.MetricID]int{}
	for i, m := range b.metrics {
		b.metIdx[m] = i
	}
	b.ranks = p.SortedRanks()
	b.gpus = analysis.GPUsOf(p)
	b.build()
	if len(b.all) > math.MaxUint32-1 {
		return nil, nil, nil, nil, fmt.Errorf("hpctoolkit: too many contexts (%d)", len(b.all))
	}

	sum := b.pointValues(func(id profile.NodeID) profile.Values { return p.Nodes[id].Metrics })
	perRank := make([]values, len(b.ranks))
	for i, r := range b.ranks {
		per := p.PerRank[r]
		perRank[i] = b.pointValues(func(id profile.NodeID) profile.Values { return per[id] })
	}
	stats := b.stats(perRank)

	meta = b.encodeMeta()
	prof = b.encodeProfiles(sum, perRank, stats)
	cct = b.encodeCCT(perRank)
	yaml = b.encodeYAML()
	return meta, prof, cct, yaml, nil
}

// stats computes min, max, count and sum of squares over ranks. Exact where
// every value a context sums is kept per rank (launch contexts, and scopes
// that do not reach GPU-internal contexts); from the profile's own
// cross-rank summaries for a GPU-internal context's point value, and for
// every scope of one whose sums include nothing else; absent otherwise.
func (b *builder) stats(perRank []values) [][][nScopes]stat {
	out := make([][][nScopes]stat, len(b.all))
	// internal[i][s]: the scope-s sum at context i includes GPU-internal
	// values; others[i][s]: it includes values of contexts other than i.
	internal := make([][nScopes]bool, len(b.all))
	others := make([][nScopes]bool, len(b.all))
	hasVal := func(i int) bool {
		for _, id := range b.all[i].nodes {
			if len(b.p.Nodes[id].Metrics) > 0 {
				return true
			}
		}
		return false
	}
	for i := len(b.all) - 1; i >= 0; i-- {
		c := b.all[i]
		for s := range nScopes {
			internal[i][s] = internal[i][s] || c.internal
		}
		if c.parent == nil {
			continue
		}
		pi := c.parent.id - 1
		contributes := hasVal(i) || others[i][scExecution]
		internal[pi][scExecution] = internal[pi][scExecution] || internal[i][scExecution]
		others[pi][scExecution] = others[pi][scExecution] || contributes
		if c.rel == RelLexical {
			for _, s := range []int{scFunction, scLexAware} {
				internal[pi][s] = internal[pi][s] || internal[i][s]
				others[pi][s] = others[pi][s] || hasVal(i) || others[i][s]
			}
		}
	}
	for i, c := range b.all {
		out[i] = make([][nScopes]stat, len(b.metrics))
		for s := range nScopes {
			switch {
			case !internal[i][s]:
				for m := range b.metrics {
					st := stat{}
					for _, v := range perRank {
						x := v[i][m][s]
						if x == 0 {
							continue
						}
						if !st.ok {
							st = stat{ok: true, min: x, max: x}
						}
						st.min, st.max = math.Min(st.min, x), math.Max(st.max, x)
						st.n++
						st.sumSq += x * x
					}
					out[i][m][s] = st
				}
			case len(c.nodes) == 1 && (s == scPoint || !others[i][s]):
				ss := b.p.Summaries[c.nodes[0]]
				for _, ms := range ss {
					m, ok := b.metIdx[ms.ID]
					if !ok || ms.S.N == 0 {
						continue
					}
					sq := float64(ms.S.SumSqHi)*math.Exp2(64) + float64(ms.S.SumSqLo)
					out[i][m][s] = stat{ok: true, min: float64(ms.S.Min), max: float64(ms.S.Max), n: float64(ms.S.N), sumSq: sq}
				}
			}
		}
	}
	return out
}

func (b *builder) propID(m, s int) uint16 { return uint16(nScopes*m + s) }

// statID: the sum statistic shares the propagated id; the others follow
// all propagated ids.
func (b *builder) statID(m, s, st int) uint16 {
	if st == stSum {
		return b.propID(m, s)
	}
	base := nScopes * len(b.metrics)
	return uint16(base + ((m*nScopes+s)*(nStats-1) + st - 1))
}
