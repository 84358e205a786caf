package sass

import "sort"

// Loop is a loop of a function's CFG found by Havlak's algorithm
// ("Nesting of reducible and irreducible loops", TOPLAS 1997, with
// Ramalingam's correction), which also nests irreducible loops.
type Loop struct {
	Index       int
	Header      int   // header block: the loop's first block in DFS order
	Blocks      []int // all blocks of the loop, nested loops included, ascending
	Parent      int   // enclosing loop, -1 at top level
	Children    []int // directly nested loops
	Depth       int   // 1 for an outermost loop
	Irreducible bool  // entered at more than one block
	Entries     []int // blocks entered from outside the loop (the header first)
	BackEdges   []Edge
	Loc         int32 // line-map entry of the header's first instruction, -1 if none
	// LatchLoc is the line-map entry of the instruction that closes the
	// loop: the last instruction of the latest back-edge source, which for
	// the rotated loops ptxas emits is the loop condition's branch. The
	// structure tree names loops by it, as hpcstruct does.
	LatchLoc int32
}

// findLoops runs Havlak's loop-nesting algorithm over the reachable blocks:
// number the blocks in DFS preorder, find the loops innermost first
// (havlakLoops), then give them their public form (publishLoops) and their
// entries.
func (g *CFG) findLoops() {
	t := g.dfsOrder()
	raw := g.havlakLoops(t)
	if len(raw) == 0 {
		return
	}
	g.publishLoops(t, raw)
	g.loopEntries()
}

// dfsTree is the DFS preorder numbering of the blocks reachable from the
// entry.
type dfsTree struct {
	number []int // DFS number of each block, dfsUnvisited if not reached
	node   []int // block of each DFS number
	last   []int // per DFS number: the last number of its subtree
}

const dfsUnvisited = -1

// isAncestor reports whether DFS number w is an ancestor of v (or v).
func (t *dfsTree) isAncestor(w, v int) bool { return w <= v && v <= t.last[w] }

func (g *CFG) dfsOrder() dfsTree {
	nb := len(g.Blocks)
	number := make([]int, nb) // DFS preorder number of each block
	for i := range number {
		number[i] = dfsUnvisited
	}
	var node []int // block of each DFS number
	last := []int{}
	// iterative DFS from the entry
	type frame struct{ b, i int }
	stack := []frame{{0, 0}}
	number[0] = 0
	node = append(node, 0)
	last = append(last, 0)
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		ss := g.Blocks[top.b].Succs
		if top.i < len(ss) {
			s := ss[top.i]
			top.i++
			if number[s] == dfsUnvisited {
				number[s] = len(node)
				node = append(node, s)
				last = append(last, 0)
				stack = append(stack, frame{s, 0})
			}
			continue
		}
		last[number[top.b]] = len(node) - 1
		stack = stack[:len(stack)-1]
	}
	return dfsTree{number: number, node: node, last: last}
}

// havlakLoop is a loop as Havlak's algorithm finds it, before ordering.
type havlakLoop struct {
	header    int // DFS number
	direct    []int
	children  []int // indexes into raw
	irr       bool
	self      bool
	backEdges []Edge
}

// havlakLoops finds the loops, headers in reverse DFS order, so a loop's
// nested loops come before it.
func (g *CFG) havlakLoops(t dfsTree) []havlakLoop {
	number, node := t.number, t.node
	size := len(node)
	nonBack := make([][]int, size)
	back := make([][]int, size)
	for w := 0; w < size; w++ {
		for _, p := range g.Blocks[node[w]].Preds {
			v := number[p]
			if v == dfsUnvisited {
				continue
			}
			if t.isAncestor(w, v) {
				back[w] = append(back[w], v)
			} else {
				nonBack[w] = append(nonBack[w], v)
			}
		}
	}
	// union-find over DFS numbers
	uf := make([]int, size)
	for i := range uf {
		uf[i] = i
	}
	var find func(int) int
	find = func(x int) int {
		for uf[x] != x {
			uf[x] = uf[uf[x]]
			x = uf[x]
		}
		return x
	}
	var raw []havlakLoop
	loopOf := make([]int, size) // DFS number of a header -> raw loop index
	for i := range loopOf {
		loopOf[i] = -1
	}
	inPool := make([]bool, size)
	for w := size - 1; w >= 0; w-- {
		var pool []int
		self, irr := false, false
		var be []Edge
		for _, v := range back[w] {
			be = append(be, Edge{From: node[v], To: node[w], Kind: EdgeTaken})
			if v == w {
				self = true
				continue
			}
			x := find(v)
			if !inPool[x] {
				inPool[x] = true
				pool = append(pool, x)
			}
		}
		work := append([]int(nil), pool...)
		for len(work) > 0 {
			x := work[len(work)-1]
			work = work[:len(work)-1]
			for _, y := range nonBack[x] {
				yd := find(y)
				if !t.isAncestor(w, yd) {
					irr = true
					nonBack[w] = append(nonBack[w], yd)
				} else if yd != w && !inPool[yd] {
					inPool[yd] = true
					pool = append(pool, yd)
					work = append(work, yd)
				}
			}
		}
		if len(pool) == 0 && !self {
			continue
		}
		l := havlakLoop{header: w, irr: irr, self: self, backEdges: be}
		for _, x := range pool {
			inPool[x] = false
			uf[x] = w
			if loopOf[x] >= 0 {
				l.children = append(l.children, loopOf[x])
			} else {
				l.direct = append(l.direct, node[x])
			}
		}
		loopOf[w] = len(raw)
		raw = append(raw, l)
	}
	return raw
}

