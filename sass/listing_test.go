package sass

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"
)

// TestCubinSymbolIndex: Symbol is the function's position in the raw
// .symtab, read here entry by entry (24-byte Elf64_Sym, the null symbol
// first), independently of debug/elf's Symbols.
func TestCubinSymbolIndex(t *testing.T) {
	for _, name := range []string{"probe/k.sm90.cubin", "cflow/c.sm90.cubin", "cflow/c.sm100.cubin"} {
		data := readTD(t, name)
		c, err := ParseCubin(data)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		symtab := f.Section(".symtab")
		strtab := f.Sections[symtab.Link]
		raw, _ := symtab.Data()
		strs, _ := strtab.Data()
		if len(c.Functions) == 0 {
			t.Fatalf("%s: no functions", name)
		}
		for _, cf := range c.Functions {
			e := raw[cf.Symbol*24:]
			off := binary.LittleEndian.Uint32(e)
			n := strs[off:]
			n = n[:bytes.IndexByte(n, 0)]
			if string(n) != cf.Name || elf.ST_TYPE(e[4]) != elf.STT_FUNC {
				t.Errorf("%s: %s has symbol %d, which is %q", name, cf.Name, cf.Symbol, n)
			}
		}
	}
}

// TestListingSplitJoin: a listing cut into sections and joined again
// parses to the same functions and instructions, in any order of joining.
func TestListingSplitJoin(t *testing.T) {
	for _, name := range []string{"cflow/c.sm90.hex.txt", "cflow/c.sm80.hex.txt", "probe/k.hex.txt"} {
		text := readTD(t, name)
		whole, err := Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		header, secs := SplitListing(text)
		if !bytes.Contains(header, []byte(".headerflags")) && !bytes.Contains(header, []byte(".target")) {
			t.Errorf("%s: header %q lacks the target", name, header)
		}
		if len(secs) < 2 {
			t.Fatalf("%s: %d sections", name, len(secs))
		}
		rev := append([]ListingSection(nil), secs...)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		a, b := JoinListing(header, secs), JoinListing(header, append(rev, secs[0]))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: joining depends on the order", name)
		}
		joined, err := Parse(a)
		if err != nil {
			t.Fatalf("%s: joined listing: %v", name, err)
		}
		sameFunctions(t, name, whole, joined, nil)
	}
}

// sameFunctions checks that got holds the functions of want (only those
// named in only, when given) with the same instructions and line map.
func sameFunctions(t *testing.T, name string, want, got *Module, only map[string]bool) {
	t.Helper()
	if got.Arch != want.Arch {
		t.Errorf("%s: arch %q, want %q", name, got.Arch, want.Arch)
	}
	for _, f := range want.Functions {
		if only != nil && !only[f.Name] {
			continue
		}
		g := got.Func(f.Name)
		if g == nil {
			t.Errorf("%s: %s missing", name, f.Name)
			continue
		}
		if g.Section != f.Section || g.Start != f.Start || g.End != f.End || len(g.Insts) != len(f.Insts) {
			t.Errorf("%s: %s: section %s [%#x,%#x) %d insts, want %s [%#x,%#x) %d", name, f.Name, g.Section, g.Start, g.End, len(g.Insts), f.Section, f.Start, f.End, len(f.Insts))
			continue
		}
		for i := range f.Insts {
			a, b := &f.Insts[i], &g.Insts[i]
			if a.Text() != b.Text() || a.Enc != b.Enc || a.Callee != b.Callee ||
				want.PosString(want.Location(a.Loc).Pos) != got.PosString(got.Location(b.Loc).Pos) {
				t.Errorf("%s: %s+%#x: %q at %s, want %q at %s", name, f.Name, a.Offset, b.Text(), got.PosString(got.Location(b.Loc).Pos), a.Text(), want.PosString(want.Location(a.Loc).Pos))
				break
			}
		}
	}
}

// TestFunctionListing: the listing of one function holds its section and
// those of the functions it calls, and analyses like the whole module's.
func TestFunctionListing(t *testing.T) {
	text := readTD(t, "cflow/c.sm90.hex.txt")
	whole, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, f := range whole.Functions {
		if !f.Entry {
			continue
		}
		piece, ok := FunctionListing(text, whole, f.Name)
		if !ok {
			t.Fatalf("%s: no listing", f.Name)
		}
		m, err := Parse(piece)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		secs, missing := FunctionSections(whole, f.Name)
		if len(missing) != 0 {
			t.Errorf("%s: callees %v missing from the whole module", f.Name, missing)
		}
		only := map[string]bool{}
		for _, g := range whole.Functions {
			for _, s := range secs {
				if g.Section == s {
					only[g.Name] = true
				}
			}
		}
		if len(m.Functions) != len(only) {
			t.Errorf("%s: %d functions in its listing, want %d", f.Name, len(m.Functions), len(only))
		}
		sameFunctions(t, f.Name, whole, m, only)
		for i := range f.Insts {
			if c := f.Insts[i].Callee; c != "" && whole.Func(c) != nil {
				calls++
				if m.Func(c) == nil {
					t.Errorf("%s calls %s, not in its listing", f.Name, c)
				}
			}
		}
		// The structure tree and the access kinds agree with the whole
		// module's.
		for i := range f.Insts {
			off := f.Insts[i].Offset - f.Start
			k1, ok1 := whole.AccessKind(f.Name, off)
			k2, ok2 := m.AccessKind(f.Name, off)
			if ok1 != ok2 || k1 != k2 {
				t.Errorf("%s+%#x: access kind %v %v, whole module %v %v", f.Name, off, k2, ok2, k1, ok1)
			}
			var w1, w2 strings.Builder
			c1, _ := whole.Structure().Lookup(f.Name, off)
			c2, _ := m.Structure().Lookup(f.Name, off)
			for _, s := range c1.Scopes {
				w1.WriteString(s.Kind.String() + ";")
			}
			for _, s := range c2.Scopes {
				w2.WriteString(s.Kind.String() + ";")
			}
			if w1.String() != w2.String() {
				t.Errorf("%s+%#x: scopes %s, whole module %s", f.Name, off, w2.String(), w1.String())
			}
		}
	}
	if calls == 0 {
		t.Error("no kernel calls a function of its own section or another: the test checks nothing about callees")
	}
	if _, ok := FunctionListing(text, whole, "no_such_function"); ok {
		t.Error("a listing for a function the module lacks")
	}
}
