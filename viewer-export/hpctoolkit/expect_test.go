package hpctoolkit

import (
	"fmt"
	"strings"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/view"
)

// enode is a context of the tree the documented mapping promises
// (docs/hpctoolkit-format.md), derived here from gpuprof's own profile
// independently of the writer's code, to compare with what readers see.
type enode struct {
	path     string // "entry entry/function main/line main.cc:42/..."
	kind     string // entry, function, line, loop, instruction
	name     string
	point    map[string]float64
	children map[string]*enode
	order    []string
}

func newENode(kind, name string) *enode {
	return &enode{kind: kind, name: name, point: map[string]float64{}, children: map[string]*enode{}}
}

func (e *enode) child(kind, name string) *enode {
	k := kind + "\x00" + name
	c, ok := e.children[k]
	if !ok {
		c = newENode(kind, name)
		c.path = e.path + " > " + kind + " " + name
		e.children[k] = c
		e.order = append(e.order, k)
	}
	return c
}

// hatchetFunc applies the reader's display rule for function names (it
// cuts them at " [", "." and "@").
func hatchetFunc(name string) string {
	for _, sep := range []string{" [", ".", "@"} {
		if i := strings.Index(name, sep); i >= 0 {
			name = name[:i]
		}
	}
	return name
}

func srcName(file string, line uint32) string {
	if file == "" {
		file = "<unknown file>"
	}
	return fmt.Sprintf("%s:%d", file, line)
}

// expectTree maps p's calling-context tree to the lexical contexts the
// format doc promises, with each node's exclusive values on its context.
// It also returns the path of the context that holds each node's values.
func expectTree(p *profile.Profile) (*enode, map[profile.NodeID]string) {
	root := newENode("entry", "entry")
	root.path = "entry entry"
	paths := map[profile.NodeID]string{}
	ch := p.Children()
	var walk func(id profile.NodeID, at *enode, mod string)
	walk = func(id profile.NodeID, at *enode, mod string) {
		n := p.Nodes[id]
		f := n.Frame
		rep := at
		switch f.Kind {
		case profile.KindRoot:
			rep = root
		case profile.KindHostFrame:
			rep = at.child("function", hatchetFunc(FunctionName(f)))
			if f.File != "" || f.Line != 0 {
				rep = rep.child("line", srcName(f.File, f.Line))
			}
		case profile.KindKernel:
			mod = view.GPUModulePath(p, f.Module)
			rep = at.child("function", hatchetFunc(FunctionName(f)))
		case profile.KindGPUFunction:
			rep = at.child("function", hatchetFunc(FunctionName(f)))
		case profile.KindInlined:
			site := at.child("line", srcName(f.File, f.Line))
			rep = site.child("function", hatchetFunc(FunctionName(f)))
		case profile.KindLoop:
			rep = at.child("loop", srcName(f.File, f.Line))
		case profile.KindLine:
			rep = at.child("line", srcName(f.File, f.Line))
		case profile.KindInstruction:
			rep = at.child("instruction", fmt.Sprintf("%s:%d", mod, f.Offset))
		}
		paths[id] = rep.path
		for _, v := range n.Metrics {
			rep.point[v.ID.Name()] += float64(v.V)
		}
		for _, c := range ch[id] {
			walk(c, rep, mod)
		}
	}
	walk(profile.RootID, root, "")
	return root, paths
}

// flatten returns, per path ("entry/a/b"), the inclusive values (whole
// subtree) and the exclusive ones (the context and its descendants reached
// without crossing a function, i.e. a call).
func (e *enode) flatten() (inc, exc map[string]map[string]float64, kinds map[string]string) {
	inc, exc, kinds = map[string]map[string]float64{}, map[string]map[string]float64{}, map[string]string{}
	var walk func(e *enode) (i, x map[string]float64)
	walk = func(e *enode) (map[string]float64, map[string]float64) {
		i, x := map[string]float64{}, map[string]float64{}
		for k, v := range e.point {
			i[k] += v
			x[k] += v
		}
		for _, k := range e.order {
			c := e.children[k]
			ci, cx := walk(c)
			for m, v := range ci {
				i[m] += v
			}
			if c.kind != "function" {
				for m, v := range cx {
					x[m] += v
				}
			}
		}
		add(inc, e.path, i)
		add(exc, e.path, x)
		kinds[e.path] = e.kind
		return i, x
	}
	walk(e)
	return
}

func add(dst map[string]map[string]float64, path string, v map[string]float64) {
	d := dst[path]
	if d == nil {
		d = map[string]float64{}
		dst[path] = d
	}
	for k, x := range v {
		if x != 0 {
			d[k] += x
		}
	}
}
