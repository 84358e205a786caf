package blame

import "container/heap"

// Path limits: enumerating every path between two instructions is
// exponential, so the average of eq. 1's path rule is taken over the first
// maxPaths simple paths found within maxSteps block visits.
const (
	maxPaths = 256
	maxSteps = 20000
)

// reachesAvoiding reports whether j can execute after i without k
// executing in between (some path from i to j avoids k).
func (f *Func) reachesAvoiding(i, j, k int) bool {
	b0 := f.BlockOf(i)
	for idx := i + 1; idx < f.Blocks[b0].End; idx++ {
		if idx == k {
			return false
		}
		if idx == j {
			return true
		}
	}
	seen := make([]bool, len(f.Blocks))
	stack := append([]int(nil), f.Blocks[b0].Succs...)
	for len(stack) > 0 {
		b := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[b] {
			continue
		}
		seen[b] = true
		blocked := false
		for idx := f.Blocks[b].Start; idx < f.Blocks[b].End; idx++ {
			if idx == k {
				blocked = true
				break
			}
			if idx == j {
				return true
			}
		}
		if !blocked {
			stack = append(stack, f.Blocks[b].Succs...)
		}
	}
	return false
}

// minDistance is the fewest issue cycles from i to j over all paths (i's
// cycles counted, j's not); ok false if j is unreachable from i.
func (f *Func) minDistance(i, j int) (int, bool) {
	b0 := f.BlockOf(i)
	d := 0
	for idx := i; idx < f.Blocks[b0].End; idx++ {
		if idx == j && idx > i {
			return d, true
		}
		d += f.cycles(idx)
	}
	tail := d
	best := make([]int, len(f.Blocks))
	for b := range best {
		best[b] = -1
	}
	pq := &distHeap{}
	for _, s := range f.Blocks[b0].Succs {
		if best[s] < 0 || tail < best[s] {
			best[s] = tail
			heap.Push(pq, distItem{s, tail})
		}
	}
	done := make([]bool, len(f.Blocks))
	for pq.Len() > 0 {
		it := heap.Pop(pq).(distItem)
		if done[it.b] {
			continue
		}
		done[it.b] = true
		bl := f.Blocks[it.b]
		c := it.d
		for idx := bl.Start; idx < bl.End; idx++ {
			if idx == j {
				return c, true
			}
			c += f.cycles(idx)
		}
		for _, s := range bl.Succs {
			if !done[s] && (best[s] < 0 || c < best[s]) {
				best[s] = c
				heap.Push(pq, distItem{s, c})
			}
		}
	}
	return 0, false
}

type distItem struct{ b, d int }
type distHeap []distItem

func (h distHeap) Len() int { return len(h) }
func (h distHeap) Less(a, b int) bool {
	return h[a].d < h[b].d || (h[a].d == h[b].d && h[a].b < h[b].b)
}
func (h distHeap) Swap(a, b int)       { h[a], h[b] = h[b], h[a] }
func (h *distHeap) Push(x interface{}) { *h = append(*h, x.(distItem)) }
func (h *distHeap) Pop() interface{} {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// avgDistance is the mean issue distance from i to j over the simple paths
// between them (GPA: "the average length of all paths"), the block of i
// re-entered at most once so loop-carried dependencies count.
func (f *Func) avgDistance(i, j int) (float64, bool) {
	b0 := f.BlockOf(i)
	d := 0
	for idx := i; idx < f.Blocks[b0].End; idx++ {
		if idx == j && idx > i {
			return float64(d), true // straight-line: the only path
		}
		d += f.cycles(idx)
	}
	var sum float64
	n, steps := 0, 0
	onPath := make([]bool, len(f.Blocks))
	var visit func(b, dist int)
	visit = func(b, dist int) {
		if n >= maxPaths || steps >= maxSteps {
			return
		}
		steps++
		bl := f.Blocks[b]
		for idx := bl.Start; idx < bl.End; idx++ {
			if idx == j {
				sum += float64(dist)
				n++
				return
			}
			dist += f.cycles(idx)
		}
		onPath[b] = true
		for _, s := range bl.Succs {
			if !onPath[s] {
				visit(s, dist)
			}
		}
		onPath[b] = false
	}
	for _, s := range f.Blocks[b0].Succs {
		visit(s, d)
	}
	if n == 0 {
		if m, ok := f.minDistance(i, j); ok {
			return float64(m), true
		}
		return 0, false
	}
	return sum / float64(n), true
}
