package sass

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
)

// ScopeKind is the kind of a node of the structure tree.
type ScopeKind uint8

// Scope kinds, as HPCToolkit's hpcstruct names them: procedure, alien
// (inlined code), loop, statement.
const (
	ScopeFunction ScopeKind = iota
	ScopeInline
	ScopeLoop
	ScopeLine
)

var scopeKindNames = [...]string{"function", "inline", "loop", "line"}

func (k ScopeKind) String() string {
	if int(k) < len(scopeKindNames) {
		return scopeKindNames[k]
	}
	return "ScopeKind(?)"
}

// Scope is a node of the structure tree of a module: function -> inlined
// frames and loops (nested in the order the code nests them) -> source
// lines -> instructions.
type Scope struct {
	Kind ScopeKind
	Func *Function
	// Pos is the function's first line (ScopeFunction), the call site
	// (ScopeInline), the header's line (ScopeLoop) or the line itself
	// (ScopeLine).
	Pos Pos
	// Callee is the file of the inlined code (ScopeInline).
	Callee int32
	// Loop indexes Func.CFG().Loops (ScopeLoop).
	Loop     int
	Parent   *Scope
	Children []*Scope
	// Insts are the indexes into Func.Insts of the instructions directly in
	// this scope (ScopeLine only), ascending.
	Insts []int

	first uint64 // smallest offset below this scope, for ordering
	kids  map[scopeKey]*Scope
}

type scopeKey struct {
	kind   ScopeKind
	pos    Pos
	callee int32
	loop   int
}

// Structure is the program structure of a module, as HPCToolkit recovers it
// for GPU code: per function, the inlined frames, loop nests and source
// lines of its instructions.
type Structure struct {
	Module *Module
	Funcs  []*Scope // one ScopeFunction per function, in module order

	leaf map[*Function][]*Scope // instruction index -> ScopeLine
}

// Frame is one inlined frame of a location: the code of file Callee was
// inlined at CallSite.
type Frame struct {
	CallSite Pos
	Callee   int32 // file index of the inlined code
}

// Frames returns the inlined frames of l, outermost first.
func (l Location) Frames() []Frame {
	fr := make([]Frame, len(l.Calls))
	for k, c := range l.Calls {
		callee := l.File
		if k+1 < len(l.Calls) {
			callee = l.Calls[k+1].File
		}
		fr[k] = Frame{CallSite: c, Callee: callee}
	}
	return fr
}

// Structure returns the module's structure tree (built once).
func (m *Module) Structure() *Structure {
	m.structOnce.Do(func() { m.structure = buildStructure(m) })
	return m.structure
}

func buildStructure(m *Module) *Structure {
	s := &Structure{Module: m, leaf: make(map[*Function][]*Scope)}
	for _, f := range m.Functions {
		s.Funcs = append(s.Funcs, buildFuncScope(m, f, s))
	}
	return s
}

