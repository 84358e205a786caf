package hpctoolkit

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HPCToolkit's own databases first: the reader must agree with hpcprof
// before it is used to check what we write.

func readRef(t *testing.T, name string) *Database {
	t.Helper()
	db, err := Read(filepath.Join("testdata", "hpctoolkit", name))
	if err != nil {
		t.Fatalf("Read(%s): %v", name, err)
	}
	return db
}

// path returns the names from the entry point down to c.
func (db *Database) path(c *Context) []string {
	var out []string
	for {
		out = append([]string{db.Name(c)}, out...)
		if c.IsEntry {
			return out
		}
		p, ok := db.Contexts[c.Parent]
		if !ok {
			return out
		}
		c = p
	}
}

func find(db *Database, pred func(c *Context) bool) []*Context {
	var out []*Context
	for _, id := range db.ContextIDs() {
		if c := db.Contexts[id]; pred(c) {
			out = append(out, c)
		}
	}
	return out
}

func metricByName(t *testing.T, db *Database, name string) Metric {
	t.Helper()
	for _, m := range db.Metrics {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no metric %q", name)
	return Metric{}
}

// propID returns the propagated id of metric m in the scope named scope.
func propID(t *testing.T, db *Database, m Metric, scope string) uint16 {
	t.Helper()
	for _, in := range m.Insts {
		if db.Scopes[in.Scope].Name == scope {
			return in.PropID
		}
	}
	t.Fatalf("metric %q has no %s scope", m.Name, scope)
	return 0
}

func TestReadHPCToolkitSmall(t *testing.T) {
	db := readRef(t, "small.d")
	if db.Title != "testmeas-small" {
		t.Errorf("title %q", db.Title)
	}
	wantScopes := []Scope{{"point", ScopePoint, 255}, {"function", ScopeTransitive, 0}, {"lex_aware", ScopeCustom, 255}, {"execution", ScopeExecution, 255}}
	if len(db.Scopes) != len(wantScopes) {
		t.Fatalf("scopes %+v", db.Scopes)
	}
	for i, s := range wantScopes {
		if db.Scopes[i] != s {
			t.Errorf("scope %d: %+v, want %+v", i, db.Scopes[i], s)
		}
	}
	cpu := metricByName(t, db, "CPUTIME (sec)")
	exec := propID(t, db, cpu, "execution")
	if len(db.Entries) != 1 || db.Entries[0].Entry != 1 || db.Entries[0].PrettyName != "main thread" {
		t.Fatalf("entries %+v", db.Entries)
	}
	spin := find(db, func(c *Context) bool { return c.Lexical == LexFunction && db.Name(c) == "spinsleep" })
	if len(spin) != 2 {
		t.Fatalf("spinsleep contexts: %d, want 2 (called from main and from caller)", len(spin))
	}
	got := strings.Join(db.path(spin[0]), " > ")
	if !strings.HasPrefix(got, "main thread > main > ") || !strings.Contains(got, "small.c:") {
		t.Errorf("path %q", got)
	}
	// The loop in spinsleep carries its header line and module offset.
	loops := find(db, func(c *Context) bool { return c.Lexical == LexLoop })
	if len(loops) == 0 || loops[0].Module < 0 || loops[0].Offset != 0x1169 || loops[0].Line != 3 {
		t.Errorf("loops %+v", loops)
	}
	sum := db.Profiles[0]
	if !sum.Summary || sum.IDs != nil {
		t.Errorf("profile 0 must be the canonical summary profile")
	}
	if v := sum.Values[0][exec]; math.Abs(v-1.210259) > 1e-9 {
		t.Errorf("global inclusive CPUTIME %v, want 1.210259", v)
	}
	main := find(db, func(c *Context) bool { return db.Name(c) == "main" })[0]
	if v := sum.Values[main.ID][exec]; math.Abs(v-1.210259) > 1e-9 {
		t.Errorf("main inclusive CPUTIME %v", v)
	}
	thread := db.Profiles[1]
	if thread.Summary || len(thread.IDs) != 3 || db.IDNames[thread.IDs[0].Kind] != "NODE" || db.IDNames[thread.IDs[2].Kind] != "THREAD" {
		t.Errorf("thread profile ids %+v", thread.IDs)
	}
	// cct.db holds the same per-thread values, context-major.
	for ctx, mets := range db.CCT {
		for met, per := range mets {
			for prof, v := range per {
				if prof == 0 {
					t.Fatalf("cct.db lists the summary profile")
				}
				if got := db.Profiles[prof].Values[ctx][met]; got != v {
					t.Errorf("cct.db ctx %d metric %d profile %d: %v, profile.db %v", ctx, met, prof, v, got)
				}
			}
		}
	}
	checkExecutionCovers(t, db, 0)
}

// checkExecutionCovers checks that every context's execution-scope value
// covers its children's (hpcprof elides some leaf contexts, so the sums of
// HPCToolkit's databases need not be equal; ours must be, see the writer
// test).
func checkExecutionCovers(t *testing.T, db *Database, prof int) {
	t.Helper()
	for _, m := range db.Metrics {
		var exec uint16
		for _, in := range m.Insts {
			if db.Scopes[in.Scope].Type == ScopeExecution {
				exec = in.PropID
			}
		}
		vals := db.Profiles[prof].Values
		for _, id := range db.ContextIDs() {
			c := db.Contexts[id]
			var kids float64
			for _, k := range c.Children {
				kids += vals[k.ID][exec]
			}
			if kids > vals[id][exec]*(1+1e-9)+1e-9 {
				t.Errorf("%s: context %d (%s) inclusive %v < children's %v", m.Name, id, db.Name(c), vals[id][exec], kids)
			}
		}
	}
}

func TestReadHPCToolkitPCSampling(t *testing.T) {
	db := readRef(t, "loops-cuda-nvidiapc-t.d")
	kern := find(db, func(c *Context) bool { return db.Name(c) == "<gpu kernel>" })
	if len(kern) == 0 {
		t.Fatal("no <gpu kernel> context")
	}
	var body *Context
	for _, k := range kern {
		for _, c := range k.Children {
			if db.Name(c) == "kernmain()" && c.Relation == RelCall {
				body = c
			}
		}
	}
	if body == nil {
		t.Fatal("no kernmain() called from <gpu kernel>")
	}
	if !strings.HasSuffix(db.Modules[db.Functions[body.Function].Module], ".gpubin") {
		t.Errorf("kernmain() in module %q", db.Modules[db.Functions[body.Function].Module])
	}
	kinds := map[uint8]bool{}
	inlined := false
	var walk func(c *Context)
	walk = func(c *Context) {
		kinds[c.Lexical] = true
		if c.Relation == RelInlined {
			inlined = true
		}
		for _, k := range c.Children {
			walk(k)
		}
	}
	walk(body)
	if !kinds[LexLine] || !kinds[LexLoop] || !inlined {
		t.Errorf("GPU function subtree: lexical types %v, inlined %v", kinds, inlined)
	}
	// Lexical children (lines, loops) propagate the "function" scope, calls do not.
	for _, id := range db.ContextIDs() {
		c := db.Contexts[id]
		if c.IsEntry {
			continue
		}
		if want := c.Relation == RelLexical; (c.Propagation&1 != 0) != want {
			t.Errorf("context %d (%s) relation %d propagation %#x", id, db.Name(c), c.Relation, c.Propagation)
		}
	}
	m := metricByName(t, db, "GINS:STL_IDEP")
	if v := db.Profiles[0].Values[body.ID][propID(t, db, m, "execution")]; v <= 0 {
		t.Errorf("kernmain() inclusive GINS:STL_IDEP = %v", v)
	}
	if len(db.Profiles) != 3 {
		t.Fatalf("%d profiles, want 3", len(db.Profiles))
	}
	gpu := db.Profiles[1]
	if len(gpu.IDs) != 3 || db.IDNames[gpu.IDs[1].Kind] != "GPUCONTEXT" || db.IDNames[gpu.IDs[2].Kind] != "GPUSTREAM" {
		t.Errorf("GPU stream profile ids %+v", gpu.IDs)
	}
	checkExecutionCovers(t, db, 0)
}

// Truncated or corrupted files give errors, not panics.
func TestReadCorrupt(t *testing.T) {
	dir := filepath.Join("testdata", "hpctoolkit", "small.d")
	meta, _ := os.ReadFile(filepath.Join(dir, "meta.db"))
	prof, _ := os.ReadFile(filepath.Join(dir, "profile.db"))
	cct, _ := os.ReadFile(filepath.Join(dir, "cct.db"))
	if _, err := Parse(meta, prof, cct); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 10, 16, 100, len(meta) / 2, len(meta) - 1} {
		if _, err := Parse(meta[:n], prof, cct); err == nil {
			t.Errorf("meta.db cut to %d bytes: no error", n)
		}
	}
	bad := append([]byte(nil), meta...)
	bad[14] = 3
	if _, err := Parse(bad, prof, cct); err == nil || !strings.Contains(err.Error(), "major version") {
		t.Errorf("version 3: %v", err)
	}
	if _, err := Parse(meta, prof[:len(prof)-9], cct); err == nil {
		t.Errorf("profile.db without footer: no error")
	}
	// A count whose byte size overflows 64 bits (found by fuzzing: it
	// passed the bounds check and looped for ever).
	huge := append([]byte(nil), cct...)
	pCtxs := binary.LittleEndian.Uint64(huge[binary.LittleEndian.Uint64(huge[24:]):])
	huge[pCtxs+7] = 192
	if _, err := Parse(meta, prof, huge); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Errorf("cct.db with an overflowing value count: %v", err)
	}
	// Zero-sized elements (found by fuzzing: a division by zero).
	zero := append([]byte(nil), meta...)
	mods := binary.LittleEndian.Uint64(zero[0x68:])
	binary.LittleEndian.PutUint32(zero[mods+8:], 0)
	binary.LittleEndian.PutUint16(zero[mods+12:], 0)
	if _, err := Parse(zero, prof, cct); err == nil {
		t.Errorf("meta.db with no modules: contexts refer to none, want an error")
	}
}

func FuzzParse(f *testing.F) {
	for _, d := range []string{"small.d", "loops-cuda-nvidiapc-t.d"} {
		dir := filepath.Join("testdata", "hpctoolkit", d)
		meta, _ := os.ReadFile(filepath.Join(dir, "meta.db"))
		prof, _ := os.ReadFile(filepath.Join(dir, "profile.db"))
		cct, _ := os.ReadFile(filepath.Join(dir, "cct.db"))
		f.Add(meta, prof, cct)
	}
	f.Fuzz(func(t *testing.T, meta, prof, cct []byte) {
		db, err := Parse(meta, prof, cct)
		if err == nil {
			for _, id := range db.ContextIDs() {
				_ = db.Name(db.Contexts[id])
			}
		}
	})
}
