package online

import (
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// Shared-memory bank conflicts (per instruction) and CUDAAdvisor's reuse
// distance histograms (per kernel context) from the access records
// (docs/advice.md), and memory divergence (per instruction). Reuse needs
// every record of a thread block in stream order, divergence every lane
// of a warp access, which the redundancy workers (sharded by lane group)
// do not see, so they run on goroutines of their own, which get blocks
// (or parts of a block's work) in turn (memSplit).
//
// Reuse distances are measured in one traced block in ReuseSampling of
// each launch (the first, then every ReuseSampling-th), the way GVProf
// samples blocks for redundancy: a block's distances are exact, and the
// blocks of a kernel run the same code on other data. Each histogram is
// scaled to the loads of every traced block (scaleHist), which are
// counted exactly. Tracking a block costs a hash table and a Fenwick tree
// update per unit and granularity, most of the memory workers' time on
// the H100 (docs/collector.md, "Reuse distance by block sampling").

// Bank-conflict metrics at shared-memory instructions.
var (
	SharedWarpAccesses = profile.Metric("mem.shared.warp_accesses") // warp-level shared accesses traced
	// SharedWavefronts adds, per warp access, the most distinct 4-byte
	// words any one of the 32 banks must deliver: the passes the access
	// needs (the conflict degree).
	SharedWavefronts = profile.Metric("mem.shared.wavefronts")
	// SharedIdeal adds the passes a conflict-free access of the same words
	// needs: ⌈distinct words / 32⌉.
	SharedIdeal = profile.Metric("mem.shared.ideal_wavefronts")
)

// ReuseWindow bounds the reuse distances measured: a distance of
// ReuseWindow units or more counts as no reuse (the histogram's inf
// bucket), as does a first load and a load after a store to the unit.
// 2^14 units exceed the H100's 256 KB L1 at 32- and 128-byte granularity.
const ReuseWindow = 1 << 14

// Reuse granularities: the element (a lane's address) and the 128-byte
// cache line, CUDAAdvisor's two (the report shows both). The 32-byte
// sector is counted for memory divergence only.
var reuseGrains = [...]struct {
	name  string
	shift uint
}{{"elem", 0}, {"line", lineShift}}

const (
	sectorShift = 5 // the 32-byte sector
	lineShift   = 7 // the 128-byte cache line
)

// DefaultReuseSampling is the default of Options.ReuseSampling.
const DefaultReuseSampling = 4

// Parts of a block's memory work (memRef.parts): bit g (g <
// len(reuseGrains)) its reuse distances at granularity g, which need its
// records in stream order at that granularity only; partDiv the memory
// divergence and the loads' unit counts, per record. Shared accesses'
// bank conflicts ride on bit 0.
const (
	partDiv   = len(reuseGrains)
	reuseMask = 1<<len(reuseGrains) - 1
	numParts  = len(reuseGrains) + 1
)

// trackedBlock marks a block unit whose reuse distances are measured
// (Analyzer.units).
const trackedBlock = 1 << 31

// ReuseBuckets is the number of finite buckets: b0 counts distance 0,
// bk (k ≥ 1) distances in [2^(k-1), 2^k).
const ReuseBuckets = 15

// ReuseMetric names a bucket of granularity g ("elem", "line"):
// "reuse.<g>.b<k>", or "reuse.<g>.inf" for k = ReuseBuckets.
func ReuseMetric(g string, k int) string {
	if k >= ReuseBuckets {
		return "reuse." + g + ".inf"
	}
	return "reuse." + g + ".b" + strconv.Itoa(k)
}

// reuseBucket is the bucket of distance d (d < window).
func reuseBucket(d int) int { return bits.Len(uint(d)) }

// reuseTracker measures one block's reuse distances at one granularity:
// an LRU stack of loaded units as a Fenwick tree over load times, where
// each unit's latest load holds a mark. A store turns the unit's mark into
// a tombstone (the write restarts the unit: CUDAAdvisor counts the
// rewritten address as a new element, L1 being write-evict), so distances
// count distinct (unit, version) pairs.
type reuseTracker struct {
	window int
	last   unitMap  // live unit -> time of its latest load
	fen    []int32  // Fenwick tree over times 1..len-1
	unitAt []uint64 // unit loaded at a time
	state  []uint8  // 0 no mark, 1 live, 2 tombstone
	now    int32
	small  int // blocks in a row that held much less than the tracker's size
}

// shrinkAfter is how many blocks in a row a tracker must be oversized for
// before reset lets it go.
const shrinkAfter = 16

func newReuseTracker(window int) *reuseTracker {
	return &reuseTracker{window: window, fen: make([]int32, 17), unitAt: make([]uint64, 17), state: make([]uint8, 17)}
}

func (t *reuseTracker) add(i int32, v int32) {
	for ; int(i) < len(t.fen); i += i & -i {
		t.fen[i] += v
	}
}

func (t *reuseTracker) prefix(i int32) int32 {
	s := int32(0)
	for ; i > 0; i -= i & -i {
		s += t.fen[i]
	}
	return s
}

// load returns the bucket of a load of u (ReuseBuckets: no reuse).
func (t *reuseTracker) load(u uint64) int {
	b := ReuseBuckets
	if at := t.last.get(u); at > 0 {
		if d := int(t.prefix(t.now) - t.prefix(at)); d < t.window {
			b = reuseBucket(d)
		}
		t.add(at, -1)
		t.state[at] = 0
	}
	if int(t.now)+1 >= len(t.fen) {
		t.makeRoom()
	}
	t.now++
	t.add(t.now, 1)
	t.unitAt[t.now], t.state[t.now] = u, 1
	t.last.set(u, t.now)
	return b
}

// store restarts unit u.
func (t *reuseTracker) store(u uint64) {
	if at := t.last.get(u); at > 0 {
		t.state[at] = 2
		t.last.del(u)
	}
}

// makeRoom grows the arrays up to twice the window, then compacts: only
// the window's most recent marks are kept and renumbered from 1. A mark
// older than those has window or more marks after it, and marks never
// leave the part of the stack after a time (a reload moves its mark
// later), so its unit's next distance would be window or more anyway: the
// histogram is exact.
func (t *reuseTracker) makeRoom() {
	if n := len(t.fen); n < 2*t.window+1 {
		n = min(2*n, 2*t.window+1)
		t.unitAt = append(t.unitAt, make([]uint64, n-len(t.unitAt))...)
		t.state = append(t.state, make([]uint8, n-len(t.state))...)
		t.fen = make([]int32, n)
		t.rebuild()
		return
	}
	keep := 0
	cut := int32(0)
	for i := t.now; i > 0; i-- {
		if t.state[i] == 0 {
			continue
		}
		if keep == t.window {
			cut = i
			break
		}
		keep++
	}
	// The map is rebuilt from the kept marks: deleting the dropped units one
	// by one (as many as the window) cost more than clearing it.
	clear(t.state[1 : cut+1])
	t.last.clear()
	j := int32(0)
	for i := cut + 1; i <= t.now; i++ {
		if t.state[i] == 0 {
			continue
		}
		j++
		t.unitAt[j], t.state[j] = t.unitAt[i], t.state[i]
		if t.state[j] == 1 {
			t.last.set(t.unitAt[j], j)
		}
	}
	clear(t.state[j+1:])
	t.now = j
	t.rebuild()
}

// reset empties the tracker for another block. A tracker much larger than
// what its last blocks held starts small again: clearing costs its size.
// It waits for shrinkAfter such blocks in a row, since blocks of other
// sizes alternate (a grid's border blocks load less than its inner ones),
// and growing again each time cost more than the clearing (allocations
// and the collector's garbage: a third of what a short launch allocated).
func (t *reuseTracker) reset() {
	if len(t.fen) > 4*max(int(t.now), 16)+1 {
		if t.small++; t.small >= shrinkAfter {
			*t = *newReuseTracker(t.window)
			return
		}
	} else {
		t.small = 0
	}
	t.last.clear()
	clear(t.fen)
	clear(t.state[:t.now+1])
	t.now = 0
}

// rebuild recomputes the Fenwick tree from the marks in O(n).
func (t *reuseTracker) rebuild() {
	clear(t.fen)
	for i := 1; i < len(t.fen); i++ {
		if t.state[i] != 0 {
			t.fen[i]++
		}
		if p := i + (i & -i); p < len(t.fen) {
			t.fen[p] += t.fen[i]
		}
	}
}

// ctaState is one thread block's reuse trackers.
type ctaState struct {
	tr     [len(reuseGrains)]*reuseTracker
	exited uint64 // warps that left
}

type ctaKey struct {
	launch, block uint32
}

type bankKey struct {
	ctx uint32
	pc  uint64 // packed
}

type bankAcc struct{ warps, wavefronts, ideal uint64 }

// divAcc is the memory divergence of one global instruction: its warp
// accesses and the distinct sectors they touched.
type divAcc struct{ warps, sectors uint64 }

// reuseAcc is a kernel context's reuse histograms per granularity: the
// loads of the measured blocks per bucket, and the loads of all traced
// blocks.
type reuseAcc struct {
	h     [len(reuseGrains)][ReuseBuckets + 1]uint64
	loads [len(reuseGrains)]uint64
}

// memAcc is what one memory worker accumulated since the last item.
type memAcc struct {
	reuse map[uint32]*reuseAcc
	banks map[bankKey]*bankAcc
	div   map[pcKey]*divAcc
	// divs indexes div by packed PC and context << 8 | kind + 1 (a Go
	// map lookup with a struct key a record cost more than the divergence
	// itself); lastCtx and lastReuse cache reuse's entry met last.
	divs      keyTable[*divAcc]
	lastCtx   uint32
	lastReuse *reuseAcc
	// bankIdx indexes banks likewise, by packed PC and context + 1.
	bankIdx keyTable[*bankAcc]
}

// bankOf returns the bank-conflict accumulator of a shared instruction.
func (a *memAcc) bankOf(ctx uint32, pc uint64) *bankAcc {
	b, added := a.bankIdx.get(pc, uint64(ctx)+1)
	if added {
		*b = entry(a.banks, bankKey{ctx, pc})
	}
	return *b
}

// divOf returns the divergence accumulator of an instruction.
func (a *memAcc) divOf(ctx uint32, kind uint8, pc uint64) *divAcc {
	d, added := a.divs.get(pc, uint64(ctx)<<8|uint64(kind)+1)
	if added {
		*d = entry(a.div, pcKey{ctx, kind, pc})
	}
	return *d
}

// reuseOf returns the reuse accumulator of a kernel context.
func (a *memAcc) reuseOf(ctx uint32) *reuseAcc {
	if a.lastReuse == nil || a.lastCtx != ctx {
		a.lastCtx, a.lastReuse = ctx, entry(a.reuse, ctx)
	}
	return a.lastReuse
}

func newMemAcc() *memAcc {
	return &memAcc{reuse: map[uint32]*reuseAcc{}, banks: map[bankKey]*bankAcc{}, div: map[pcKey]*divAcc{}}
}

type memMsg struct {
	acc  *rawstream.Access
	refs *[]memRef // this worker's parts of the frame's records (from memRefs)
	l    *launchInfo
	end  *launchInfo    // launch ended: drop its blocks
	done chan<- *memAcc // sync: hand over the accumulator
}

// memWorker handles the blocks (or granularities of blocks) memSplit
// deals it.
type memWorker struct {
	id, n  int
	in     chan memMsg
	ctas   map[ctaKey]*ctaState
	acc    *memAcc
	window int
	pcs    map[uint64]uint64 // absolute PC -> packed, for PCs inside a known function
	// pcCache caches pcs, direct-mapped by PC (packed 0 marks an empty
	// entry: the first function's first instruction is looked up in pcs).
	pcCache [numPCCache]struct{ pc, packed uint64 }
	// last: the block met last and its trackers (cta)
	lastKey ctaKey
	last    *ctaState
	// pool keeps the trackers of blocks that left for the next blocks: a
	// block's trackers grow to its working set, and growing three new ones
	// per block cost more than the distances themselves.
	pool []*ctaState
	// scratch
	units, addrs []uint64
	grainUnits   [len(reuseGrains)][]uint64
	// busy: nanoseconds spent on records (Analyzer.Busy)
	busy atomic.Int64
}

// memStats runs the memory workers.
type memStats struct {
	per     []*[]memRef // split's lists (the dispatcher's)
	ws      []*memWorker
	all     []*memWorker // ws, kept after stop for the time accounts
	started bool
}

func (s *memStats) start(n, depth int) {
	s.started = true
	for i := 0; i < n; i++ {
		w := &memWorker{id: i, n: n, in: make(chan memMsg, depth), ctas: map[ctaKey]*ctaState{}, acc: newMemAcc(), window: ReuseWindow, pcs: map[uint64]uint64{}}
		s.ws = append(s.ws, w)
		s.all = append(s.all, w)
		go w.run()
	}
}

// memSplit collects, per memory worker, its parts of a frame's records:
// exits of blocks whose reuse is measured, shared accesses (bank
// conflicts, on part 0) and the global non-prefetch accesses of measured
// blocks (the reuse parts and partDiv; the other blocks' partDiv is
// counted by the redundancy workers, see divHere). Block units go to the workers in
// turn, measured ones and the others each counted apart; in a launch with
// fewer measured blocks than workers, each part of a block is a work unit
// of its own (a block's stream order matters only within one
// granularity): block unit b's part p goes to worker (b·numParts + p) mod
// n. Otherwise a block's parts stay together, since each worker that gets
// a record parses it again (the split made dominant_load's memory workers
// twice as busy on the H100).
type memSplit struct {
	n   int
	per []*[]memRef // from memRefs
}

// memRef is a record's offset in its frame and the parts (a bit each)
// the worker handles for it.
type memRef struct {
	off   uint32
	parts uint8
}

func (s *memStats) split() memSplit {
	if len(s.ws) == 0 {
		return memSplit{}
	}
	if s.per == nil {
		s.per = make([]*[]memRef, len(s.ws))
	}
	return memSplit{n: len(s.ws), per: s.per}
}

// list returns memory worker i's list of records.
func (m *memSplit) list(i int) *[]memRef {
	if m.per[i] == nil {
		m.per[i] = memRefs.get()
	}
	return m.per[i]
}

func (m *memSplit) add(r *rawstream.Record, off uint32, blockUnit uint32, split bool) {
	if m.n == 0 {
		return
	}
	tracked := blockUnit&trackedBlock != 0
	parts := 1<<partDiv | reuseMask
	if !tracked {
		parts = 1 << partDiv
	}
	switch {
	case r.Size == 0:
		if r.Flags&rawstream.FlagBlockExit == 0 || !tracked {
			return
		}
		parts = reuseMask
	case r.Space == rawstream.SpaceShared:
		parts = 1
	case r.Space == rawstream.SpaceGlobal && r.Flags&rawstream.FlagPrefetch == 0:
		if !tracked && r.Active != 0 {
			return // its divergence part is counted by a redundancy worker (divHere)
		}
	default:
		return
	}
	unit := uint64(blockUnit &^ trackedBlock)
	if !split {
		q := m.list(int(unit % uint64(m.n)))
		*q = append(*q, memRef{off, uint8(parts)})
		return
	}
	for p := 0; p < numParts; p++ {
		if parts&(1<<p) == 0 {
			continue
		}
		q := m.list(int((unit*uint64(numParts) + uint64(p)) % uint64(m.n)))
		if n := len(*q); n > 0 && (*q)[n-1].off == off {
			(*q)[n-1].parts |= 1 << p
			continue
		}
		*q = append(*q, memRef{off, 1 << p})
	}
}

// access sends each memory worker its records of f and returns how long
// it waited on full queues.
func (s *memStats) access(f *rawstream.Access, l *launchInfo, m memSplit) time.Duration {
	var blocked time.Duration
	for i, w := range s.ws {
		if m.per[i] != nil {
			l.memSent |= sentBit(i)
			msg := memMsg{acc: f, l: l, refs: m.per[i]}
			m.per[i] = nil
			select {
			case w.in <- msg:
			default:
				t0 := time.Now()
				w.in <- msg
				blocked += time.Since(t0)
			}
		}
	}
	return blocked
}

// endLaunch tells the memory workers given records of l that it ended.
func (s *memStats) endLaunch(l *launchInfo) {
	for i, w := range s.ws {
		if sentTo(l.memSent, i) {
			w.in <- memMsg{end: l}
		}
	}
}

func (s *memStats) stop() {
	for _, w := range s.ws {
		close(w.in)
	}
	s.ws = nil
}

// collect waits for the workers to handle everything sent so far and
// returns their accumulators.
func (s *memStats) collect() []*memAcc {
	out := make([]*memAcc, len(s.ws))
	for i, w := range s.ws {
		ch := make(chan *memAcc, 1)
		w.in <- memMsg{done: ch}
		out[i] = <-ch
	}
	return out
}

func (w *memWorker) run() {
	for m := range w.in {
		switch {
		case m.done != nil:
			m.done <- w.acc
			w.acc = newMemAcc()
		case m.end != nil:
			for k, c := range w.ctas {
				if k.launch == m.end.seq {
					w.release(k, c)
				}
			}
		default:
			t0 := time.Now()
			w.frame(m.acc, *m.refs, m.l)
			w.busy.Add(int64(time.Since(t0)))
			memRefs.put(m.refs)
		}
	}
}

// frame handles this worker's parts of an access frame's records (the
// records were validated by the decoder).
func (w *memWorker) frame(f *rawstream.Access, refs []memRef, l *launchInfo) {
	var rec rawstream.Record
	for j, ref := range refs {
		if j+recAhead < len(refs) {
			prefetchRecord(f.Data, refs[j+recAhead].off)
		}
		// Addresses only: this pool never reads values, so compact
		// records stay unexpanded.
		if _, err := rawstream.ParseRecordHeader(f.Data[ref.off:], &rec); err != nil {
			return // cannot happen: the dispatcher parsed it
		}
		r := &rec
		switch {
		case r.Size == 0:
			if r.Flags&rawstream.FlagBlockExit != 0 {
				w.exit(l, r)
			}
		case r.Space == rawstream.SpaceShared:
			w.bank(l, r)
		case r.Space == rawstream.SpaceGlobal && r.Flags&rawstream.FlagPrefetch == 0:
			w.global(l, r, ref.parts)
		}
	}
}

// packed returns the packed PC of an absolute one, as the redundancy
// workers place it.
func (w *memWorker) packed(l *launchInfo, pc uint64) uint64 {
	c := &w.pcCache[(pc*0x9e3779b97f4a7c15)>>(64-8)&(numPCCache-1)]
	if c.pc == pc && c.packed != 0 {
		return c.packed
	}
	if p, ok := w.pcs[pc]; ok {
		c.pc, c.packed = pc, p
		return p
	}
	fn := l.funcs.find(pc)
	if fn == nil { // outside every known function: the launched one's
		return uint64(l.fn.idx)<<32 | uint64(uint32(pc-l.fn.pc))
	}
	p := uint64(fn.idx)<<32 | uint64(uint32(pc-fn.pc))
	w.pcs[pc] = p
	c.pc, c.packed = pc, p
	return p
}

// bank counts one shared warp access's passes: per bank, the distinct
// 4-byte words the active lanes touch.
func (w *memWorker) bank(l *launchInfo, r *rawstream.Record) {
	words := w.units[:0]
	w.addrs = r.AppendAddrs(w.addrs[:0])
	for _, a := range w.addrs {
		for x := a >> 2; x <= (a+uint64(r.Size)-1)>>2; x++ {
			words = append(words, x)
		}
	}
	w.units = words
	degree, distinct := bankDegree(words)
	b := w.acc.bankOf(l.ctx, w.packed(l, r.PC))
	b.warps++
	b.wavefronts += uint64(degree)
	b.ideal += uint64((distinct + 31) / 32)
}

// bankDegree returns the most distinct words of one bank and the number
// of distinct words (words is sorted in place).
func bankDegree(words []uint64) (int, int) {
	// Lanes in ascending order (a tile's rows and columns) need no sort.
	if !slices.IsSorted(words) {
		slices.Sort(words)
	}
	var per [32]int
	degree, distinct := 0, 0
	for i, x := range words {
		if i > 0 && x == words[i-1] {
			continue
		}
		distinct++
		b := x & 31
		per[b]++
		degree = max(degree, per[b])
	}
	return degree, distinct
}

func (w *memWorker) cta(l *launchInfo, block uint32) *ctaState {
	k := ctaKey{l.seq, block}
	if w.last != nil && w.lastKey == k {
		return w.last
	}
	c := w.ctas[k]
	if c == nil {
		if n := len(w.pool); n > 0 {
			c, w.pool = w.pool[n-1], w.pool[:n-1]
		} else {
			c = &ctaState{}
			for i := range c.tr {
				c.tr[i] = newReuseTracker(w.window)
			}
		}
		w.ctas[k] = c
	}
	w.lastKey, w.last = k, c
	return c
}

// release returns a block's trackers to the pool.
func (w *memWorker) release(k ctaKey, c *ctaState) {
	delete(w.ctas, k)
	if w.last == c {
		w.last = nil
	}
	for _, t := range c.tr {
		t.reset()
	}
	c.exited = 0
	w.pool = append(w.pool, c)
}

// exit drops a block's trackers once all its warps left (the launch's end
// drops the rest).
func (w *memWorker) exit(l *launchInfo, r *rawstream.Record) {
	k := ctaKey{l.seq, r.Block}
	c := w.ctas[k]
	if c == nil || l.warps == 0 {
		return
	}
	if r.Warp < 64 {
		c.exited |= 1 << r.Warp
	}
	if bits.OnesCount64(c.exited) >= l.warps {
		w.release(k, c)
	}
}

// global handles the parts of one global warp access: its memory
// divergence (CUDAAdvisor's distinct 32-byte sectors per warp access) and
// its loads' units (partDiv), and its block's reuse trackers at the
// granularities in parts: the distinct units the active lanes touch, in
// ascending order (the lanes of one access are simultaneous).
func (w *memWorker) global(l *launchInfo, r *rawstream.Record, parts uint8) {
	kind, ok := kindOf(r.Flags)
	if !ok {
		return
	}
	if parts&reuseMask == 0 {
		if parts&(1<<partDiv) != 0 {
			divergence(w.acc, l, r, kind, w.packed(l, r.PC), &w.addrs)
		}
		return
	}
	load := kind == kLoad && r.Flags&rawstream.FlagAtomic == 0 // an atomic writes (in L2): it restarts the unit
	// The lanes' addresses, sorted once (coalesced accesses come in
	// order); a coarser granularity's units follow from them in order.
	addrs := sortedAddrs(w.addrs, r)
	w.addrs = addrs
	size := uint64(r.Size)
	div := parts&(1<<partDiv) != 0
	// Each granularity's units, once per record, where the reuse parts
	// track them; the divergence part only counts them (a load's units at
	// each granularity, its sectors).
	var us [len(reuseGrains)][]uint64
	for g, gr := range reuseGrains {
		switch {
		case parts&(1<<g) == 0:
		case gr.shift == 0:
			us[g] = addrs
		default:
			w.grainUnits[g] = appendUnits(w.grainUnits[g][:0], addrs, size, gr.shift)
			us[g] = w.grainUnits[g]
		}
	}
	var h *reuseAcc
	if load {
		h = w.acc.reuseOf(l.ctx)
	}
	if div {
		d := w.acc.divOf(l.ctx, kind, w.packed(l, r.PC))
		d.warps++
		d.sectors += uint64(countUnits(addrs, size, sectorShift))
		if load {
			for g, gr := range reuseGrains {
				n := len(us[g])
				switch {
				case us[g] != nil:
				case gr.shift == 0: // the element: a lane's address
					n = len(addrs)
				default:
					n = countUnits(addrs, size, gr.shift)
				}
				h.loads[g] += uint64(n)
			}
		}
	}
	c := w.cta(l, r.Block)
	for g := range reuseGrains {
		if parts&(1<<g) == 0 {
			continue
		}
		t := c.tr[g]
		for _, u := range us[g] {
			if load {
				h.h[g][t.load(u)]++
			} else {
				t.store(u)
			}
		}
	}
}

// divergence counts the divergence part alone of one global warp access
// of kind at packed PC into ac: its distinct 32-byte sectors and, for a
// load, its units at each reuse granularity (what a block whose reuse is
// not measured contributes to the reuse histograms' scale). addrs is
// scratch. The redundancy workers call it for those blocks' records,
// which they read anyway (docs/collector.md, "Parallelism"); the
// memory workers, for the records they are sent without reuse parts.
func divergence(ac *memAcc, l *launchInfo, r *rawstream.Record, kind uint8, packed uint64, addrs *[]uint64) {
	load := kind == kLoad && r.Flags&rawstream.FlagAtomic == 0 // an atomic writes (in L2): it restarts the unit
	d := ac.divOf(l.ctx, kind, packed)
	d.warps++
	if lo, hi, n, ok := span(r); ok {
		// A coalesced access's counts follow from its span.
		d.sectors += hi>>sectorShift - lo>>sectorShift + 1
		if load {
			h := ac.reuseOf(l.ctx)
			for g, gr := range reuseGrains {
				if gr.shift == 0 {
					h.loads[g] += uint64(n) // the element: a lane's address
				} else {
					h.loads[g] += hi>>gr.shift - lo>>gr.shift + 1
				}
			}
		}
		return
	}
	as := sortedAddrs(*addrs, r)
	*addrs = as
	size := uint64(r.Size)
	d.sectors += uint64(countUnits(as, size, sectorShift))
	if load {
		h := ac.reuseOf(l.ctx)
		for g, gr := range reuseGrains {
			if gr.shift == 0 {
				h.loads[g] += uint64(len(as)) // the element: a lane's address
			} else {
				h.loads[g] += uint64(countUnits(as, size, gr.shift))
			}
		}
	}
}

// span returns, for a compact record whose active lanes are consecutive
// and whose affine addresses leave no gap between lanes (stride 0, or
// positive and at most the access size: a coalesced access), the first
// and last byte its lanes touch and its number of distinct addresses;
// ok is false for any other record, whose addresses are then read.
func span(r *rawstream.Record) (lo, hi uint64, n int, ok bool) {
	wire, ok := r.Wire()
	if !ok || !wire.Affine {
		return 0, 0, 0, false
	}
	l0 := bits.TrailingZeros32(r.Active)
	if m := r.Active >> l0; m&(m+1) != 0 {
		return 0, 0, 0, false // a gap among the active lanes
	}
	na, size := bits.OnesCount32(r.Active), uint64(r.Size)
	switch {
	case wire.Step == 0:
		return wire.Base, wire.Base + size - 1, 1, true
	case wire.Step <= size:
		lo = wire.Base + wire.Step*uint64(l0)
		hi = wire.Base + wire.Step*uint64(l0+na-1) + size - 1
		if hi < lo { // wrapped past the top of the address space
			return 0, 0, 0, false
		}
		return lo, hi, na, true
	}
	return 0, 0, 0, false
}

// sortedAddrs returns the distinct addresses of r's lanes in ascending
// order, in buf's memory. Lanes in order (coalesced accesses) need no
// sort; repeats of the previous lane's address (a warp reading one
// element) are dropped as they come.
func sortedAddrs(buf []uint64, r *rawstream.Record) []uint64 {
	all := r.AppendAddrs(buf[:0])
	if len(all) == 0 {
		return all
	}
	prev := all[0]
	k, sorted := 1, true
	for _, a := range all[1:] {
		if a == prev {
			continue
		}
		if a < prev {
			sorted = false
		}
		all[k] = a
		k++
		prev = a
	}
	addrs := all[:k]
	if !sorted {
		if len(addrs) <= 32 {
			insertionSort(addrs)
		} else {
			slices.Sort(addrs)
		}
		addrs = slices.Compact(addrs)
	}
	return addrs
}

// insertionSort sorts a warp's addresses: for 32 scattered ones (a
// pointer chase's lanes) it takes about half the time of slices.Sort,
// whose partitioning pays off only for longer slices.
func insertionSort(a []uint64) {
	for i := 1; i < len(a); i++ {
		x, j := a[i], i
		for j > 0 && a[j-1] > x {
			a[j] = a[j-1]
			j--
		}
		a[j] = x
	}
}

// appendUnits appends the distinct units of 2^shift bytes that accesses
// of size bytes at the sorted, distinct addrs touch, in ascending order.
func appendUnits(us, addrs []uint64, size uint64, shift uint) []uint64 {
	n0 := len(us)
	for _, a := range addrs {
		lo, hi := a>>shift, (a+size-1)>>shift
		// A unit at or below the last one is already in: the address
		// whose range reached the last unit starts at or below this one.
		if n := len(us); n > n0 && lo <= us[n-1] {
			lo = us[n-1] + 1
		}
		for x := lo; x <= hi; x++ {
			us = append(us, x)
		}
	}
	return us
}

// countUnits is the number of units appendUnits appends.
func countUnits(addrs []uint64, size uint64, shift uint) int {
	n := 0
	next := uint64(0) // the lowest unit not counted yet (when n > 0)
	for _, a := range addrs {
		lo, hi := a>>shift, (a+size-1)>>shift
		if n > 0 && lo < next {
			lo = next
		}
		if lo <= hi {
			n += int(hi - lo + 1)
			next = hi + 1
		}
	}
	return n
}

// scaleHist scales a histogram of the measured blocks' loads to n loads
// in all, each bucket in proportion, rounding by largest remainder (ties
// to the lower bucket) so that the buckets add up to n. Without measured
// loads, the n loads go to the inf bucket: no reuse was observed.
func scaleHist(h [ReuseBuckets + 1]uint64, n uint64) [ReuseBuckets + 1]uint64 {
	s := uint64(0)
	for _, v := range h {
		s += v
	}
	if s == n {
		return h
	}
	var out [ReuseBuckets + 1]uint64
	if s == 0 {
		out[ReuseBuckets] = n
		return out
	}
	var rem [ReuseBuckets + 1]uint64
	left := n
	for k, v := range h {
		hi, lo := bits.Mul64(v, n)
		out[k], rem[k] = bits.Div64(hi, lo, s) // hi < s since v ≤ s
		left -= out[k]
	}
	for ; left > 0; left-- {
		best := 0
		for k := range rem {
			if rem[k] > rem[best] {
				best = k
			}
		}
		out[best]++
		rem[best] = 0
	}
	return out
}

// entry returns m[k], adding a zero value first if there is none.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	v := m[k]
	if v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}