func buildFuncScope(m *Module, f *Function, s *Structure) *Scope {
	root := &Scope{Kind: ScopeFunction, Func: f, Pos: NoPos, Callee: -1, Loop: -1, first: f.Start}
	for i := range f.Insts {
		if l := m.Location(f.Insts[i].Loc); l.File >= 0 {
			if len(l.Calls) > 0 {
				root.Pos = l.Calls[0]
			} else {
				root.Pos = l.Pos
			}
			break
		}
	}
	g := f.CFG()
	frames := make([][]Frame, len(f.Insts))
	for i := range f.Insts {
		frames[i] = m.Location(f.Insts[i].Loc).Frames()
	}
	// A loop sits inside the inlined frames common to all its instructions
	// (with line information).
	prefix := make([][]Frame, len(g.Loops))
	for li := range g.Loops {
		first := true
		var p []Frame
		for _, b := range g.Loops[li].Blocks {
			blk := g.Blocks[b]
			for i := blk.Start; i < blk.End; i++ {
				if f.Insts[i].Loc < 0 {
					continue
				}
				if first {
					p, first = frames[i], false
					continue
				}
				p = commonFrames(p, frames[i])
			}
		}
		prefix[li] = p
	}
	// A loop is named by the line of its closing branch when that line lies
	// in the loop's own inlined context, else by its header's first line.
	loopPos := make([]Pos, len(g.Loops))
	for li := range g.Loops {
		lp := &g.Loops[li]
		loopPos[li] = m.Location(lp.Loc).Pos
		if l := m.Location(lp.LatchLoc); l.File >= 0 && sameFrames(l.Frames(), prefix[li]) {
			loopPos[li] = l.Pos
		}
	}
	leaves := make([]*Scope, len(f.Insts))
	for i := range f.Insts {
		in := &f.Insts[i]
		cur := root
		depth := 0
		for _, li := range g.LoopNest(g.BlockOf(i)) {
			p := prefix[li]
			for k := depth; k < len(p); k++ {
				cur = cur.child(scopeKey{kind: ScopeInline, pos: p[k].CallSite, callee: p[k].Callee, loop: -1}, f, in.Offset)
			}
			if len(p) > depth {
				depth = len(p)
			}
			cur = cur.child(scopeKey{kind: ScopeLoop, pos: loopPos[li], callee: -1, loop: li}, f, in.Offset)
		}
		fr := frames[i]
		for k := depth; k < len(fr); k++ {
			cur = cur.child(scopeKey{kind: ScopeInline, pos: fr[k].CallSite, callee: fr[k].Callee, loop: -1}, f, in.Offset)
		}
		pos := m.Location(in.Loc).Pos
		cur = cur.child(scopeKey{kind: ScopeLine, pos: pos, callee: -1, loop: -1}, f, in.Offset)
		cur.Insts = append(cur.Insts, i)
		leaves[i] = cur
	}
	root.sortChildren()
	s.leaf[f] = leaves
	return root
}

func sameFrames(a, b []Frame) bool {
	return len(a) == len(b) && len(commonFrames(a, b)) == len(a)
}

func commonFrames(a, b []Frame) []Frame {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}

func (sc *Scope) child(k scopeKey, f *Function, off uint64) *Scope {
	if c := sc.kids[k]; c != nil {
		if off < c.first {
			c.first = off
		}
		return c
	}
	if sc.kids == nil {
		sc.kids = make(map[scopeKey]*Scope)
	}
	c := &Scope{Kind: k.kind, Func: f, Pos: k.pos, Callee: k.callee, Loop: k.loop, Parent: sc, first: off}
	sc.kids[k] = c
	sc.Children = append(sc.Children, c)
	return c
}

func (sc *Scope) sortChildren() {
	sort.SliceStable(sc.Children, func(i, j int) bool {
		a, b := sc.Children[i], sc.Children[j]
		if a.first != b.first {
			return a.first < b.first
		}
		return a.Kind < b.Kind
	})
	for _, c := range sc.Children {
		c.sortChildren()
	}
	sc.kids = nil
}

// ScopeChain is where an instruction sits: its function, inlined frames
// (outermost first), enclosing loops (outermost first) and source line.
// Scopes is the path through the structure tree from the function to the
// line, with inlined frames and loops interleaved as they nest.
type ScopeChain struct {
	Func   *Function
	Inst   int // index into Func.Insts
	Inline []Frame
	Loops  []*Loop
	Line   Pos
	Scopes []*Scope
}

// Lookup places the instruction at offset off of function or kernel name
// (offsets counted from name's start, as CUPTI and the Sanitizer API report
// them; see Module.FuncAt) in the structure tree.
func (s *Structure) Lookup(name string, off uint64) (ScopeChain, bool) {
	f, so := s.Module.FuncAt(name, off)
	if f == nil {
		return ScopeChain{}, false
	}
	i := f.InstAt(so)
	if i < 0 {
		return ScopeChain{}, false
	}
	leaf := s.leaf[f][i]
	var path []*Scope
	for sc := leaf; sc != nil; sc = sc.Parent {
		path = append(path, sc)
	}
	for a, b := 0, len(path)-1; a < b; a, b = a+1, b-1 {
		path[a], path[b] = path[b], path[a]
	}
	loc := s.Module.Location(f.Insts[i].Loc)
	c := ScopeChain{Func: f, Inst: i, Inline: loc.Frames(), Line: loc.Pos, Scopes: path}
	g := f.CFG()
	for _, li := range g.LoopNest(g.BlockOf(i)) {
		c.Loops = append(c.Loops, &g.Loops[li])
	}
	return c, true
}

