package hpctoolkit

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

var lexKinds = map[uint8]string{LexFunction: "function", LexLoop: "loop", LexLine: "line", LexInstruction: "instruction"}

// hatchetName names a context the way Hatchet's reader does.
func (db *Database) hatchetName(c *Context) string {
	if c.IsEntry {
		return "entry entry"
	}
	var n string
	switch c.Lexical {
	case LexFunction:
		n = hatchetFunc(db.Functions[c.Function].Name)
	case LexInstruction:
		n = fmt.Sprintf("%s:%d", db.Modules[c.Module], c.Offset)
	default:
		n = fmt.Sprintf("%s:%d", db.Files[c.File], c.Line)
	}
	return lexKinds[c.Lexical] + " " + n
}

// paths maps each context to its path of names, and back.
func (db *Database) paths() (map[uint32]string, map[string][]uint32) {
	byID := map[uint32]string{}
	byPath := map[string][]uint32{}
	var walk func(c *Context, prefix string)
	walk = func(c *Context, prefix string) {
		p := db.hatchetName(c)
		if prefix != "" {
			p = prefix + " > " + p
		}
		byID[c.ID] = p
		byPath[p] = append(byPath[p], c.ID)
		for _, k := range c.Children {
			walk(k, p)
		}
	}
	for _, e := range db.Entries {
		walk(e, "")
	}
	return byID, byPath
}

// ids returns the propagated id of each metric name in the named scope,
// and the summary statistic ids by (metric, scope, formula, combine).
func ids(db *Database, scope string) map[string]uint16 {
	out := map[string]uint16{}
	for _, m := range db.Metrics {
		for _, in := range m.Insts {
			if db.Scopes[in.Scope].Name == scope {
				out[m.Name] = in.PropID
			}
		}
	}
	return out
}

