package sass

import (
	"bytes"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/sass")

// TestStructureGolden compares the canonical rendering of the structure
// tree with testdata/sass/*.golden (go test -run Golden -update rewrites
// them).
func TestStructureGolden(t *testing.T) {
	for _, c := range []struct {
		sample, golden string
		insts          bool
	}{
		{"probe/k.hex.txt", "probe.golden", false},
		{"probe/k.hex.txt", "probe-insts.golden", true},
		{"cflow/c.sm90.hex.txt", "cflow-sm90.golden", false},
		{"cflow/c.sm100.hex.txt", "cflow-sm100.golden", false},
		{"hpctoolkit-loops/loops.hex.txt", "hpctoolkit-loops.golden", false},
	} {
		t.Run(c.golden, func(t *testing.T) {
			m := mustParse(t, c.sample)
			var buf bytes.Buffer
			if err := m.Structure().WriteText(&buf, c.insts); err != nil {
				t.Fatal(err)
			}
			path := td + c.golden
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s differs from the rendering; diff:\n%s", c.golden, lineDiff(string(want), buf.String()))
			}
		})
	}
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var sb strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			fmt.Fprintf(&sb, "line %d:\n- %s\n+ %s\n", i+1, a, b)
			if sb.Len() > 2000 {
				break
			}
		}
	}
	return sb.String()
}

func TestLookup(t *testing.T) {
	m := mustParse(t, "probe/k.hex.txt")
	s := m.Structure()
	base := func(p Pos) string { return filepath.Base(m.File(p.File)) + ":" + itoa(int(p.Line)) }
	c, ok := s.Lookup("_Z6reloadPKfPfii", 0x5e0)
	if !ok || c.Func.Name != "$_Z6reloadPKfPfii$_Z6helperPKfi" || base(c.Line) != "k.cu:3" || len(c.Loops) != 0 || len(c.Inline) != 0 || len(c.Scopes) != 2 {
		t.Errorf("reload+0x5e0: %+v", c)
	}
	c, ok = s.Lookup("_Z6reloadPKfPfii", 0x260)
	if !ok || c.Func.Name != "_Z6reloadPKfPfii" || len(c.Loops) != 1 || base(c.Line) != "k.cu:8" || c.Func.Insts[c.Inst].Flow != FlowCall {
		t.Errorf("reload+0x260: %+v", c)
	}
	if got := c.String(); got != "_Z6reloadPKfPfii > loop@testdata/sass/probe/k.cu:8 > testdata/sass/probe/k.cu:8" {
		t.Errorf("chain %q", got)
	}
	c, ok = s.Lookup("_Z4vec4PK6float4PS_iPs", 0xa0)
	if !ok || len(c.Inline) != 1 || base(c.Inline[0].CallSite) != "k.cu:12" || filepath.Base(m.File(c.Inline[0].Callee)) != "device_atomic_functions.hpp" || base(c.Line) != "device_atomic_functions.hpp:107" {
		t.Errorf("vec4+0xa0: %+v", c)
	}
	if kinds := scopeKinds(c.Scopes); kinds != "function inline line" {
		t.Errorf("vec4+0xa0 scopes %s", kinds)
	}
	for _, bad := range []struct {
		fn  string
		off uint64
	}{{"nope", 0}, {"_Z3shmPi", 0x200}, {"_Z3shmPi", 0x8}, {"_Z3shmPi", 1 << 40}} {
		if c, ok := s.Lookup(bad.fn, bad.off); ok {
			t.Errorf("Lookup(%s, %#x) = %v, want not found", bad.fn, bad.off, c)
		}
	}
	h := mustParse(t, "hpctoolkit-loops/loops.hex.txt").Structure()
	c, ok = h.Lookup("_Z8kernmainv", 0x200)
	if !ok || scopeKinds(c.Scopes) != "function loop inline line" || c.Line.Line != 16 || c.Loops[0].Depth != 1 {
		t.Errorf("kernmain+0x200: %s %+v", scopeKinds(c.Scopes), c)
	}
}

func scopeKinds(sc []*Scope) string {
	var s []string
	for _, x := range sc {
		s = append(s, x.Kind.String())
	}
	return strings.Join(s, " ")
}

// hpcstruct's XML, as far as the comparison needs it.
type hsNode struct {
	XMLName xml.Name
	Line    string   `xml:"l,attr"`
	Name    string   `xml:"n,attr"`
	V       string   `xml:"v,attr"`
	Kids    []hsNode `xml:",any"`
}

var hsRange = regexp.MustCompile(`\[0x([0-9a-f]+)-0x([0-9a-f]+)\)`)

// TestMatchesHpcstruct compares the structure recovered from nvdisasm text
// with HPCToolkit's hpcstruct result for the same cubin: the same
// statements with the same address ranges under the same loops and inlined
// call sites.
func TestMatchesHpcstruct(t *testing.T) {
	b, err := os.ReadFile(td + "hpctoolkit-loops/loops.hpcstruct")
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = false
	var root hsNode
	if err := dec.Decode(&root); err != nil {
		t.Fatal(err)
	}
	var want []string
	var base uint64
	var walk func(n hsNode, path string)
	walk = func(n hsNode, path string) {
		switch n.XMLName.Local {
		case "P":
			if m := hsRange.FindStringSubmatch(n.V); m != nil {
				base, _ = strconv.ParseUint(m[1], 16, 64)
			}
			path = "function/"
		case "L":
			path += "loop:" + n.Line + "/"
		case "A":
			if n.Name == "" { // the call site; the named alien inside is the callee itself
				path += "inline:" + n.Line + "/"
			}
		case "S":
			var rs []string
			for _, m := range hsRange.FindAllStringSubmatch(n.V, -1) {
				lo, _ := strconv.ParseUint(m[1], 16, 64)
				hi, _ := strconv.ParseUint(m[2], 16, 64)
				rs = append(rs, fmt.Sprintf("[%#x-%#x)", lo-base, hi-base))
			}
			want = append(want, path+"line:"+n.Line+" {"+strings.Join(rs, " ")+"}")
		}
		for _, k := range n.Kids {
			walk(k, path)
		}
	}
	walk(root, "")
	m := mustParse(t, "hpctoolkit-loops/loops.hex.txt")
	f := m.Func("_Z8kernmainv")
	var got []string
	var mine func(sc *Scope, path string)
	mine = func(sc *Scope, path string) {
		switch sc.Kind {
		case ScopeFunction:
			path = "function/"
		case ScopeLoop:
			path += "loop:" + itoa(int(sc.Pos.Line)) + "/"
		case ScopeInline:
			path += "inline:" + itoa(int(sc.Pos.Line)) + "/"
		case ScopeLine:
			got = append(got, path+"line:"+itoa(int(sc.Pos.Line))+" "+ranges(f, sc.Insts))
		}
		for _, c := range sc.Children {
			mine(c, path)
		}
	}
	mine(m.Structure().Funcs[0], "")
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("structure differs from hpcstruct:\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
