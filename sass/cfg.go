package sass

import "sort"

// EdgeKind says why control may pass from one block to another.
type EdgeKind uint8

// Edge kinds.
const (
	EdgeFallthrough EdgeKind = iota // to the next block, also after a CALL returns
	EdgeTaken                       // a direct branch
	EdgeIndirect                    // BRX/JMX to one of its known targets
)

var edgeKindNames = [...]string{"fallthrough", "taken", "indirect"}

func (k EdgeKind) String() string {
	if int(k) < len(edgeKindNames) {
		return edgeKindNames[k]
	}
	return "EdgeKind(?)"
}

// Edge is a control-flow edge between two blocks.
type Edge struct {
	From, To int
	Kind     EdgeKind
}

// Block is a basic block: the instructions Insts[Start:End] of its function.
type Block struct {
	Index      int
	Start, End int   // instruction indexes
	Succs      []int // successor blocks, in edge order
	Preds      []int // predecessor blocks
	Reachable  bool  // reachable from the function's entry
	Exit       bool  // control may leave the function here (EXIT, RET, fall off the end, unknown jump)
	Unresolved bool  // ends in an indirect branch whose targets are unknown
	Loop       int   // innermost loop containing the block, -1 for none
}

// CFG is the control-flow graph of one function with its dominator trees
// and loop nest.
type CFG struct {
	Func   *Function
	Blocks []Block
	Edges  []Edge
	// IDom is the immediate dominator of each block; -1 for the entry and
	// for unreachable blocks.
	IDom []int
	// IPDom is the immediate post-dominator of each block; -1 when it is
	// the virtual exit (or the block reaches no exit).
	IPDom []int
	Loops []Loop // loops ordered by header offset, outer before inner

	blockOf         []int // instruction index -> block
	domIn, domOut   []int // dominator-tree DFS intervals
	pdomIn, pdomOut []int
}

// BlockOf returns the block that contains instruction index i, or -1.
func (g *CFG) BlockOf(i int) int {
	if i < 0 || i >= len(g.blockOf) {
		return -1
	}
	return g.blockOf[i]
}

// Dominates reports whether block a dominates block b (every path from the
// entry to b passes a). A block dominates itself. Unreachable blocks are
// dominated by nothing.
func (g *CFG) Dominates(a, b int) bool {
	if a < 0 || b < 0 || a >= len(g.Blocks) || b >= len(g.Blocks) || !g.Blocks[a].Reachable || !g.Blocks[b].Reachable {
		return false
	}
	return g.domIn[a] <= g.domIn[b] && g.domOut[b] <= g.domOut[a]
}

// PostDominates reports whether every path from block b to an exit passes
// block a.
func (g *CFG) PostDominates(a, b int) bool {
	if a < 0 || b < 0 || a >= len(g.Blocks) || b >= len(g.Blocks) || g.pdomIn[a] < 0 || g.pdomIn[b] < 0 {
		return false
	}
	return g.pdomIn[a] <= g.pdomIn[b] && g.pdomOut[b] <= g.pdomOut[a]
}

// buildCFG splits f into basic blocks at labels, branch targets and after
// control transfers (as nvdisasm -bbcfg does) and links them.
func buildCFG(f *Function, labels []Label) *CFG {
	g := &CFG{Func: f}
	n := len(f.Insts)
	g.blockOf = make([]int, n)
	if n == 0 {
		return g
	}
	leader := make([]bool, n+1)
	leader[0] = true
	mark := func(off uint64) {
		if i := f.InstAt(off); i >= 0 {
			leader[i] = true
		}
	}
	for _, l := range labels {
		mark(l.Offset)
	}
	for i := range f.Insts {
		in := &f.Insts[i]
		for _, t := range in.Targets {
			mark(t)
		}
		// nvdisasm ends a block after every control transfer except an
		// indirect CALL; matching it keeps block numbers comparable.
		if in.Flow != FlowNone && !in.Never() && !(in.Flow == FlowCall && in.indirectCall()) {
			leader[i+1] = true
		}
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && !leader[j] {
			j++
		}
		b := Block{Index: len(g.Blocks), Start: i, End: j, Loop: -1}
		for k := i; k < j; k++ {
			g.blockOf[k] = b.Index
		}
		g.Blocks = append(g.Blocks, b)
		i = j
	}
	addEdge := func(from, to int, k EdgeKind) {
		for _, e := range g.Blocks[from].Succs {
			if e == to {
				return
			}
		}
		g.Blocks[from].Succs = append(g.Blocks[from].Succs, to)
		g.Blocks[to].Preds = append(g.Blocks[to].Preds, from)
		g.Edges = append(g.Edges, Edge{From: from, To: to, Kind: k})
	}
	for bi := range g.Blocks {
		b := &g.Blocks[bi]
		last := &f.Insts[b.End-1]
		next := bi + 1
		fall := true
		if !last.Never() {
			switch last.Flow {
			case FlowBranch, FlowIndirect:
				kind := EdgeTaken
				if last.Flow == FlowIndirect {
					kind = EdgeIndirect
					if len(last.Targets) == 0 {
						b.Unresolved, b.Exit = true, true
					}
				}
				for _, t := range last.Targets {
					if ti := f.InstAt(t); ti >= 0 {
						addEdge(bi, g.blockOf[ti], kind)
					} else {
						b.Exit = true // a jump out of the function
					}
				}
				fall = last.conditional()
			case FlowReturn, FlowExit:
				b.Exit = true
				fall = last.Guarded()
			}
		}
		if fall {
			if next < len(g.Blocks) {
				addEdge(bi, next, EdgeFallthrough)
			} else {
				b.Exit = true
			}
		}
	}
	// reachability
	stack := []int{0}
	g.Blocks[0].Reachable = true
	for len(stack) > 0 {
		b := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range g.Blocks[b].Succs {
			if !g.Blocks[s].Reachable {
				g.Blocks[s].Reachable = true
				stack = append(stack, s)
			}
		}
	}
	g.dominators()
	g.findLoops()
	return g
}

