package sass

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// snippet builds a one-function module from instruction lines; lines
// ending in ':' are labels, offsets are assigned 0x10 apart.
func snippet(t *testing.T, lines ...string) *Function {
	t.Helper()
	var sb strings.Builder
	sb.WriteString(".target sm_90\n.section .text.f,\"ax\",@progbits\n.type f,@function\nf:\n")
	off := 0
	for _, l := range lines {
		if strings.HasSuffix(l, ":") {
			sb.WriteString(l + "\n")
			continue
		}
		fmt.Fprintf(&sb, "        /*%04x*/ %s ;\n", off, l)
		off += 0x10
	}
	m, err := Parse([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	return m.Functions[0]
}

func blockStarts(f *Function, bs []int) string {
	g := f.CFG()
	var s []string
	for _, b := range bs {
		s = append(s, fmt.Sprintf("%#x", f.Insts[g.Blocks[b].Start].Offset))
	}
	return strings.Join(s, " ")
}

func TestDominators(t *testing.T) {
	f := snippet(t,
		"ISETP.GE.AND P0, PT, R0, 0x1, PT",
		"@P0 BRA `(.L_else)",
		"IADD3 R1, R1, 0x1, RZ",
		"BRA `(.L_join)",
		".L_else:",
		"IADD3 R1, R1, 0x2, RZ",
		".L_join:",
		"IADD3 R2, R2, 0x1, RZ",
		"ISETP.NE.AND P1, PT, R2, 0x10, PT",
		"@P1 BRA `(.L_join)",
		"EXIT",
		".L_dead:",
		"BRA `(.L_dead)",
	)
	g := f.CFG()
	if len(g.Blocks) != 6 {
		t.Fatalf("%d blocks, want 6", len(g.Blocks))
	}
	if want := []int{-1, 0, 0, 0, 3, -1}; !reflect.DeepEqual(g.IDom, want) {
		t.Errorf("IDom = %v, want %v", g.IDom, want)
	}
	if want := []int{3, 3, 3, 4, -1, -1}; !reflect.DeepEqual(g.IPDom, want) {
		t.Errorf("IPDom = %v, want %v", g.IPDom, want)
	}
	if g.Blocks[5].Reachable || !g.Blocks[4].Exit {
		t.Error("block 5 must be unreachable and block 4 an exit")
	}
	checks := []struct {
		a, b      int
		dom, pdom bool
	}{
		{0, 4, true, false}, {3, 4, true, false}, {1, 3, false, false}, {3, 3, true, true},
		{4, 0, false, true}, {3, 1, false, true}, {5, 5, false, false}, {0, 5, false, false},
	}
	for _, c := range checks {
		if g.Dominates(c.a, c.b) != c.dom || g.PostDominates(c.a, c.b) != c.pdom {
			t.Errorf("Dominates(%d,%d)=%v PostDominates=%v, want %v %v", c.a, c.b, g.Dominates(c.a, c.b), g.PostDominates(c.a, c.b), c.dom, c.pdom)
		}
	}
	if len(g.Loops) != 1 || g.Loops[0].Header != 3 || !reflect.DeepEqual(g.Loops[0].Blocks, []int{3}) || g.Loops[0].Irreducible {
		t.Errorf("loops %+v", g.Loops)
	}
	if g.Blocks[3].Loop != 0 || g.Blocks[4].Loop != -1 {
		t.Errorf("block loops %d %d", g.Blocks[3].Loop, g.Blocks[4].Loop)
	}
}

// TestIrreducible: a cycle entered at two blocks.
func TestIrreducible(t *testing.T) {
	f := snippet(t,
		"@P0 BRA `(.L_b)",
		".L_a:",
		"IADD3 R1, R1, 0x1, RZ",
		"@P1 BRA `(.L_exit)",
		".L_b:",
		"IADD3 R2, R2, 0x1, RZ",
		"@P2 BRA `(.L_a)",
		".L_exit:",
		"EXIT",
	)
	g := f.CFG()
	if len(g.Loops) != 1 {
		t.Fatalf("loops %+v", g.Loops)
	}
	l := g.Loops[0]
	if !l.Irreducible || !reflect.DeepEqual(l.Blocks, []int{1, 2}) || len(l.Entries) != 2 || l.Depth != 1 {
		t.Errorf("loop %+v", l)
	}
	if l.Header != 1 && l.Header != 2 {
		t.Errorf("header %d", l.Header)
	}
	// neither entry dominates the other
	if g.Dominates(1, 2) || g.Dominates(2, 1) || g.IDom[1] != 0 || g.IDom[2] != 0 {
		t.Errorf("IDom %v", g.IDom)
	}
}

// TestNestedIrreducible: an irreducible region inside a reducible loop
// nests under it.
func TestNestedIrreducible(t *testing.T) {
	f := snippet(t,
		".L_top:",
		"IADD3 R0, R0, 0x1, RZ",
		"@P0 BRA `(.L_b)",
		".L_a:",
		"IADD3 R1, R1, 0x1, RZ",
		"@P1 BRA `(.L_latch)",
		".L_b:",
		"IADD3 R2, R2, 0x1, RZ",
		"@P2 BRA `(.L_a)",
		".L_latch:",
		"@P3 BRA `(.L_top)",
		"EXIT",
	)
	g := f.CFG()
	if len(g.Loops) != 2 {
		t.Fatalf("loops %+v", g.Loops)
	}
	outer, inner := g.Loops[0], g.Loops[1]
	if outer.Irreducible || outer.Depth != 1 || outer.Header != 0 || !reflect.DeepEqual(outer.Children, []int{1}) {
		t.Errorf("outer %+v", outer)
	}
	if !inner.Irreducible || inner.Depth != 2 || inner.Parent != 0 || !reflect.DeepEqual(inner.Blocks, []int{1, 2}) {
		t.Errorf("inner %+v", inner)
	}
	if got := g.LoopNest(2); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("LoopNest(2) = %v", got)
	}
}

func TestLoopsProbe(t *testing.T) {
	m := mustParse(t, "probe/k.sass.txt")
	f := m.Func("_Z6reloadPKfPfii")
	g := f.CFG()
	if len(g.Loops) != 2 {
		t.Fatalf("%d loops, want 2 (the 4x unrolled loop and its remainder)", len(g.Loops))
	}
	for i, want := range []struct {
		header uint64
		blocks int
	}{{0x1e0, 17}, {0x4b0, 5}} {
		l := g.Loops[i]
		if h := f.Insts[g.Blocks[l.Header].Start].Offset; h != want.header || len(l.Blocks) != want.blocks || l.Depth != 1 || l.Parent != -1 || l.Irreducible {
			t.Errorf("loop %d: header %#x blocks %d depth %d parent %d irr %v", i, h, len(l.Blocks), l.Depth, l.Parent, l.Irreducible)
		}
		if m.Location(l.Loc).Line != 8 || m.Location(l.LatchLoc).Line != 8 {
			t.Errorf("loop %d: line %d/%d, want 8 (the for statement)", i, m.Location(l.Loc).Line, m.Location(l.LatchLoc).Line)
		}
	}
	// the helper is called inside the unrolled loop
	b := g.BlockOf(f.InstAt(0x260))
	if !g.Loops[0].Contains(b) || g.Loops[1].Contains(b) {
		t.Error("call at 0x260 must be in loop 0 only")
	}
	if !g.Dominates(g.Loops[0].Header, b) || g.Dominates(g.Loops[1].Header, g.BlockOf(f.InstAt(0x580))) {
		t.Error("dominance around the loops is wrong")
	}
	final := g.BlockOf(f.InstAt(0x580))
	if g.PostDominates(final, 0) || !g.PostDominates(final, g.BlockOf(f.InstAt(0x80))) {
		t.Error("the final store post-dominates everything after the early @P0 EXIT, not the entry")
	}
	// nested loops in the control-flow probe
	c := mustParse(t, "cflow/c.sm90.hex.txt")
	n := c.Func("_Z4nestPKdPdii").CFG()
	if len(n.Loops) != 2 || n.Loops[1].Parent != 0 || n.Loops[1].Depth != 2 || !reflect.DeepEqual(n.Loops[0].Children, []int{1}) {
		t.Errorf("nest loops %+v", n.Loops)
	}
	irr := c.Func("_Z3irrPKiPii")
	ig := irr.CFG()
	if len(ig.Loops) != 2 || !ig.Loops[0].Irreducible || ig.Loops[1].Irreducible || ig.Loops[1].Parent != 0 {
		t.Errorf("irr loops %+v", ig.Loops)
	}
	if got := blockStarts(irr, ig.Loops[0].Entries); got != "0x100 0xb0" {
		t.Errorf("irr entries %s", got)
	}
}