// publishLoops orders the loops by header position (outer first when they
// share one) and fills in g.Loops and each block's innermost loop.
func (g *CFG) publishLoops(t dfsTree, raw []havlakLoop) {
	node := t.node
	parent := make([]int, len(raw))
	for i := range parent {
		parent[i] = -1
	}
	for i, l := range raw {
		for _, c := range l.children {
			parent[c] = i
		}
	}
	depth := make([]int, len(raw))
	var dep func(int) int
	dep = func(i int) int {
		if depth[i] == 0 {
			depth[i] = 1
			if parent[i] >= 0 {
				depth[i] = dep(parent[i]) + 1
			}
		}
		return depth[i]
	}
	perm := make([]int, len(raw))
	for i := range perm {
		perm[i] = i
		dep(i)
	}
	sort.SliceStable(perm, func(a, b int) bool {
		ha, hb := g.Blocks[node[raw[perm[a]].header]].Start, g.Blocks[node[raw[perm[b]].header]].Start
		if ha != hb {
			return ha < hb
		}
		return depth[perm[a]] < depth[perm[b]]
	})
	newIndex := make([]int, len(raw))
	for ni, oi := range perm {
		newIndex[oi] = ni
	}
	g.Loops = make([]Loop, len(raw))
	var all func(oi int) []int
	all = func(oi int) []int {
		bs := append([]int{node[raw[oi].header]}, raw[oi].direct...)
		for _, c := range raw[oi].children {
			bs = append(bs, all(c)...)
		}
		return bs
	}
	for ni, oi := range perm {
		l := raw[oi]
		hb := node[l.header]
		lp := Loop{
			Index:       ni,
			Header:      hb,
			Parent:      -1,
			Depth:       depth[oi],
			Irreducible: l.irr,
			BackEdges:   l.backEdges,
			Blocks:      sortInts(all(oi)),
			Loc:         -1,
		}
		if parent[oi] >= 0 {
			lp.Parent = newIndex[parent[oi]]
		}
		for _, c := range l.children {
			lp.Children = append(lp.Children, newIndex[c])
		}
		sort.Ints(lp.Children)
		if b := g.Blocks[hb]; b.End > b.Start {
			lp.Loc = g.Func.Insts[b.Start].Loc
		}
		lp.LatchLoc = lp.Loc
		latch := -1
		for _, e := range l.backEdges {
			if b := g.Blocks[e.From]; b.End > b.Start && (latch < 0 || b.End-1 > latch) {
				latch = b.End - 1
			}
		}
		if latch >= 0 && g.Func.Insts[latch].Loc >= 0 {
			lp.LatchLoc = g.Func.Insts[latch].Loc
		}
		g.Loops[ni] = lp
		// innermost loop of the directly contained blocks
		g.Blocks[hb].Loop = ni
		for _, b := range l.direct {
			g.Blocks[b].Loop = ni
		}
	}
}

// loopEntries fills in each loop's entries: its header, then the blocks
// with a reachable predecessor outside the loop.
func (g *CFG) loopEntries() {
	for i := range g.Loops {
		lp := &g.Loops[i]
		in := make(map[int]bool, len(lp.Blocks))
		for _, b := range lp.Blocks {
			in[b] = true
		}
		lp.Entries = append(lp.Entries, lp.Header)
		for _, b := range lp.Blocks {
			if b == lp.Header {
				continue
			}
			for _, p := range g.Blocks[b].Preds {
				if !in[p] && g.Blocks[p].Reachable {
					lp.Entries = append(lp.Entries, b)
					break
				}
			}
		}
	}
}

// Contains reports whether loop l contains block b.
func (l *Loop) Contains(b int) bool {
	i := sort.SearchInts(l.Blocks, b)
	return i < len(l.Blocks) && l.Blocks[i] == b
}

// LoopNest returns the loops that contain block b, outermost first.
func (g *CFG) LoopNest(b int) []int {
	if b < 0 || b >= len(g.Blocks) {
		return nil
	}
	var nest []int
	for l := g.Blocks[b].Loop; l >= 0; l = g.Loops[l].Parent {
		nest = append(nest, l)
	}
	for i, j := 0, len(nest)-1; i < j; i, j = i+1, j-1 {
		nest[i], nest[j] = nest[j], nest[i]
	}
	return nest
}
