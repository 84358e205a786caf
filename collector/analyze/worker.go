package analyze

import (
	"encoding/binary"
	"math/bits"
	"sort"

	"gpuprof/collector/rawstream"
)

// numShards is the fixed number of state shards. Temporal state is per
// thread, so records are sharded by (block, warp); spatial first-occurrence
// candidates are partitioned by (object, value). The number is fixed, not
// the worker count, so results (sketches included) do not depend on how
// many cores ran the analysis.
const numShards = 64

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

func shardOf(block uint32, warp uint16) int {
	return int(mix64(uint64(block)<<16|uint64(warp)) % numShards)
}

func partOf(obj uint32, kind uint8, v uint64) int {
	return int(mix64(v^uint64(obj)<<1^uint64(kind)<<40) % numShards)
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
	warpAcc  uint64
	sectors  uint64
	outside  uint64 // global units outside every known allocation
	vals     valCounter
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

type objAcc struct {
	ak       AccessKind
	accesses uint64
	vals     valCounter
}

// acc is what one shard accumulated since the last batch.
type acc struct {
	pcs   map[pcKey]*pcAcc
	pairs map[pairKey]uint64
	objPC map[objPCKey]uint64
	objs  map[objKey]*objAcc
}

func newAcc() *acc {
	return &acc{pcs: map[pcKey]*pcAcc{}, pairs: map[pairKey]uint64{}, objPC: map[objPCKey]uint64{}, objs: map[objKey]*objAcc{}}
}

func (a *acc) empty() bool { return len(a.pcs) == 0 }

// Spatial state. seenKey is a value already seen for an (object, kind) in a
// launch; candKey a value not seen before the last barrier, with its first
// position and PC in this shard.
type seenKey struct {
	obj  uint32
	kind uint8
	v    uint64
}

type candKey struct {
	launch uint32
	obj    uint32
	kind   uint8
	v      uint64
}

type spFirst struct{ pos, pc uint64 }

// Temporal state: per warp of a launch, per lane and access kind, the last
// value and PC at each address.
type warpKey struct {
	launch uint32
	block  uint32
	warp   uint16
}

type tEntry struct{ v, pc uint64 }

type warpState struct {
	live  uint32
	lanes [32][2]map[uint64]tEntry
}

type shard struct {
	id    int
	acc   *acc
	warps map[warpKey]*warpState
	cand  [numShards]map[candKey]spFirst
	pool  []map[uint64]tEntry
	wpool []*warpState
}

func newShard(id int) *shard {
	s := &shard{id: id, acc: newAcc(), warps: map[warpKey]*warpState{}}
	for i := range s.cand {
		s.cand[i] = map[candKey]spFirst{}
	}
	return s
}

func (s *shard) laneMap() map[uint64]tEntry {
	if n := len(s.pool); n > 0 {
		m := s.pool[n-1]
		s.pool = s.pool[:n-1]
		return m
	}
	return make(map[uint64]tEntry, 8)
}

func (s *shard) release(ws *warpState, mask uint32) {
	for m := mask & ws.live; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		for k := range ws.lanes[l] {
			if mm := ws.lanes[l][k]; mm != nil {
				clear(mm)
				if len(s.pool) < 4096 {
					s.pool = append(s.pool, mm)
				}
				ws.lanes[l][k] = nil
			}
		}
	}
	ws.live &^= mask
}

// exit drops the temporal state of the lanes leaving (definitions III.1-2
// hold per thread, and a thread that left its block is never seen again).
func (s *shard) exit(launch, block uint32, warp uint16, active uint32) {
	k := warpKey{launch, block, warp}
	ws := s.warps[k]
	if ws == nil {
		return
	}
	s.release(ws, active)
	if ws.live == 0 {
		delete(s.warps, k)
		if len(s.wpool) < 1024 {
			s.wpool = append(s.wpool, ws)
		}
	}
}

func (s *shard) endLaunch(launch uint32) {
	for k, ws := range s.warps {
		if k.launch == launch {
			s.release(ws, ws.live)
			delete(s.warps, k)
		}
	}
}

// pcInfo is what a worker knows about an absolute device PC.
type pcInfo struct {
	packed   uint64
	fn       uint32
	fallback bool // not inside any known function: attributed to the launched one
	ak       AccessKind
	kindOK   bool
}

// worker runs the shards s with s % nworkers == id.
type worker struct {
	id, n int
	a     *Analyzer
	in    chan msg
	own   []*shard
	pcs   map[uint64]*pcInfo
	// scratch
	sect []uint64
}

type msgKind uint8

const (
	msgAccess msgKind = iota
	msgEndLaunch
	msgBarrier
)

type msg struct {
	kind msgKind
	acc  *rawstream.Access
	l    *launchInfo
	fseq uint32
	done chan<- error
}

