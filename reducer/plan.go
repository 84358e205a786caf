// Package reducer merges a job's rank profiles through a reduction tree on
// JetStream. Leaves consume the batches and done items of their ranks,
// inner nodes the cumulative partials of their children; every node is a
// durable pull consumer, acknowledges its inputs once their merge is
// durable, and publishes a cumulative partial upward; the root publishes
// the whole-job profile on the job's final subject. Nodes are independent
// workers: RunTree runs a whole tree in one process, RunNode one node (in
// a process of its own, on any machine that reaches the broker). See
// docs/reduction.md.
package reducer

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// NodeName names a tree node: its level (0 for leaves) and index in the
// level. It prints as "level.index", the form `gpuprof reduce --node`
// takes.
type NodeName struct{ Level, Index int }

func (n NodeName) String() string { return fmt.Sprintf("%d.%d", n.Level, n.Index) }

// Consumer is the node's durable consumer name on the job's stream.
func (n NodeName) Consumer() string { return fmt.Sprintf("node_%d_%d", n.Level, n.Index) }

// ParseNodeName reads "level.index".
func ParseNodeName(s string) (NodeName, error) {
	a, b, ok := strings.Cut(s, ".")
	l, err1 := strconv.Atoi(a)
	i, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || l < 0 || i < 0 || l > 0xffff {
		return NodeName{}, fmt.Errorf("reducer: node %q: want LEVEL.INDEX, e.g. 0.3", s)
	}
	return NodeName{l, i}, nil
}

// Node is one node of a plan.
type Node struct {
	Name NodeName
	// Ranks below the node, ascending; a leaf consumes their batches.
	Ranks []int32
	// Children of an inner node (nodes of Level-1); empty for a leaf.
	Children []NodeName
	// Parent, unless Root.
	Parent NodeName
	Root   bool
}

// Leaf reports whether n consumes batches (rather than partials).
func (n *Node) Leaf() bool { return n.Name.Level == 0 }

// Tree is a reduction plan: ranks split into leaves of at most FanIn
// ranks, and each level's nodes grouped FanIn at a time under the next,
// up to one root. Groups are balanced (sizes differ by at most one) so no
// node lags for being larger.
type Tree struct {
	FanIn  int
	Ranks  []int32
	Levels [][]*Node // Levels[0]: leaves; the last level holds the root alone
}

// Plan builds the tree over ranks with fan-in k (at least 2).
func Plan(ranks []int32, k int) (*Tree, error) {
	if k < 2 {
		return nil, fmt.Errorf("reducer: fan-in %d, want at least 2", k)
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("reducer: no ranks to reduce")
	}
	rs := append([]int32(nil), ranks...)
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	for i, r := range rs {
		if r < 0 {
			return nil, fmt.Errorf("reducer: rank %d is negative", r)
		}
		if i > 0 && rs[i-1] == r {
			return nil, fmt.Errorf("reducer: rank %d listed twice", r)
		}
	}
	t := &Tree{FanIn: k, Ranks: rs}
	var level []*Node
	for i, g := range groups(len(rs), k) {
		level = append(level, &Node{Name: NodeName{0, i}, Ranks: rs[g[0]:g[1]]})
	}
	t.Levels = append(t.Levels, level)
	for len(level) > 1 {
		var next []*Node
		l := len(t.Levels)
		for i, g := range groups(len(level), k) {
			n := &Node{Name: NodeName{l, i}}
			for _, c := range level[g[0]:g[1]] {
				c.Parent = n.Name
				n.Children = append(n.Children, c.Name)
				n.Ranks = append(n.Ranks, c.Ranks...)
			}
			next = append(next, n)
		}
		t.Levels = append(t.Levels, next)
		level = next
	}
	level[0].Root = true
	return t, nil
}

// PlanN plans ranks 0..n-1.
func PlanN(n, k int) (*Tree, error) {
	rs := make([]int32, n)
	for i := range rs {
		rs[i] = int32(i)
	}
	return Plan(rs, k)
}

// groups splits n things into ceil(n/k) contiguous groups of balanced size.
func groups(n, k int) [][2]int {
	g := (n + k - 1) / k
	out := make([][2]int, 0, g)
	start := 0
	for i := 0; i < g; i++ {
		size := n / g
		if i < n%g {
			size++
		}
		out = append(out, [2]int{start, start + size})
		start += size
	}
	return out
}

// Root is the root node.
func (t *Tree) Root() *Node { return t.Levels[len(t.Levels)-1][0] }

// Node returns the node called name.
func (t *Tree) Node(name NodeName) (*Node, error) {
	if name.Level < 0 || name.Level >= len(t.Levels) || name.Index < 0 || name.Index >= len(t.Levels[name.Level]) {
		return nil, fmt.Errorf("reducer: node %v is not in the plan (%v)", name, t)
	}
	return t.Levels[name.Level][name.Index], nil
}

// Nodes lists every node, leaves first.
func (t *Tree) Nodes() []*Node {
	var out []*Node
	for _, l := range t.Levels {
		out = append(out, l...)
	}
	return out
}

func (t *Tree) String() string {
	parts := make([]string, 0, len(t.Levels))
	for i, l := range t.Levels {
		switch {
		case i == len(t.Levels)-1:
			parts = append(parts, "1 root")
		case i == 0:
			parts = append(parts, fmt.Sprintf("%d leaves", len(l)))
		default:
			parts = append(parts, fmt.Sprintf("%d nodes at level %d", len(l), i))
		}
	}
	return fmt.Sprintf("%d ranks, fan-in %d: %s", len(t.Ranks), t.FanIn, strings.Join(parts, " + "))
}
