package online

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"gpuprof/collector/rawstream"
)

// numShards is the fixed number of state shards. Temporal state is per
// thread, so a thread's records always go to one shard; spatial
// first-occurrence candidates are partitioned by (object, value). The
// number is fixed, not the worker count, so results (sketches included)
// do not depend on how many cores ran the analysis.
const numShards = 32

// A launch's warps are split into lane groups of consecutive lanes, each a
// work unit of its own: nothing in a record's analysis needs the order of
// another thread's accesses, and block sampling can leave a launch with
// fewer traced warps than there are cores (stall_memory on the H100: 20
// warps a launch for 16 cores, each warp ~1000 records). Splitting costs
// a few map lookups per group and record, so a launch with enough traced
// warps is not split.
const maxLaneGroups = 4

// laneGroupsOf is the number of lane groups of a launch with tracedWarps
// warps traced: enough for 2·numShards work units, at most maxLaneGroups.
// It depends on the stream alone, not on the worker count, so the results
// do not either.
func laneGroupsOf(tracedWarps uint64) int { return laneGroupsFor(tracedWarps, numShards) }

// laneGroupsFor is laneGroupsOf for a launch whose units go to span
// shards (a narrow launch): groups beyond two units a shard would only
// split its records on the same shards.
func laneGroupsFor(tracedWarps uint64, span int) int {
	g := 1
	for g < maxLaneGroups && tracedWarps*uint64(g) < 2*uint64(span) {
		g *= 2
	}
	return g
}

// groupMask is the lanes of group g of groups.
func groupMask(g, groups int) uint32 {
	n := 32 / groups
	return uint32(1<<n-1) << (g * n)
}

// shardOf is the shard of lane group g of the warp that was the unit-th to
// appear in the stream (warp units are numbered in stream order, so that
// the groups of a launch's traced warps are spread evenly over the
// shards, whatever the blocks block sampling picked).
func shardOf(unit uint32, g, groups int) int {
	return int((uint64(unit)*uint64(groups) + uint64(g)) % numShards)
}

// Narrow launches. A launch spread over every shard has each of its
// values brought by every worker, as spatial candidates of each (resolved
// as conflicts at the next barrier, which come sooner for them); for a
// launch of a thousand records that cost more than the records (the
// 2,500 launches of a time-stepping code, every one traced). A launch
// expected to bring fewer than numShards × spanRecords records (its
// traced warps times the records per traced warp of its calling
// context's last traced launch: a call site whose grids vary keeps its
// launches' sizes apart) goes to as few consecutive shards as give each
// about spanRecords of them, and the next narrow launch to the shards
// after: launches in a row are analysed side by side instead. A launch
// that brings more than twice what its span was for (a frontier that
// grew, data-dependent loops) widens it for the warps it has not yet
// shown, up to every shard; its warps seen already stay where they are,
// as a thread's records must go to one shard. It depends on the stream
// alone, so the results do not depend on the worker count.
const spanRecords = 1 << 10

// A narrow launch's warp unit is its index in the launch (the low
// narrowIdxBits bits, wrapping past 2^26 warps, which only spreads them)
// and the span when it first came (the bits above).
const narrowIdxBits = 26

// widen widens a narrow launch's span once its records outgrow it.
func (l *launchInfo) widen() {
	if l.narrow && l.span < numShards && l.recs > 2*uint64(l.span)*spanRecords {
		l.span = min(numShards, max(2*l.span, int((l.recs+spanRecords-1)/spanRecords)))
	}
}

// spanFor returns the shards a launch in context ctx with tracedWarps
// warps traced gets: their number and the first.
func (a *Analyzer) spanFor(ctx uint32, tracedWarps uint64) (span, base int) {
	h, ok := a.spanHints[ctx]
	recs := h * float64(tracedWarps)
	if !ok || tracedWarps == 0 || recs >= numShards*spanRecords {
		// An untraced launch brings no records: it takes no turn of the
		// narrow launches' rotation.
		return numShards, 0
	}
	span = max(1, int(math.Ceil(recs/spanRecords)))
	base = a.nextShard
	a.nextShard = (a.nextShard + span) % numShards
	return span, base
}