func (w *worker) run() {
	var failed error
	for m := range w.in {
		switch m.kind {
		case msgAccess:
			if failed == nil {
				failed = w.safely(func() { w.access(m.acc, m.l, m.fseq) })
			}
		case msgEndLaunch:
			if failed == nil {
				failed = w.safely(func() {
					for _, s := range w.own {
						s.endLaunch(m.l.seq)
					}
				})
			}
		case msgBarrier:
			m.done <- failed
		}
	}
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
	if pi, ok := w.pcs[pc]; ok && (!pi.fallback || pi.fn == l.fn.idx) {
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
	pi.fn = fn.idx
	pi.packed = uint64(fn.idx)<<32 | uint64(uint32(off))
	if st := fn.mod.structure; st != nil && !pi.fallback {
		pi.ak, pi.kindOK = st.AccessKind(fn.name, off)
	}
	w.pcs[pc] = pi
	return pi
}

func (w *worker) access(a *rawstream.Access, l *launchInfo, fseq uint32) {
	it := a.Records()
	for it.Next() {
		r := it.Record()
		s := shardOf(r.Block, r.Warp)
		if s%w.n != w.id {
			continue
		}
		w.own[s/w.n].record(w, l, fseq, it.Index(), r)
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

// record analyses one warp record (definitions III.1-III.4 per lane unit).
func (s *shard) record(w *worker, l *launchInfo, fseq uint32, idx int, r *rawstream.Record) {
	if r.Size == 0 {
		if r.Flags&rawstream.FlagBlockExit != 0 {
			s.exit(l.seq, r.Block, r.Warp, r.Active)
		}
		return
	}
	var kind uint8
	switch {
	case r.Flags&rawstream.FlagWrite != 0:
		kind = kStore
	case r.Flags&rawstream.FlagRead != 0:
		kind = kLoad
	default:
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
	if r.Space == rawstream.SpaceGlobal {
		pa.warpAcc++
		pa.sectors += uint64(w.sectors(r))
	}
	wk := warpKey{l.seq, r.Block, r.Warp}
	ws := s.warps[wk]
	if ws == nil {
		if n := len(s.wpool); n > 0 {
			ws = s.wpool[n-1]
			s.wpool = s.wpool[:n-1]
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
	curObj, objN := noObj, uint64(0)
	var oa *objAcc
	flushObj := func() {
		if objN > 0 {
			s.acc.objPC[objPCKey{l.ctx, kind, curObj, pi.packed}] += objN
			oa.accesses += objN
			objN = 0
		}
	}
	var seen *[numShards]map[seenKey]struct{} = &l.seen
	hint := 0
	base := uint64(fseq)<<32 | uint64(idx)<<9
	lanes := r.Lanes
	stride := 8 + int(r.Size)
	for m, e := r.Active, 0; m != 0; m, e = m&(m-1), e+1 {
		lane := bits.TrailingZeros32(m)
		ent := lanes[e*stride : (e+1)*stride]
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
			if obj != noObj {
				ok := objKey{l.ctx, kind, obj}
				oa = s.acc.objs[ok]
				if oa == nil {
					oa = &objAcc{ak: ak}
					s.acc.objs[ok] = oa
				}
			}
		}
		lm := ws.lanes[lane][kind]
		if lm == nil {
			lm = s.laneMap()
			ws.lanes[lane][kind] = lm
			ws.live |= 1 << lane
		}
		for u := 0; u < nu; u++ {
			v := readUnit(val[u*ub:], ub)
			ua := addr + uint64(u*ub)
			// Temporal (III.1-2): the same thread's last access of this kind
			// to this address carried the same value.
			if old, ok := lm[ua]; ok && old.v == v {
				if old.pc != pairOld {
					flushPair()
					pairOld = old.pc
				}
				pairN++
				pa.redT++
			}
			lm[ua] = tEntry{v, pi.packed}
			pa.vals.add(v, ak)
			// Spatial (III.3-4): an earlier access of this kind to the same
			// object in this launch carried the same value. Values seen before
			// the last barrier are in seen; newer ones become candidates, and
			// the earliest candidate of each value is resolved at the next
			// barrier as the one non-redundant access.
			if obj != noObj {
				objN++
				oa.vals.add(v, ak)
				p := partOf(obj, kind, v)
				if _, ok := seen[p][seenKey{obj, kind, v}]; !ok {
					ck := candKey{l.seq, obj, kind, v}
					cm := s.cand[p]
					if _, ok := cm[ck]; !ok {
						cm[ck] = spFirst{base | uint64(lane)<<4 | uint64(u), pi.packed}
					}
				}
			} else if r.Space == rawstream.SpaceGlobal {
				pa.outside++
			}
		}
		pa.accesses += uint64(nu)
	}
	flushPair()
	flushObj()
}

// sectors counts the distinct 32-byte sectors a global warp access touches
// (CUDAAdvisor's memory divergence).
func (w *worker) sectors(r *rawstream.Record) int {
	w.sect = w.sect[:0]
	stride := 8 + int(r.Size)
	for e := 0; e < r.NumLanes(); e++ {
		a := binary.LittleEndian.Uint64(r.Lanes[e*stride:])
		for s := a >> 5; s <= (a+uint64(r.Size)-1)>>5; s++ {
			w.sect = append(w.sect, s)
		}
	}
	ss := w.sect
	sorted := true
	for i := 1; i < len(ss); i++ {
		if ss[i] < ss[i-1] {
			sorted = false
			break
		}
	}
	if !sorted {
		sort.Slice(ss, func(i, j int) bool { return ss[i] < ss[j] })
	}
	n := 0
	for i := range ss {
		if i == 0 || ss[i] != ss[i-1] {
			n++
		}
	}
	return n
}