// build adds the workers' bank, divergence and reuse counts to the item,
// with the divergence parts counted elsewhere (more).
func (s *memStats) build(b *builder, more []*memAcc) {
	if !s.started {
		return
	}
	reuse := map[uint32]*reuseAcc{}
	banks := map[bankKey]*bankAcc{}
	div := map[pcKey]*divAcc{}
	for _, ac := range append(s.collect(), more...) {
		for k, v := range ac.div {
			t := entry(div, b.a.canonPCKey(k))
			t.warps += v.warps
			t.sectors += v.sectors
		}
		for ctx, h := range ac.reuse {
			// Scaled per kernel node: a first launch keyed again
			// (orphans.go) is summed with the others first.
			t := entry(reuse, b.a.canonCtx(ctx))
			for g := range h.h {
				for k, n := range h.h[g] {
					t.h[g][k] += n
				}
				t.loads[g] += h.loads[g]
			}
		}
		for k, v := range ac.banks {
			t := entry(banks, bankKey{b.a.canonCtx(k.ctx), b.a.canonPC(k.pc)})
			t.warps += v.warps
			t.wavefronts += v.wavefronts
			t.ideal += v.ideal
		}
	}
	for _, ctx := range sortedKeys(reuse) {
		id := b.kernel(ctx)
		for g, gr := range reuseGrains {
			for k, n := range scaleHist(reuse[ctx].h[g], reuse[ctx].loads[g]) {
				b.p.Add(id, profile.Metric(ReuseMetric(gr.name, k)), n)
			}
		}
	}
	keys := make([]bankKey, 0, len(banks))
	for k := range banks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y bankKey) int {
		if x.ctx != y.ctx {
			return int(x.ctx) - int(y.ctx)
		}
		if x.pc < y.pc {
			return -1
		}
		if x.pc > y.pc {
			return 1
		}
		return 0
	})
	for _, k := range keys {
		v := banks[k]
		id := b.inst(k.ctx, kLoad, k.pc)
		b.p.Add(id, SharedWarpAccesses, v.warps)
		b.p.Add(id, SharedWavefronts, v.wavefronts)
		b.p.Add(id, SharedIdeal, v.ideal)
	}
	divKeys := make([]pcKey, 0, len(div))
	for k := range div {
		divKeys = append(divKeys, k)
	}
	sort.Slice(divKeys, func(i, j int) bool { return lessPC(divKeys[i], divKeys[j]) })
	for _, k := range divKeys {
		id := b.inst(k.ctx, k.kind, k.pc)
		b.p.Add(id, profile.MemWarpAccess, div[k].warps)
		b.p.Add(id, profile.MemSectors, div[k].sectors)
	}
}