// shardOf is the shard of lane group g of a warp unit of launch l: the
// units' shardOf over every shard, or for a narrow launch in turn over
// the span the unit carries, from the launch's first shard.
func (l *launchInfo) shardOf(unit uint32, g int) int {
	if !l.narrow {
		return shardOf(unit, g, l.groups)
	}
	span, idx := uint64(unit>>narrowIdxBits), uint64(unit&(1<<narrowIdxBits-1))
	return (l.shardBase + int((idx*uint64(l.groups)+uint64(g))%span)) % numShards
}

const (
	kLoad  uint8 = 0
	kStore uint8 = 1
)

const noObj = ^uint32(0)

func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}

// Accumulator keys. pc is packed as function index << 32 | offset from
// the function's start.
type pcKey struct {
	ctx  uint32
	kind uint8
	pc   uint64
}

type pcAcc struct {
	ak       AccessKind
	accesses uint64 // lane units
	redT     uint64
	outside  uint64 // global units outside every known allocation
}

type pairKey struct {
	ctx     uint32
	kind    uint8
	old, nw uint64
}

type objPCKey struct {
	ctx  uint32
	kind uint8
	obj  uint32
	pc   uint64
}

type objKey struct {
	ctx  uint32
	kind uint8
	obj  uint32
}

// opAcc holds the accesses of one instruction to one data object (obj
// noObj: to no object) and their values. The instruction's and the object's
// value sketches are both merged from these at build time, so each lane
// unit feeds one counter.
type opAcc struct {
	ak       AccessKind
	accesses uint64
	vals     valCounter
}

// acc is what one shard accumulated since the last batch.
type acc struct {
	budget int // exact value entries left to the counters (see valCap)
	// tables: value tables to reuse, the last item's among them (recycle)
	tables tablePool
	pcs    map[pcKey]*pcAcc
	pairs  map[pairKey]*uint64
	objPC  map[objPCKey]*opAcc
	// slots indexes the accumulators by instruction: Go map lookups with
	// struct keys, three or four a record, were a sixth of the workers'
	// time on the H100 captures.
	slots keyTable[pcSlot]
	// mem: the divergence parts counted here (divHere), merged with the
	// memory workers' accumulators (nil: none yet)
	mem *memAcc
}

// pcSlot is an instruction's accumulators in one context and access
// kind: its pcAcc, the opAcc of the object it accessed last, and the
// count of the temporal pair it formed last.
type pcSlot struct {
	pc   uint64 // packed
	ck   uint64 // ctx << 8 | kind + 1
	pa   *pcAcc
	obj  uint32 // oa's object
	oa   *opAcc // nil: none yet
	old  uint64 // pair's old PC
	pair *uint64
}

func newAcc() *acc {
	return &acc{budget: shardValBudget, pcs: map[pcKey]*pcAcc{}, pairs: map[pairKey]*uint64{}, objPC: map[objPCKey]*opAcc{}}
}

// slot returns the accumulators of the instruction pi in context ctx,
// accessed as kind; ak is the access kind a new pcAcc gets.
func (a *acc) slot(ctx uint32, kind uint8, pi *pcInfo, ak AccessKind) *pcSlot {
	ck := uint64(ctx)<<8 | uint64(kind) + 1
	sl, added := a.slots.get(pi.packed, ck)
	if added {
		sl.pc, sl.ck = pi.packed, ck
		pk := pcKey{ctx, kind, pi.packed}
		pa := a.pcs[pk]
		if pa == nil {
			pa = &pcAcc{ak: ak}
			a.pcs[pk] = pa
		}
		sl.pa = pa
	}
	return sl
}

// key is the slot's context and access kind.
func (sl *pcSlot) key() (ctx uint32, kind uint8) {
	return uint32(sl.ck >> 8), uint8(sl.ck - 1)
}