// String renders the chain in one line, e.g.
// "_Z6reloadPKfPfii > loop@k.cu:8 > k.cu:5".
func (c ScopeChain) String() string {
	if c.Func == nil {
		return "?"
	}
	m := c.Func.mod
	var parts []string
	for _, sc := range c.Scopes {
		parts = append(parts, sc.label(m))
	}
	return strings.Join(parts, " > ")
}

func (sc *Scope) label(m *Module) string {
	switch sc.Kind {
	case ScopeFunction:
		return sc.Func.Name
	case ScopeInline:
		return "inline@" + m.PosString(sc.Pos) + "(" + m.File(sc.Callee) + ")"
	case ScopeLoop:
		return "loop@" + m.PosString(sc.Pos)
	}
	return m.PosString(sc.Pos)
}

// WriteText writes the canonical text rendering of the structure tree: one
// scope per line, indented by depth, with the offset ranges of the
// instructions of each line scope (and the instructions themselves when
// insts is true). Golden tests compare this rendering.
func (s *Structure) WriteText(w io.Writer, insts bool) error {
	bw := bufio.NewWriter(w)
	m := s.Module
	fmt.Fprintf(bw, "module %s\n", orDash(m.Arch))
	for _, fs := range s.Funcs {
		f := fs.Func
		kind := "function"
		if f.Entry {
			kind = "kernel"
		}
		fmt.Fprintf(bw, "%s %s [%#x-%#x) %s\n", kind, f.Name, f.Start, f.End, m.PosString(fs.Pos))
		g := f.CFG()
		var walk func(sc *Scope, depth int)
		walk = func(sc *Scope, depth int) {
			ind := strings.Repeat("  ", depth)
			switch sc.Kind {
			case ScopeInline:
				fmt.Fprintf(bw, "%sinline %s -> %s\n", ind, m.PosString(sc.Pos), m.File(sc.Callee))
			case ScopeLoop:
				lp := &g.Loops[sc.Loop]
				hdr := f.Insts[g.Blocks[lp.Header].Start].Offset
				irr := ""
				if lp.Irreducible {
					irr = " irreducible"
				}
				fmt.Fprintf(bw, "%sloop %s header %#x depth %d blocks %d%s\n", ind, m.PosString(sc.Pos), hdr, lp.Depth, len(lp.Blocks), irr)
			case ScopeLine:
				fmt.Fprintf(bw, "%sline %s %s\n", ind, m.PosString(sc.Pos), ranges(f, sc.Insts))
				if insts {
					for _, i := range sc.Insts {
						in := &f.Insts[i]
						fmt.Fprintf(bw, "%s  %#06x %s\n", ind, in.Offset, in.Text())
					}
				} else {
					for _, i := range sc.Insts {
						if in := &f.Insts[i]; in.Flow == FlowCall {
							callee := in.Callee
							if callee == "" {
								callee = "(indirect)"
							}
							fmt.Fprintf(bw, "%s  call %#x -> %s\n", ind, in.Offset, callee)
						}
					}
				}
			}
			for _, c := range sc.Children {
				walk(c, depth+1)
			}
		}
		for _, c := range fs.Children {
			walk(c, 1)
		}
	}
	return bw.Flush()
}

// ranges renders instruction offsets as merged [lo-hi) ranges.
func ranges(f *Function, idx []int) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for k := 0; k < len(idx); {
		j := k
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		lo := f.Insts[idx[k]].Offset
		hi := f.End
		if idx[j]+1 < len(f.Insts) {
			hi = f.Insts[idx[j]+1].Offset
		}
		if k > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "[%#x-%#x)", lo, hi)
		k = j + 1
	}
	sb.WriteByte('}')
	return sb.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// CallSite is a CALL instruction and its target.
type CallSite struct {
	Caller *Function
	Inst   int    // index into Caller.Insts
	Callee string // "" for an indirect call
}

// CallSites lists the module's CALL instructions: the static call graph.
func (m *Module) CallSites() []CallSite {
	var cs []CallSite
	for _, f := range m.Functions {
		for i := range f.Insts {
			if f.Insts[i].Flow == FlowCall {
				cs = append(cs, CallSite{Caller: f, Inst: i, Callee: f.Insts[i].Callee})
			}
		}
	}
	return cs
}