func statID(t *testing.T, db *Database, metric, scope, formula string, combine uint8) uint16 {
	t.Helper()
	for _, m := range db.Metrics {
		if m.Name != metric {
			continue
		}
		for _, s := range m.Summaries {
			if db.Scopes[s.Scope].Name == scope && s.Formula == formula && s.Combine == combine {
				return s.StatID
			}
		}
	}
	t.Fatalf("no statistic %s %s %s %d", metric, scope, formula, combine)
	return 0
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func roundTrip(t *testing.T, p *profile.Profile) *Database {
	t.Helper()
	meta, prof, cct, _, err := Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Parse(meta, prof, cct)
	if err != nil {
		t.Fatalf("our own database does not parse: %v", err)
	}
	return db
}

func TestWriteRoundTrip(t *testing.T) {
	p := exporttest.Profile(8, 2, exporttest.Shape)
	db := roundTrip(t, p)
	if db.Title != exporttest.Job || len(db.Entries) != 1 || db.Entries[0].Entry != 1 {
		t.Fatalf("title %q entries %+v", db.Title, db.Entries)
	}
	tree, nodePath := expectTree(p)
	wantInc, wantExc, kinds := tree.flatten()
	byID, byPath := db.paths()
	for path := range kinds {
		if len(byPath[path]) != 1 {
			t.Errorf("context %s: %d in the database, want 1", path, len(byPath[path]))
		}
	}
	if len(byID) != len(kinds) {
		t.Errorf("%d contexts in the database, %d expected", len(byID), len(kinds))
	}

	sum := db.Profiles[0]
	exec, fn, point := ids(db, "execution"), ids(db, "function"), ids(db, "point")
	for path, want := range wantInc {
		id := byPath[path]
		if len(id) != 1 {
			continue
		}
		for m, v := range want {
			if got := sum.Values[id[0]][exec[m]]; !near(got, v) {
				t.Errorf("%s: inclusive %s %v, want %v", path, m, got, v)
			}
		}
		for m, v := range wantExc[path] {
			if got := sum.Values[id[0]][fn[m]]; !near(got, v) {
				t.Errorf("%s: exclusive %s %v, want %v", path, m, got, v)
			}
		}
	}
	// Totals: the global context and the entry hold the whole program.
	total := map[string]float64{}
	for _, n := range p.Nodes {
		for _, v := range n.Metrics {
			total[v.ID.Name()] += float64(v.V)
		}
	}
	for m, v := range total {
		if got := sum.Values[0][exec[m]]; !near(got, v) {
			t.Errorf("global %s = %v, want %v", m, got, v)
		}
	}
	// The stencil kernel: inclusive values equal gpuprof's own, and the
	// cross-rank statistics its summaries.
	k := exporttest.KernelNode(p)
	kid := byPath[nodePath[k]][0]
	for _, v := range p.Inclusive()[k] {
		if got := sum.Values[kid][exec[v.ID.Name()]]; !near(got, float64(v.V)) {
			t.Errorf("kernel inclusive %s %v, want %v", v.ID.Name(), got, v.V)
		}
	}
	s := p.Summaries[k].Get(profile.GPUTime)
	tn := profile.GPUTime.Name()
	for _, c := range []struct {
		what    string
		formula string
		combine uint8
		want    float64
	}{{"min", "$$", 1, float64(s.Min)}, {"max", "$$", 2, float64(s.Max)}, {"count", "1", 0, float64(s.N)}, {"sum", "$$", 0, float64(s.Sum)}} {
		if got := sum.Values[kid][statID(t, db, tn, "point", c.formula, c.combine)]; !near(got, c.want) {
			t.Errorf("kernel %s %s over ranks %v, want %v", tn, c.what, got, c.want)
		}
	}
	if s.Max == s.Min || s.N != 8 {
		t.Fatalf("test profile should show imbalance over 8 ranks: %+v", s)
	}
	// A GPU instruction: statistics from the profile's summaries.
	for id, n := range p.Nodes {
		if n.Frame.Kind != profile.KindInstruction || n.Frame.Offset != 0x110 {
			continue
		}
		ss := p.Summaries[id].Get(profile.InstSamples)
		cid := byPath[nodePath[id]][0]
		for _, sc := range []string{"point", "execution"} {
			if got := sum.Values[cid][statID(t, db, "inst.samples", sc, "$$", 2)]; !near(got, float64(ss.Max)) {
				t.Errorf("instruction %s max inst.samples %v, want %v", sc, got, ss.Max)
			}
		}
	}

	// One profile per rank with (NODE, GPUDEVICE, RANK) and launch-context
	// values: each rank its own GPU, known by UUID (the index on the host
	// stands for the unknown ordinal).
	ranks := p.SortedRanks()
	if len(db.Profiles) != 1+len(ranks) {
		t.Fatalf("%d profiles for %d ranks", len(db.Profiles), len(ranks))
	}
	for i, r := range ranks {
		pr := db.Profiles[i+1]
		if pr.Summary || len(pr.IDs) != 3 || db.IDNames[pr.IDs[0].Kind] != "NODE" || db.IDNames[pr.IDs[1].Kind] != "GPUDEVICE" || db.IDNames[pr.IDs[2].Kind] != "RANK" ||
			pr.IDs[2].Logical != uint32(r) || pr.IDs[1].Logical != uint32(r) || pr.IDs[0].Flags&1 == 0 {
			t.Errorf("rank %d: profile ids %+v", r, pr.IDs)
		}
		want := map[string]map[string]float64{}
		all := map[string]float64{}
		for id, vs := range p.PerRank[r] {
			for _, v := range vs {
				add(want, nodePath[id], map[string]float64{v.ID.Name(): float64(v.V)})
				all[v.ID.Name()] += float64(v.V)
			}
		}
		for path, vals := range want {
			for m, v := range vals {
				if got := pr.Values[byPath[path][0]][point[m]]; !near(got, v) {
					t.Errorf("rank %d %s: %s %v, want %v", r, path, m, got, v)
				}
			}
		}
		for m, v := range all {
			if got := pr.Values[0][exec[m]]; !near(got, v) {
				t.Errorf("rank %d global %s %v, want %v", r, m, got, v)
			}
		}
		// GPU-internal contexts are in the summary profile only.
		for ctx := range pr.Values {
			if c := db.Contexts[ctx]; c != nil && c.Lexical == LexInstruction {
				t.Errorf("rank %d has values at instruction %s", r, byID[ctx])
			}
		}
	}
	for ctx, mets := range db.CCT {
		for met, per := range mets {
			for prof, v := range per {
				if got := db.Profiles[prof].Values[ctx][met]; prof == 0 || got != v {
					t.Errorf("cct.db ctx %d metric %d profile %d: %v, profile.db %v", ctx, met, prof, v, got)
				}
			}
		}
	}
	// Execution scope is exactly the point value plus the children's.
	for _, mid := range exec {
		pid := point[db.metricOfProp(mid)]
		for _, id := range db.ContextIDs() {
			c := db.Contexts[id]
			x := sum.Values[id][pid]
			for _, k := range c.Children {
				x += sum.Values[k.ID][mid]
			}
			if !near(sum.Values[id][mid], x) {
				t.Errorf("%s: inclusive %v != point + children %v", byID[id], sum.Values[id][mid], x)
			}
		}
	}
}

// The taxonomy's references all name inputs it defines, and every metric
// has a root with its four variants.
// Four ranks on two GPUs of one host: each rank's profile is identified by
// (NODE, GPUDEVICE = its CUDA ordinal, RANK), and the description groups
// the ranks by host and GPU with their PC-sampling state. A profile whose
// ranks' GPUs are unknown keeps (NODE, RANK).
func TestWriteMultiGPU(t *testing.T) {
	p := exporttest.MultiGPU(4, 1, 2, 1, 2)
	db := roundTrip(t, p)
	for r := int32(0); r < 4; r++ {
		ids := db.Profiles[r+1].IDs
		if len(ids) != 3 || db.IDNames[ids[1].Kind] != "GPUDEVICE" || ids[1].Logical != uint32(r%2) || ids[1].Flags&1 != 0 || ids[2].Logical != uint32(r) {
			t.Errorf("rank %d: profile ids %+v", r, ids)
		}
	}
	for _, want := range []string{
		"Ranks by host and GPU: 2 GPUs on 1 host, 2 ranks each.",
		"| gpu00 | 0 | GPU-3f2a1b90 | NVIDIA H100 80GB HBM3 | 0,2 | rank 0 sampled, rank 2 kernel times only |",
		"| gpu00 | 1 | GPU-3f2a1b91 | NVIDIA H100 80GB HBM3 | 1,3 | rank 1 sampled, rank 3 kernel times only |",
		"| 3 | gpu00 | NVIDIA H100 80GB HBM3 | 1 · GPU-3f2a1b91 | kernel times only |",
		"PC sampling: one process per GPU is PC-sampled",
	} {
		if !strings.Contains(db.Description, want) {
			t.Errorf("description lacks %q:\n%s", want, db.Description)
		}
	}
	for _, ri := range p.Ranks {
		ri.GPUUUID, ri.Device = "", ""
	}
	db = roundTrip(t, p)
	if ids := db.Profiles[1].IDs; len(ids) != 2 || db.IDNames[ids[1].Kind] != "RANK" {
		t.Errorf("without GPU identities: profile ids %+v", ids)
	}
}

func TestYAMLAnchors(t *testing.T) {
	p := exporttest.Profile(2, 1, exporttest.Shape)
	_, _, _, y, err := Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]bool{}
	for _, m := range regexp.MustCompile(`&([A-Za-z0-9_-]+)`).FindAllStringSubmatch(string(y), -1) {
		if defs[m[1]] {
			t.Errorf("anchor %s defined twice", m[1])
		}
		defs[m[1]] = true
	}
	refs := regexp.MustCompile(`\*([A-Za-z0-9_-]+)`).FindAllStringSubmatch(string(y), -1)
	if len(refs) == 0 {
		t.Fatal("no references")
	}
	for _, m := range refs {
		if !defs[m[1]] {
			t.Errorf("reference *%s to no input", m[1])
		}
	}
	for _, m := range []string{"gpu.time_ns", "inst.samples", "red.temporal.load", "red.temporal.load.fraction"} {
		if !strings.Contains(string(y), "  - name: \""+m+"\"\n") {
			t.Errorf("no root for %s", m)
		}
	}
	if strings.Count(string(y), "      Mean:\n") != len(db(t, p).Metrics) {
		t.Errorf("not every metric has a Mean variant")
	}
}