// opAcc returns the accumulator of the slot's instruction's accesses to
// object obj; ak is the access kind a new one gets, hash its counter's
// hasher (Options.HashValues).
func (a *acc) opAcc(sl *pcSlot, obj uint32, ak AccessKind, hash *ValueHasher) *opAcc {
	if sl.oa != nil && sl.obj == obj {
		return sl.oa
	}
	ctx, kind := sl.key()
	k := objPCKey{ctx, kind, obj, sl.pc}
	oa := a.objPC[k]
	if oa == nil {
		oa = &opAcc{ak: ak}
		oa.vals.budget = &a.budget
		oa.vals.tables = &a.tables
		oa.vals.hash = hash
		a.objPC[k] = oa
	}
	sl.obj, sl.oa = obj, oa
	return oa
}

// addPair counts n temporally redundant accesses of the slot's
// instruction whose previous access was at packed PC old.
func (a *acc) addPair(sl *pcSlot, old, n uint64) {
	if sl.pair == nil || sl.old != old {
		ctx, kind := sl.key()
		k := pairKey{ctx, kind, old, sl.pc}
		p := a.pairs[k]
		if p == nil {
			p = new(uint64)
			a.pairs[k] = p
		}
		sl.old, sl.pair = old, p
	}
	*sl.pair += n
}

func (a *acc) empty() bool { return len(a.pcs) == 0 }

// Spatial state: per launch and partition, the values of each (object,
// kind) seen before the last barrier, with the position and PC of their
// first access (launchInfo.seen), and per worker and partition the
// candidates: values not seen before the last barrier, with the position
// and PC of their first access in that worker (worker.cand). Keys:
// objKind = object << 1 | kind.

type spFirst struct{ pos, pc uint64 }

// Temporal state: per warp of a launch, an open-addressing table from
// (lane, access kind, address) to the last value and PC.
type warpKey struct {
	launch uint32
	block  uint32
	warp   uint16
}

type tslot struct {
	addr, v, pc uint64
	tag         uint8 // lane << 1 | kind
	used        bool
}

type warpState struct {
	t    []tslot
	n    int
	peak int    // the most entries it held since it was made or pooled
	live uint32 // lanes with entries
}

func tagOf(lane int, kind uint8) uint8 { return uint8(lane)<<1 | kind }

// tslotHash is the home slot of (addr, tag) in a temporal table of n
// slots (a power of two): the high bits of a multiplicative hash, one
// multiplication where mix64 takes two (the table's layout does not
// matter to the results).
func tslotHash(addr uint64, tag uint8, n int) uint64 {
	return tslotHashShift(addr, tag, tslotShift(n))
}

// tslotShift is the shift of tslotHashShift for a table of n slots.
func tslotShift(n int) uint { return 64 - uint(bits.Len(uint(n-1))) }

func tslotHashShift(addr uint64, tag uint8, shift uint) uint64 {
	return ((addr ^ uint64(tag)<<57) * 0x9e3779b97f4a7c15) >> shift
}

// slot returns the entry of (addr, tag), inserting an unused one (used
// false, fields to be filled) if it is absent.
func (ws *warpState) slot(addr uint64, tag uint8) *tslot {
	return ws.slotAt(addr, tag, 0, 0)
}

// slotAt is slot, with the home slot h of (addr, tag) in a table of n
// slots given (n 0: none).
func (ws *warpState) slotAt(addr uint64, tag uint8, h uint64, n int) *tslot {
	if 2*(ws.n+1) > len(ws.t) {
		ws.grow()
	}
	if n != len(ws.t) {
		h = tslotHash(addr, tag, len(ws.t))
	}
	mask := uint64(len(ws.t) - 1)
	for i := h; ; i = (i + 1) & mask {
		e := &ws.t[i]
		if !e.used {
			e.addr, e.tag = addr, tag
			ws.n++
			ws.peak = max(ws.peak, ws.n)
			return e
		}
		if e.addr == addr && e.tag == tag {
			return e
		}
	}
}

