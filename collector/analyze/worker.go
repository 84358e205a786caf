package analyze

import (
	"encoding/binary"
	"math/bits"
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
func laneGroupsOf(tracedWarps uint64) int {
	g := 1
	for g < maxLaneGroups && tracedWarps*uint64(g) < 2*numShards {
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

// partOf is the spatial partition of a value; there is one partition per
// worker (resolution is exact whatever the partitioning).
func partOf(obj uint32, kind uint8, v uint64, parts int) int {
	return int(mix64(v^uint64(obj)<<1^uint64(kind)<<40) % uint64(parts))
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
	pcs    map[pcKey]*pcAcc
	pairs  map[pairKey]uint64
	objPC  map[objPCKey]*opAcc
}

func newAcc() *acc {
	return &acc{budget: shardValBudget, pcs: map[pcKey]*pcAcc{}, pairs: map[pairKey]uint64{}, objPC: map[objPCKey]*opAcc{}}
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
	live uint32 // lanes with entries
}

func tagOf(lane int, kind uint8) uint8 { return uint8(lane)<<1 | kind }

// slot returns the entry of (addr, tag), inserting an unused one (used
// false, fields to be filled) if it is absent.
func (ws *warpState) slot(addr uint64, tag uint8) *tslot {
	if 2*(ws.n+1) > len(ws.t) {
		ws.grow()
	}
	mask := uint64(len(ws.t) - 1)
	for i := mix64(addr^uint64(tag)<<57) & mask; ; i = (i + 1) & mask {
		e := &ws.t[i]
		if !e.used {
			e.addr, e.tag = addr, tag
			ws.n++
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
		for i := mix64(e.addr^uint64(e.tag)<<57) & mask; ; i = (i + 1) & mask {
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
	wpool []*warpState
	// pooled: the slots of the tables in wpool (at most poolSlots)
	pooled int
}

// poolSlots bounds the temporal table slots a shard keeps for reuse (4 MiB
// of 32-byte slots; 128 MiB for all shards at most).
const poolSlots = 1 << 17

func newShard(id int, hash *ValueHasher) *shard {
	return &shard{id: id, hash: hash, acc: newAcc(), warps: map[warpKey]*warpState{}}
}

// exit drops the temporal state of the lanes leaving (definitions III.1-2
// hold per thread, and a thread that left its block is never seen again).
func (s *shard) exit(launch, block uint32, warp uint16, active uint32) {
	k := warpKey{launch, block, warp}
	ws := s.warps[k]
	if ws == nil {
		return
	}
	ws.drop(active)
	if ws.live == 0 {
		s.free(k, ws)
	}
}

func (s *shard) free(k warpKey, ws *warpState) {
	delete(s.warps, k)
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

func (s *shard) endLaunch(launch uint32) {
	for k, ws := range s.warps {
		if k.launch == launch {
			s.free(k, ws)
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
	// ends: launches ended that the worker has not been told of (the
	// dispatcher's; see endLaunch)
	ends []*launchInfo
	// candN: candidates held since the last barrier, published after each
	// frame for the dispatcher (candLimit).
	candN atomic.Int64
}

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
}

type msg struct {
	kind msgKind
	ends []*launchInfo // launches ended before this message (see endLaunch)
	acc  *rawstream.Access
	recs []recRef // this worker's parts of the frame's records
	l    *launchInfo
	fseq uint32
	done chan<- error
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
				failed = w.safely(func() { w.access(m.acc, m.l, m.fseq, m.recs) })
				w.busy.Add(int64(time.Since(t0)))
				n := 0
				for p := range w.cand {
					n += w.cand[p].n
				}
				w.candN.Store(int64(n))
			}
		case msgEndLaunch:
			if failed == nil {
				failed = w.safely(func() { w.endLaunches([]*launchInfo{m.l}) })
			}
		case msgBarrier:
			w.seenL = nil // the seen sets change at the barrier
			m.done <- failed
		}
	}
}

func (w *worker) endLaunches(ls []*launchInfo) {
	for _, l := range ls {
		for _, s := range w.own {
			s.endLaunch(l.seq)
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
	for _, ref := range recs {
		if ref.off != parsed { // a record's groups that share this worker come one after the other
			if _, err := rawstream.ParseRecord(a.Data[ref.off:], &r); err != nil {
				panic(err) // validated by the decoder: this is a bug
			}
			parsed = ref.off
		}
		w.a.shards[ref.shard].record(w, l, fseq, int(ref.idx), &r, ref.lanes)
	}
}

func readUnit(b []byte, n int) uint64 {
	switch n {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	default:
		return binary.LittleEndian.Uint64(b)
	}
}

// kindOf classifies a record as a load or a store. An atomic carries the
// value it read (the old value: the injection library reads memory before
// the instruction runs), so it counts as a load.
func kindOf(f rawstream.Flags) (uint8, bool) {
	switch {
	case f&rawstream.FlagAtomic != 0:
		return kLoad, true
	case f&rawstream.FlagWrite != 0:
		return kStore, true
	case f&rawstream.FlagRead != 0:
		return kLoad, true
	}
	return 0, false
}

// record analyses the lanes of one warp record that belong to this shard
// (definitions III.1-III.4 per lane unit; lanes is a contiguous run of
// the record's active lanes).
func (s *shard) record(w *worker, l *launchInfo, fseq uint32, idx int, r *rawstream.Record, lanes uint32) {
	if r.Size == 0 {
		if r.Flags&rawstream.FlagBlockExit != 0 {
			s.exit(l.seq, r.Block, r.Warp, lanes)
		}
		return
	}
	kind, ok := kindOf(r.Flags)
	if !ok {
		return // a prefetch moves no value
	}
	pi := w.pcInfo(l, r.PC)
	ak := pi.ak
	ub := int(ak.UnitBits / 8)
	if !pi.kindOK || ub == 0 || int(r.Size)%ub != 0 {
		ak = fallbackKind(r.Size)
		ub = int(ak.UnitBits / 8)
	}
	nu := int(r.Size) / ub
	pk := pcKey{l.ctx, kind, pi.packed}
	pa := s.acc.pcs[pk]
	if pa == nil {
		pa = &pcAcc{ak: ak}
		s.acc.pcs[pk] = pa
	}
	wk := warpKey{l.seq, r.Block, r.Warp}
	ws := s.warps[wk]
	if ws == nil {
		if n := len(s.wpool); n > 0 {
			ws = s.wpool[n-1]
			s.wpool = s.wpool[:n-1]
			s.pooled -= len(ws.t)
		} else {
			ws = &warpState{}
		}
		s.warps[wk] = ws
	}
	// Per-record runs: redundant pairs with the same old PC, and accesses
	// to the same object, are added to the tables once per run.
	var pairOld, pairN uint64
	flushPair := func() {
		if pairN > 0 {
			s.acc.pairs[pairKey{l.ctx, kind, pairOld, pi.packed}] += pairN
			pairN = 0
		}
	}
	curObj, objN := noObj-1, uint64(0) // no lane yet
	var oa *opAcc
	flushObj := func() {
		if objN > 0 {
			oa.accesses += objN
			objN = 0
		}
	}
	// The last spatial lookup: lanes of a warp often carry one value.
	lastObj, lastV, lastHave := noObj, uint64(0), false
	parts := len(w.cand)
	hint := 0
	base := uint64(fseq)<<32 | uint64(idx)<<9
	stride := 8 + int(r.Size)
	// The group's lanes are contiguous, so are their entries: the first is
	// after those of the active lanes below the group.
	first := bits.OnesCount32(r.Active & (lanes&-lanes - 1))
	for m, e := lanes, first; m != 0; m, e = m&(m-1), e+1 {
		lane := bits.TrailingZeros32(m)
		ent := r.Lanes[e*stride : (e+1)*stride]
		addr := binary.LittleEndian.Uint64(ent)
		val := ent[8:]
		// The lane's data object.
		obj := noObj
		switch r.Space {
		case rawstream.SpaceGlobal:
			obj, hint = l.objs.find(addr, hint)
		case rawstream.SpaceShared:
			obj = l.shared
		case rawstream.SpaceLocal:
			obj = l.local
		}
		if obj != curObj {
			flushObj()
			curObj = obj
			k := objPCKey{l.ctx, kind, obj, pi.packed}
			oa = s.acc.objPC[k]
			if oa == nil {
				oa = &opAcc{ak: ak}
				oa.vals.budget = &s.acc.budget
				oa.vals.hash = s.hash
				s.acc.objPC[k] = oa
			}
		}
		tag := tagOf(lane, kind)
		ws.live |= 1 << lane
		for u := 0; u < nu; u++ {
			v := readUnit(val[u*ub:], ub)
			// Temporal (III.1-2): the same thread's last access of this kind
			// to this address carried the same value.
			t := ws.slot(addr+uint64(u*ub), tag)
			if t.used && t.v == v {
				if t.pc != pairOld {
					flushPair()
					pairOld = t.pc
				}
				pairN++
				pa.redT++
			}
			t.v, t.pc, t.used = v, pi.packed, true
			oa.vals.add(v, ak)
			objN++
			// Spatial (III.3-4): an earlier access of this kind to the same
			// object in this launch carried the same value. Values seen before
			// the last barrier are in seen; newer ones become candidates, and
			// the earliest candidate of each value is resolved at the next
			// barrier as the one non-redundant access.
			if obj == noObj {
				if r.Space == rawstream.SpaceGlobal {
					pa.outside++
				}
				continue
			}
			if lastHave && obj == lastObj && v == lastV {
				continue // this record already looked v up (and made it a candidate if new)
			}
			lastObj, lastV, lastHave = obj, v, true
			ok := obj<<1 | uint32(kind)
			p := partOf(obj, kind, v, parts)
			if vs := w.seenSet(l, p, ok); vs != nil && vs.has(v) {
				continue
			}
			w.cand[p].put(uint64(l.seq)<<32|uint64(ok), v, base|uint64(lane)<<4|uint64(u), pi.packed)
		}
		pa.accesses += uint64(nu)
	}
	flushPair()
	flushObj()
}