func db(t *testing.T, p *profile.Profile) *Database { return roundTrip(t, p) }

func (db *Database) metricOfProp(id uint16) string {
	m, _, _ := db.MetricByProp(id)
	return m
}

func TestWriteDeterministic(t *testing.T) {
	a := exporttest.Profile(3, 1, exporttest.Shape)
	b := a.Clone()
	m1, p1, c1, y1, err1 := Encode(a)
	m2, p2, c2, y2, err2 := Encode(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	for i, pair := range [][2][]byte{{m1, m2}, {p1, p2}, {c1, c2}, {y1, y2}} {
		if !bytes.Equal(pair[0], pair[1]) {
			t.Errorf("file %d differs between two encodings of the same profile", i)
		}
	}
}

// Every frame kind and both a single-rank and an empty profile write and
// read back.
func TestWriteEdgeCases(t *testing.T) {
	empty := profile.New("empty")
	db := roundTrip(t, empty)
	if len(db.Contexts) != 1 || len(db.Profiles) != 1 {
		t.Errorf("empty profile: %d contexts, %d profiles", len(db.Contexts), len(db.Profiles))
	}
	one := exporttest.Profile(1, 1, exporttest.Shape)
	db = roundTrip(t, one)
	lex := map[string]bool{}
	rel := map[uint8]bool{}
	for _, c := range db.Contexts {
		if !c.IsEntry {
			lex[lexKinds[c.Lexical]] = true
			rel[c.Relation] = true
		}
	}
	var got []string
	for k := range lex {
		got = append(got, k)
	}
	sort.Strings(got)
	if fmt.Sprint(got) != "[function instruction line loop]" || !rel[RelInlined] || !rel[RelCall] || !rel[RelLexical] {
		t.Errorf("lexical types %v relations %v", got, rel)
	}
	found := false
	for _, f := range db.Functions {
		if f.Name == "<unknown function 0x1a2b>" && f.Offset == 0x1a2b && db.Modules[f.Module] == "/usr/lib/libhalo.so" {
			found = true
		}
	}
	if !found {
		t.Errorf("unsymbolised host frame: no function at libhalo.so+0x1a2b")
	}
}