func (ws *warpState) grow() {
	old := ws.t
	n := 2 * len(old)
	if n < 64 {
		n = 64
	}
	ws.t = make([]tslot, n)
	prefault(ws.t)
	ws.n = 0
	ws.reinsert(old, 0)
}

// reinsert puts the used entries of old back, except those of lanes in drop.
func (ws *warpState) reinsert(old []tslot, drop uint32) {
	mask := uint64(len(ws.t) - 1)
	for _, e := range old {
		if !e.used || drop&(1<<(e.tag>>1)) != 0 {
			continue
		}
		for i := tslotHash(e.addr, e.tag, len(ws.t)); ; i = (i + 1) & mask {
			if !ws.t[i].used {
				ws.t[i] = e
				ws.n++
				break
			}
		}
	}
}

// drop removes the entries of the lanes in mask.
func (ws *warpState) drop(mask uint32) {
	mask &= ws.live
	if mask == 0 {
		return
	}
	ws.live &^= mask
	if ws.live == 0 {
		clear(ws.t)
		ws.n = 0
		return
	}
	old := append([]tslot(nil), ws.t...)
	clear(ws.t)
	ws.n = 0
	ws.reinsert(old, mask)
}

type shard struct {
	id    int
	hash  *ValueHasher // Options.HashValues
	acc   *acc
	warps map[warpKey]*warpState
	// wcache caches warps' entries of warps (records of a few warps
	// interleave).
	wcache [numWarpSlots]warpSlot
	wpool  []*warpState
	// pooled: the slots of the tables in wpool (at most poolSlots)
	pooled int
	// tslots is the size of the temporal table the shard's last warp
	// left, at most maxStartSlots: a warp of a context that has no hint
	// yet (launchInfo.tslots) starts with a table that size rather than
	// growing to it, rehashing at every doubling (a fifth of the
	// collector's CPU for many_launches' live stream on the H100).
	tslots int
}

// numWarpSlots is the size of a shard's direct-mapped cache of warps (a
// power of two).
const numWarpSlots = 64

type warpSlot struct {
	k  warpKey
	ws *warpState // nil: empty
}

func (k warpKey) slot() int {
	return int(((uint64(k.block)<<16 | uint64(k.warp)) ^ uint64(k.launch)<<40) * 0x9e3779b97f4a7c15 >> (64 - 6) & (numWarpSlots - 1))
}

// warp returns the temporal state of a warp of launch l, new if it has
// none. A new warp's table starts at the size its context's last freed
// warp left, in any shard: a pointer chase's warps each follow thousands
// of addresses, and growing their tables (rehashing every entry at each
// doubling, into fresh memory) was an eighth of its collector's CPU on
// the H100.
func (s *shard) warp(k warpKey, l *launchInfo) *warpState {
	sl := &s.wcache[k.slot()]
	if sl.ws != nil && sl.k == k {
		return sl.ws
	}
	ws := s.warps[k]
	if ws == nil {
		want := s.tslots
		if l.tslots != nil && l.tslots.Load() > 0 {
			want = int(l.tslots.Load())
		}
		if n := len(s.wpool); n > 0 {
			ws = s.wpool[n-1]
			s.wpool = s.wpool[:n-1]
			s.pooled -= len(ws.t)
			if len(ws.t) < want {
				ws.t = make([]tslot, want) // too small for this context's warps
				prefault(ws.t)
			}
		} else {
			ws = &warpState{}
			if want > 0 {
				ws.t = make([]tslot, want)
				prefault(ws.t)
			}
		}
		s.warps[k] = ws
	}
	sl.k, sl.ws = k, ws
	return ws
}

// poolSlots bounds the temporal table slots a shard keeps for reuse (4 MiB
// of 32-byte slots; 128 MiB for all shards at most).
const poolSlots = 1 << 17

func newShard(id int, hash *ValueHasher) *shard {
	return &shard{id: id, hash: hash, acc: newAcc(), warps: map[warpKey]*warpState{}}
}

