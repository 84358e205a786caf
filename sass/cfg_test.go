package sass

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const td = "../testdata/sass/"

// mustParse parses a sample file of testdata/sass.
func mustParse(t testing.TB, name string) *Module {
	t.Helper()
	b, err := os.ReadFile(td + name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// dotCFG is one function's graph as nvdisasm -bbcfg prints it.
type dotCFG struct {
	nodes []string   // node names in order
	insts [][]string // normalised instruction texts per node
	edges map[[2]string]bool
}

var (
	dotCluster = regexp.MustCompile(`^subgraph "cluster_(.*)" \{$`)
	dotEdge    = regexp.MustCompile(`^"([^"]*)":[a-z0-9]+:[nsew] -> "([^"]*)":entry:n`)
	dotPort    = regexp.MustCompile(`^(\|?<[a-z0-9]+>)*\|?`)
)

// parseDOT reads the -bbcfg output: per cluster (function), its nodes with
// their instructions, and its edges.
func parseDOT(t *testing.T, path string) map[string]*dotCFG {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dotCFG{}
	var cur *dotCFG
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if m := dotCluster.FindStringSubmatch(l); m != nil {
			cur = &dotCFG{edges: map[[2]string]bool{}}
			out[m[1]] = cur
			continue
		}
		if cur == nil {
			continue
		}
		if strings.HasPrefix(l, "[label=\"{") && i > 0 {
			name := strings.Trim(lines[i-1], "\"")
			cur.nodes = append(cur.nodes, name)
			body := strings.TrimSuffix(strings.TrimPrefix(l, "[label=\"{"), "}\"]")
			var insts []string
			for _, piece := range strings.Split(body, `\l`) {
				piece = dotPort.ReplaceAllString(piece, "")
				if !strings.HasPrefix(piece, `\ \ `) {
					continue // directives and labels
				}
				insts = append(insts, normInst(unescapeDOT(piece)))
			}
			cur.insts = append(cur.insts, insts)
			continue
		}
		if m := dotEdge.FindStringSubmatch(l); m != nil {
			cur.edges[[2]string{m[1], m[2]}] = true
		}
	}
	return out
}

func unescapeDOT(s string) string {
	r := strings.NewReplacer(`\ `, " ", `\[`, "[", `\]`, "]", `\<`, "<", `\>`, ">", `\{`, "{", `\}`, "}", `\|`, "|", `\"`, `"`)
	return r.Replace(s)
}

// normInst compares instructions by their tokens only.
func normInst(s string) string {
	if i := strings.Index(s, "(*"); i >= 0 {
		s = s[:i]
	}
	s = strings.NewReplacer(",", " ", ";", " ").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// TestCFGMatchesNvdisasm compares the basic blocks and edges of every
// reachable block with nvdisasm's own -bbcfg graph, for sm_80 to sm_120.
func TestCFGMatchesNvdisasm(t *testing.T) {
	pairs := [][2]string{
		{"probe/k.sass.txt", "probe/k.cfg.dot"},
		{"probe/k.sm80.sass.txt", "probe/k.sm80.cfg.dot"},
		{"probe/k.sm100.sass.txt", "probe/k.sm100.cfg.dot"},
		{"probe/k.sm120.sass.txt", "probe/k.sm120.cfg.dot"},
		{"cflow/c.sm80.hex.txt", "cflow/c.sm80.cfg.dot"},
		{"cflow/c.sm90.hex.txt", "cflow/c.sm90.cfg.dot"},
		{"cflow/c.sm100.hex.txt", "cflow/c.sm100.cfg.dot"},
		{"cflow/c.sm120.hex.txt", "cflow/c.sm120.cfg.dot"},
	}
	for _, p := range pairs {
		t.Run(filepath.Base(p[0]), func(t *testing.T) {
			m := mustParse(t, p[0])
			dots := parseDOT(t, td+p[1])
			if len(dots) == 0 {
				t.Fatal("no clusters in the DOT file")
			}
			checked := 0
			for _, f := range m.Functions {
				d := dots[f.Name]
				if d == nil {
					t.Errorf("%s: not in nvdisasm's CFG", f.Name)
					continue
				}
				compareCFG(t, f, d)
				checked++
			}
			if checked != len(dots) {
				t.Errorf("checked %d functions, DOT has %d", checked, len(dots))
			}
		})
	}
}

func compareCFG(t *testing.T, f *Function, d *dotCFG) {
	t.Helper()
	g := f.CFG()
	var reach []int
	for i := range g.Blocks {
		if g.Blocks[i].Reachable {
			reach = append(reach, i)
		}
	}
	if len(reach) != len(d.nodes) {
		t.Errorf("%s: %d reachable blocks, nvdisasm has %d", f.Name, len(reach), len(d.nodes))
		return
	}
	name := map[int]string{}
	for k, bi := range reach {
		b := g.Blocks[bi]
		name[bi] = d.nodes[k]
		var got []string
		for i := b.Start; i < b.End; i++ {
			got = append(got, normInst(f.Insts[i].Text()))
		}
		if strings.Join(got, "\n") != strings.Join(d.insts[k], "\n") {
			t.Errorf("%s: block %d (%s) differs:\n got %q\nwant %q", f.Name, bi, d.nodes[k], got, d.insts[k])
		}
	}
	var gotE, wantE []string
	for _, bi := range reach {
		for _, s := range g.Blocks[bi].Succs {
			gotE = append(gotE, name[bi]+"->"+name[s])
		}
	}
	for e := range d.edges {
		wantE = append(wantE, e[0]+"->"+e[1])
	}
	sort.Strings(gotE)
	sort.Strings(wantE)
	if strings.Join(gotE, " ") != strings.Join(wantE, " ") {
		t.Errorf("%s: edges differ:\n got %v\nwant %v", f.Name, gotE, wantE)
	}
}
