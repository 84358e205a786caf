package symbolize

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/profile"
)

// forget drops the parsed-module cache, as a fresh process (the replaying
// collector) starts without it.
func forget() {
	files.Lock()
	files.m = nil
	files.Unlock()
}

// tableOf resolves addrs in exe through a symbol table, written out and
// read back, with exe itself gone: the frames must be those the ELF file
// gives.
func tableRoundTrip(t *testing.T, exe string, base uint64, addrs []uint64) (fromELF, fromTable []profile.Frame, text string) {
	t.Helper()
	// The module as captured: a path this machine will not have later.
	captured := filepath.Join(t.TempDir(), "captured-prog")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(captured, b, 0o755); err != nil {
		t.Fatal(err)
	}
	m := moduleFor(t, captured, base)
	s := New()
	s.AddModule(m)
	fromELF = s.Frames(addrs)

	tabs := NewTables()
	for _, a := range addrs {
		if !tabs.AddAddress(m, a) {
			t.Fatalf("address %#x not added", a)
		}
	}
	var buf bytes.Buffer
	if _, err := tabs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	text = buf.String()

	os.Remove(captured)
	forget()
	read := NewTables()
	if err := read.Read(strings.NewReader(text), "prog.syms"); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	s2 := New()
	s2.Tables = read
	s2.AddModule(m)
	fromTable = s2.Frames(addrs)

	// Without the table the module's frames stay unresolved.
	forget()
	s3 := New()
	s3.AddModule(m)
	for _, fr := range s3.Frames(addrs) {
		if fr.Function != "" {
			t.Fatalf("resolved %v without the file or a table", fr)
		}
	}
	return fromELF, fromTable, text
}

func TestTableInlined(t *testing.T) {
	exe, out := buildC(t, "-pie")
	ret, outerRet, mainAddr := out[0], out[1], out[2]
	base := mainAddr - symValue(t, exe, "main")
	fromELF, fromTable, text := tableRoundTrip(t, exe, base, []uint64{ret, outerRet})
	if len(fromELF) != 3 || fromELF[2].Function != "inl" {
		t.Fatalf("ELF frames %v", fromELF)
	}
	if len(fromTable) != len(fromELF) {
		t.Fatalf("table frames %v, want %v\n%s", fromTable, fromELF, text)
	}
	for i := range fromELF {
		if fromTable[i] != fromELF[i] {
			t.Errorf("frame %d: table %v, ELF %v", i, fromTable[i], fromELF[i])
		}
	}
	if strings.Count(text, "\nfunc\t") > 4 {
		t.Errorf("table holds more than the functions around the addresses:\n%s", text)
	}
}

func TestTableSymbolsOnly(t *testing.T) {
	exe, out := buildCProg(t, cTwoCalls, "-g0")
	base := out[2] - symValue(t, exe, "main")
	fromELF, fromTable, text := tableRoundTrip(t, exe, base, []uint64{out[0], out[1]})
	if len(fromTable) != 2 || fromTable[0] != fromELF[0] || fromTable[1] != fromELF[1] {
		t.Fatalf("table frames %v, ELF %v\n%s", fromTable, fromELF, text)
	}
	if fromTable[0].Function != "main" || fromTable[0] == fromTable[1] {
		t.Errorf("two call sites in main: %v", fromTable)
	}
	if strings.Contains(text, "\nat\t") {
		t.Errorf("a binary without line tables gave call sites:\n%s", text)
	}
}

func TestReadTableErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"module\tx\t-\n", "not a gpuprof symbol table"},
		{TableHeader + "\nfunc\t10\t4\tf\n", "x.syms:2: func record before any module"},
		{TableHeader + "\nmodule\t/a\tab\nfunc\tzz\t4\tf\n", `x.syms:3: address "zz"`},
		{TableHeader + "\nmodule\t/a\tab\nat\t10\tf\tfile\n", "x.syms:3: at record wants"},
		{TableHeader + "\nmodule\t/a\tab\nat\t10\tf\tfile\tx\n", `x.syms:3: line "x"`},
		{TableHeader + "\nsym\t1\n", `x.syms:2: unknown record "sym"`},
	} {
		err := NewTables().Read(strings.NewReader(c.in), "x.syms")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}

func FuzzReadTable(f *testing.F) {
	f.Add(TableHeader + "\nmodule\t/bin/app\t0abc\nfunc\t1000\t40\tmain\nat\t1010\tmain\tapp.c\t12\tinl\tapp.h\t3\n")
	f.Add(TableHeader + "\nmodule\t/bin/app\t-\nfunc\t0\t0\t-\n")
	f.Fuzz(func(t *testing.T, in string) {
		tabs := NewTables()
		if err := tabs.Read(strings.NewReader(in), "fuzz.syms"); err != nil {
			return
		}
		// What reads back writes and reads again to the same text.
		var a, b bytes.Buffer
		tabs.WriteTo(&a)
		again := NewTables()
		if err := again.Read(bytes.NewReader(a.Bytes()), "again.syms"); err != nil {
			t.Fatalf("rewritten table does not read: %v\n%s", err, a.String())
		}
		again.WriteTo(&b)
		if a.String() != b.String() {
			t.Fatalf("not stable:\n%s\n---\n%s", a.String(), b.String())
		}
		for _, m := range tabs.order {
			for va := range m.f.sites {
				m.f.lookup(va)
			}
			findSymbol(m.f.syms, 0x1000)
		}
	})
}