// exit drops the temporal state of the lanes leaving (definitions III.1-2
// hold per thread, and a thread that left its block is never seen again).
func (s *shard) exit(l *launchInfo, block uint32, warp uint16, active uint32) {
	k := warpKey{l.seq, block, warp}
	ws := s.warps[k]
	if ws == nil {
		return
	}
	ws.drop(active)
	if ws.live == 0 {
		s.free(k, ws, l)
	}
}

// maxStartSlots bounds the first table of a warp whose context has no
// hint (32 KiB): a pointer chase's warps grow tables far larger than
// another kernel's warps need. maxContextSlots bounds a context's hint
// (2 MiB).
const (
	maxStartSlots   = 1 << 10
	maxContextSlots = 1 << 16
)

func (s *shard) free(k warpKey, ws *warpState, l *launchInfo) {
	// The size its entries needed (at most half full), not the table's:
	// a table started at a context's size would otherwise hand it on
	// unchanged to every later warp, however few entries they hold.
	need := 64
	for need < 2*ws.peak {
		need *= 2
	}
	ws.peak = 0
	s.tslots = min(need, maxStartSlots)
	if l.tslots != nil {
		l.tslots.Store(int32(min(need, maxContextSlots)))
	}
	delete(s.warps, k)
	if sl := &s.wcache[k.slot()]; sl.ws == ws {
		sl.ws = nil
	}
	if ws.n != 0 {
		clear(ws.t)
		ws.n = 0
	}
	ws.live = 0
	// Warps with many addresses grow tables of their own: kept for the next
	// launch's warps within a bound, since growing them again (rehashing
	// every entry at each doubling) took a seventh of the analysis of a
	// pointer chase on the H100.
	if len(s.wpool) < 1024 && s.pooled+len(ws.t) <= poolSlots {
		s.wpool = append(s.wpool, ws)
		s.pooled += len(ws.t)
	}
}

func (s *shard) endLaunch(l *launchInfo) {
	for k, ws := range s.warps {
		if k.launch == l.seq {
			s.free(k, ws, l)
		}
	}
}

// pcInfo is what a worker knows about an absolute device PC.
type pcInfo struct {
	packed   uint64
	fn       uint32
	fallback bool // not inside any known function: attributed to the launched one
	// orphan: inside a kernel reported before its module, read without its
	// module's structure; later launches look again (orphans.go).
	orphan bool
	ak     AccessKind
	kindOK bool
}

// worker runs the shards s with s % nworkers == id.
type worker struct {
	id, n int
	a     *Analyzer
	in    chan msg
	own   []*shard
	pcs   map[uint64]*pcInfo
	// pcCache caches pcs (a direct-mapped cache by PC).
	pcCache [numPCCache]struct {
		pc uint64
		pi *pcInfo
	}
	// cand: per spatial partition, the values not seen before the last
	// barrier, with the position and PC of their first access here.
	cand []spTable
	// seenCache: per partition, the seen set of (seenL, seenOK), valid
	// where seenGen matches gen.
	seenCache []*valSet
	seenGen   []uint32
	gen       uint32
	seenL     *launchInfo
	seenOK    uint32
	// busy: nanoseconds spent analysing (Analyzer.Busy)
	busy atomic.Int64
	// addrs: scratch for the divergence parts (shard.divergence)
	addrs []uint64
	// ends: launches ended that the worker has not been told of (the
	// dispatcher's; see endLaunch)
	ends []*launchInfo
	// candN: candidates held since the last barrier, published after each
	// frame for the dispatcher (candLimit); lanesDone: the lanes of the
	// records analysed since the last barrier, published with it, so that
	// the dispatcher can tell what the frames still queued will bring
	// (Analyzer.candidatesFull).
	candN     atomic.Int64
	lanesDone atomic.Int64
	// sent and ratio are the dispatcher's: lanes sent since the last
	// barrier, and candidates per lane at the last barrier (1 before the
	// first: until a worker has reported, every lane it was sent may be a
	// candidate, so a stream of new values gets no oversized first window).
	sent  int64
	ratio float64
	// ratioC and ratioL: candidates and lanes of the windows since the
	// ratio last changed, too few lanes each to set it (a run of early
	// barriers whose windows the worker hardly started kept a stale ratio)
	ratioC, ratioL int64
	// recent: (launch << 32 | object << 1 | kind, value) pairs looked up
	// since the last barrier (a direct-mapped cache by their hash): they
	// are candidates here or were seen, so an access that brings one again
	// needs no lookup in the seen sets or the candidates.
	recent [numRecent]struct{ a, v uint64 }
	// scratch of record: a record's lane units and new spatial values
	us []laneUnit
	sp []spNew
	// sink keeps the loads that bring table slots into the cache.
	sink uint64
}