// dominators computes both dominator trees with the iterative algorithm of
// Cooper, Harvey and Kennedy ("A Simple, Fast Dominance Algorithm").
func (g *CFG) dominators() {
	nb := len(g.Blocks)
	succ := func(b int) []int { return g.Blocks[b].Succs }
	pred := func(b int) []int { return g.Blocks[b].Preds }
	g.IDom = chkFrom(nb, 0, succ, pred)
	g.domIn, g.domOut = domIntervals(g.IDom)

	// Post-dominators: the reverse graph from a virtual exit joined to all
	// exit blocks; the virtual node is index nb.
	var exits []int
	for i := range g.Blocks {
		if g.Blocks[i].Exit && g.Blocks[i].Reachable {
			exits = append(exits, i)
		}
	}
	rsucc := func(b int) []int {
		if b == nb {
			return exits
		}
		return g.Blocks[b].Preds
	}
	rpred := func(b int) []int {
		if b < nb && g.Blocks[b].Exit && g.Blocks[b].Reachable {
			return append(append([]int(nil), g.Blocks[b].Succs...), nb)
		}
		if b == nb {
			return nil
		}
		return g.Blocks[b].Succs
	}
	ip := chkFrom(nb+1, nb, rsucc, rpred)
	g.IPDom = make([]int, nb)
	for i := 0; i < nb; i++ {
		g.IPDom[i] = ip[i]
		if ip[i] == nb {
			g.IPDom[i] = -1
		}
	}
	in, out := domIntervals(ip)
	g.pdomIn, g.pdomOut = in[:nb], out[:nb]
	for i := 0; i < nb; i++ {
		if ip[i] < 0 && i != nb {
			g.pdomIn[i], g.pdomOut[i] = -1, -1
		}
	}
}

// chkFrom computes immediate dominators of a graph of n nodes rooted at
// root; unreachable nodes get -1, and so does the root.
func chkFrom(n, root int, succ, pred func(int) []int) []int {
	// reverse postorder by iterative DFS
	order := make([]int, 0, n)
	rpo := make([]int, n)
	for i := range rpo {
		rpo[i] = -1
	}
	visited := make([]bool, n)
	type frame struct{ b, i int }
	stack := []frame{{root, 0}}
	visited[root] = true
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		ss := succ(top.b)
		if top.i < len(ss) {
			s := ss[top.i]
			top.i++
			if !visited[s] {
				visited[s] = true
				stack = append(stack, frame{s, 0})
			}
			continue
		}
		order = append(order, top.b)
		stack = stack[:len(stack)-1]
	}
	for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
		order[i], order[j] = order[j], order[i]
	}
	for i, b := range order {
		rpo[b] = i
	}
	idom := make([]int, n)
	for i := range idom {
		idom[i] = -1
	}
	idom[root] = root
	intersect := func(a, b int) int {
		for a != b {
			for rpo[a] > rpo[b] {
				a = idom[a]
			}
			for rpo[b] > rpo[a] {
				b = idom[b]
			}
		}
		return a
	}
	for changed := true; changed; {
		changed = false
		for _, b := range order[1:] {
			nd := -1
			for _, p := range pred(b) {
				if rpo[p] < 0 || idom[p] < 0 {
					continue
				}
				if nd < 0 {
					nd = p
				} else {
					nd = intersect(p, nd)
				}
			}
			if nd >= 0 && idom[b] != nd {
				idom[b] = nd
				changed = true
			}
		}
	}
	idom[root] = -1
	return idom
}

// domIntervals numbers the dominator tree given by idom in DFS order so that
// a dominates b iff in[a] <= in[b] && out[b] <= out[a]. Nodes outside the
// tree get -1.
func domIntervals(idom []int) (in, out []int) {
	n := len(idom)
	children := make([][]int, n)
	var roots []int
	hasParent := make([]bool, n)
	for b, d := range idom {
		if d >= 0 {
			children[d] = append(children[d], b)
			hasParent[b] = true
		}
	}
	for b := 0; b < n; b++ {
		if !hasParent[b] && (len(children[b]) > 0 || idom[b] == -1) {
			roots = append(roots, b)
		}
	}
	in = make([]int, n)
	out = make([]int, n)
	for i := range in {
		in[i], out[i] = -1, -1
	}
	clock := 0
	type frame struct{ b, i int }
	for _, r := range roots {
		stack := []frame{{r, 0}}
		in[r] = clock
		clock++
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.i < len(children[top.b]) {
				c := children[top.b][top.i]
				top.i++
				in[c] = clock
				clock++
				stack = append(stack, frame{c, 0})
				continue
			}
			out[top.b] = clock
			clock++
			stack = stack[:len(stack)-1]
		}
	}
	return in, out
}

// sortInts sorts and removes duplicates.
func sortInts(a []int) []int {
	sort.Ints(a)
	out := a[:0]
	for i, v := range a {
		if i == 0 || v != a[i-1] {
			out = append(out, v)
		}
	}
	return out
}