// numPCCache is the size of a worker's cache of PCs (a power of two).
const numPCCache = 256

// numRecent is the size of a worker's cache of recent spatial lookups (a
// power of two).
const (
	numRecentBits = 9
	numRecent     = 1 << numRecentBits
)

// bufPool recycles the lists of a frame's records that the dispatcher
// makes for each worker: allocated afresh, they were a fifth of the
// dispatch loop's time and most of the analysis' garbage.
type bufPool[T any] struct{ p sync.Pool }

// get returns an empty list.
func (p *bufPool[T]) get() *[]T {
	if b, _ := p.p.Get().(*[]T); b != nil {
		*b = (*b)[:0]
		return b
	}
	b := make([]T, 0, 256)
	return &b
}

// put gives a list back once its records are analysed.
func (p *bufPool[T]) put(b *[]T) { p.p.Put(b) }

var (
	recRefs bufPool[recRef]
	memRefs bufPool[memRef]
)

type msgKind uint8

const (
	msgAccess msgKind = iota
	msgEndLaunch
	msgBarrier
)

// recRef is one lane group's part of a record: the record's index in its
// frame and byte offset (found by the dispatcher, so that a worker touches
// only its own records' memory), its shard and its active lanes there.
type recRef struct {
	idx, off uint32
	lanes    uint32
	shard    uint8
	div      bool // count the record's divergence part (divHere)
}

type msg struct {
	kind  msgKind
	ends  []*launchInfo // launches ended before this message (see endLaunch)
	acc   *rawstream.Access
	recs  *[]recRef // this worker's parts of the frame's records (from recRefs)
	lanes int64     // their active lanes
	l     *launchInfo
	fseq  uint32
	done  chan<- error
}

func (w *worker) run() {
	var failed error
	for m := range w.in {
		if len(m.ends) > 0 && failed == nil {
			failed = w.safely(func() { w.endLaunches(m.ends) })
		}
		switch m.kind {
		case msgAccess:
			if failed == nil {
				t0 := time.Now()
				failed = w.safely(func() { w.access(m.acc, m.l, m.fseq, *m.recs) })
				w.busy.Add(int64(time.Since(t0)))
				recRefs.put(m.recs)
				n := 0
				for p := range w.cand {
					n += w.cand[p].n
				}
				w.lanesDone.Add(m.lanes)
				w.candN.Store(int64(n))
			}
		case msgEndLaunch:
			if failed == nil {
				failed = w.safely(func() { w.endLaunches([]*launchInfo{m.l}) })
			}
		case msgBarrier:
			w.seenL = nil // the seen sets change at the barrier
			clear(w.recent[:])
			m.done <- failed
		}
	}
}

func (w *worker) endLaunches(ls []*launchInfo) {
	for _, l := range ls {
		for _, s := range w.own {
			s.endLaunch(l)
		}
	}
}

// send queues m for the worker, with the launch ends it holds back, and
// returns how long the queue was full (the stream reader waiting on the
// analysis, counted for the overhead figures).
func (w *worker) send(m msg) time.Duration {
	m.ends, w.ends = w.ends, nil
	select {
	case w.in <- m:
		return 0
	default:
		t0 := time.Now()
		w.in <- m
		return time.Since(t0)
	}
}

// endLaunch tells the worker that launch l ended, so that it drops its
// threads' state. A worker whose queue is full is told with its next
// message instead: waiting on it here would hold up the stream for the
// busiest worker, while its state is only memory held a little longer.
func (w *worker) endLaunch(l *launchInfo) {
	if len(w.ends) == 0 {
		select {
		case w.in <- msg{kind: msgEndLaunch, l: l}:
			return
		default:
		}
	}
	w.ends = append(w.ends, l)
}

// safely turns a panic in the analysis into an error, so a bug here never
// takes the collector (and the application's stream) down with it.
func (w *worker) safely(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
	}()
	f()
	return nil
}

func (w *worker) pcInfo(l *launchInfo, pc uint64) *pcInfo {
	c := &w.pcCache[(pc*0x9e3779b97f4a7c15)>>(64-8)&(numPCCache-1)]
	if pi := c.pi; pi != nil && c.pc == pc && (!pi.fallback || pi.fn == l.fn.idx) && !pi.orphan {
		return pi
	}
	pi := w.pcInfoOf(l, pc)
	if w.pcs[pc] == pi { // kept; one read before its function's structure came is not
		c.pc, c.pi = pc, pi
	}
	return pi
}

func (w *worker) pcInfoOf(l *launchInfo, pc uint64) *pcInfo {
	if pi, ok := w.pcs[pc]; ok && (!pi.fallback || pi.fn == l.fn.idx) && !pi.orphan {
		return pi
	}
	pi := &pcInfo{}
	fn := l.funcs.find(pc)
	var off uint64
	if fn == nil {
		fn, pi.fallback = l.fn, true
		off = pc - fn.pc // wraps when pc < fn.pc; a placeholder offset
	} else {
		off = pc - fn.pc
	}
	pi.fn, pi.orphan = fn.idx, fn.orphan
	pi.packed = uint64(fn.idx)<<32 | uint64(uint32(off))
	if p := fn.fs.pend.Load(); p != nil && !pi.fallback {
		st, _, ready := p.Ready()
		if !ready {
			// Read at its width until the structure comes: not kept.
			return pi
		}
		if st != nil {
			pi.ak, pi.kindOK = st.AccessKind(fn.name, off)
		}
	}
	w.pcs[pc] = pi
	return pi
}

// seenSet returns the values of (object, kind) ok seen in launch l before
// the last barrier, in partition p (nil: none).
func (w *worker) seenSet(l *launchInfo, p int, ok uint32) *valSet {
	if l != w.seenL || ok != w.seenOK || w.seenCache == nil {
		if w.seenCache == nil {
			w.seenCache = make([]*valSet, len(w.cand))
			w.seenGen = make([]uint32, len(w.cand))
		}
		w.seenL, w.seenOK = l, ok
		w.gen++
	}
	if w.seenGen[p] != w.gen {
		w.seenCache[p] = l.seen[p][ok]
		w.seenGen[p] = w.gen
	}
	return w.seenCache[p]
}

// access analyses this worker's parts of a frame's records.
func (w *worker) access(a *rawstream.Access, l *launchInfo, fseq uint32, recs []recRef) {
	var r rawstream.Record
	parsed := ^uint32(0)
	for j, ref := range recs {
		if j+recAhead < len(recs) {
			prefetchRecord(a.Data, recs[j+recAhead].off)
		}
		if ref.off != parsed { // a record's groups that share this worker come one after the other
			// Compact records stay as the wire has them: units reads
			// their 4- and 8-byte lanes in place (expanding them was a
			// fifth of a live collector's CPU on the H100).
			if _, err := rawstream.ParseRecordHeader(a.Data[ref.off:], &r); err != nil {
				panic(err) // validated by the decoder: this is a bug
			}
			parsed = ref.off
		}
		s := w.a.shards[ref.shard]
		if ref.div {
			s.divergence(w, l, &r)
		}
		s.record(w, l, fseq, int(ref.idx), &r, ref.lanes)
	}
}
