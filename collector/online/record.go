package online

import (
	"encoding/binary"
	"math/bits"

	"gpuprof/collector/rawstream"
)

// A record's analysis on its worker: its lane units decoded once, then
// the temporal, value and spatial passes over them (docs/collector.md,
// "Parallelism").

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
//
// It works in passes over the record's lane units, each a short loop:
// the units' addresses, values and objects; their temporal state; their
// values, handed to the value counters; their new spatial values, handed
// to the candidate tables. The state each pass updates is its own, and
// each keeps the units' order, so the results are those of one pass
// doing all four per unit; but the short loops keep their variables in
// registers, and before each table is updated the slots of all the
// units are loaded, so that their cache misses overlap (the tables are
// large, and most of the analysis' time was these misses).
func (s *shard) record(w *worker, l *launchInfo, fseq uint32, idx int, r *rawstream.Record, lanes uint32) {
	if r.Size == 0 {
		if r.Flags&rawstream.FlagBlockExit != 0 {
			s.exit(l, r.Block, r.Warp, lanes)
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
	us := w.units(l, r, lanes, ub)
	ac := s.acc
	sl := ac.slot(l.ctx, kind, pi, ak)
	ws := s.warp(warpKey{l.seq, r.Block, r.Warp}, l)
	ws.live |= lanes
	s.temporal(ws, ac, sl, us, kind, &w.sink)
	// Values, per run of units of one object.
	start := 0
	for i := 1; i <= len(us); i++ {
		if i == len(us) || us[i].obj != us[start].obj {
			oa := ac.opAcc(sl, us[start].obj, ak, s.hash)
			oa.accesses += uint64(i - start)
			w.count(oa, us[start:i], ak)
			if o := us[start].obj; o != noObj {
				w.countLanes(l, o<<1|uint32(kind), int64(i-start)) // for the spatial sampling level
			}
			start = i
		}
	}
	sl.pa.accesses += uint64(len(us))
	w.spatial(l, us, kind, fseq, idx, pi.packed, r.Space == rawstream.SpaceGlobal, sl.pa)
}

// divergence counts, into the shard's accumulator, the divergence part of
// a record whose first active lane this worker was dealt (divHere).
func (s *shard) divergence(w *worker, l *launchInfo, r *rawstream.Record) {
	kind, ok := kindOf(r.Flags)
	if !ok {
		return
	}
	if s.acc.mem == nil {
		s.acc.mem = newMemAcc()
	}
	divergence(s.acc.mem, l, r, kind, w.pcInfo(l, r.PC).packed, &w.addrs)
}

// laneUnit is one unit of a lane's access: its address, value, data
// object, lane and unit index, and its temporal slot's hash.
type laneUnit struct {
	addr, v uint64
	h       uint64
	obj     uint32
	lane, u uint8
}

// units decodes the units of a record's lanes in lanes (ub bytes each)
// with their data objects, into the worker's scratch. (Its loops call
// nothing in their common paths, so that their variables stay in
// registers.)
func (w *worker) units(l *launchInfo, r *rawstream.Record, lanes uint32, ub int) []laneUnit {
	stride := 8 + int(r.Size)
	nu := int(r.Size) / ub
	nl := bits.OnesCount32(lanes)
	// The group's lanes are contiguous, so are their entries: the first is
	// after those of the active lanes below the group.
	e0 := bits.OnesCount32(r.Active & (lanes&-lanes - 1))
	n := nl * nu
	us := w.us
	if cap(us) < n {
		us = make([]laneUnit, n, max(n, 64))
	}
	us = us[:n]
	w.us = us
	obj := noObj
	switch r.Space {
	case rawstream.SpaceShared:
		obj = l.shared
	case rawstream.SpaceLocal:
		obj = l.local
	}
	if wire, ok := r.Wire(); ok && nu == 1 && (ub == 4 || ub == 8) {
		wireUnits(us, wire, lanes, e0, ub, obj)
	} else {
		r.Expand()
		plainUnits(us, r.Lanes[e0*stride:(e0+nl)*stride], lanes, stride, nu, ub, obj)
	}
	if r.Space == rawstream.SpaceGlobal {
		// The units' data objects: runs of units in one object are the
		// rule, each found where the previous one was.
		var cur objEntry
		hint := 0
		for i := 0; i < len(us); {
			for ; i < len(us) && us[i].addr-cur.start < cur.end-cur.start; i++ {
				us[i].obj = cur.idx
			}
			if i == len(us) {
				break
			}
			obj, hint = l.objs.find(us[i].addr, hint)
			us[i].obj = obj
			if obj != noObj {
				cur = l.objs.e[hint]
			}
			i++
		}
	}
	return us
}

// wireUnits fills us with the units of a compact record's lanes in lanes
// (one unit of ub = 4 or 8 bytes a lane; e0 is the first one's entry),
// read from the wire form in place.
func wireUnits(us []laneUnit, w rawstream.Wire, lanes uint32, e0, ub int, obj uint32) {
	le := binary.LittleEndian
	var v uint64
	if w.Uniform {
		v = readUnit(w.Vals, ub)
	}
	m := lanes
	for k := range us {
		lane := bits.TrailingZeros32(m)
		m &= m - 1
		e := e0 + k
		u := &us[k]
		if w.Affine {
			u.addr = w.Base + w.Step*uint64(lane)
		} else {
			u.addr = le.Uint64(w.Addrs[8*e:])
		}
		switch {
		case w.Uniform:
			u.v = v
		case ub == 4:
			u.v = uint64(le.Uint32(w.Vals[4*e:]))
		default:
			u.v = le.Uint64(w.Vals[8*e:])
		}
		u.obj, u.lane, u.u = obj, uint8(lane), 0
	}
}

// plainUnits fills us with the units of the plain lane entries ents of
// the lanes in lanes (nu units of ub bytes a lane).
func plainUnits(us []laneUnit, ents []byte, lanes uint32, stride, nu, ub int, obj uint32) {
	switch {
	case nu == 1 && ub == 4:
		m := lanes
		for k, off := 0, 0; k < len(us) && off+12 <= len(ents); k, off = k+1, off+stride {
			e := ents[off : off+12 : off+12]
			u := &us[k]
			u.addr, u.v, u.obj, u.lane, u.u = binary.LittleEndian.Uint64(e), uint64(binary.LittleEndian.Uint32(e[8:])), obj, uint8(bits.TrailingZeros32(m)), 0
			m &= m - 1
		}
	case nu == 1 && ub == 8:
		m := lanes
		for k, off := 0, 0; k < len(us) && off+16 <= len(ents); k, off = k+1, off+stride {
			e := ents[off : off+16 : off+16]
			u := &us[k]
			u.addr, u.v, u.obj, u.lane, u.u = binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint64(e[8:]), obj, uint8(bits.TrailingZeros32(m)), 0
			m &= m - 1
		}
	default:
		k := 0
		for m := lanes; m != 0; m &= m - 1 {
			addr := binary.LittleEndian.Uint64(ents)
			lane := uint8(bits.TrailingZeros32(m))
			for j := 0; j < nu; j++ {
				us[k] = laneUnit{addr: addr + uint64(j*ub), v: readUnit(ents[8+j*ub:], ub), obj: obj, lane: lane, u: uint8(j)}
				k++
			}
			ents = ents[stride:]
		}
	}
}

// temporal updates the warp's temporal state with the units (III.1-2: a
// unit is redundant when the same thread's last access of this kind to
// its address carried the same value), counting the redundant ones and
// their pairs with the PC of that last access. The units' home slots are
// loaded first; the loop over the units already in the table whose pair
// goes on calls nothing, the others (new entries, a pair to flush) take
// the slow path.
func (s *shard) temporal(ws *warpState, ac *acc, sl *pcSlot, us []laneUnit, kind uint8, sink *uint64) {
	tab := ws.hashUnits(us, kind, sink)
	var pairOld, pairN, redT uint64
	pc := sl.pc
	for i := 0; i < len(us); i++ {
		n, red := temporalRun(tab, us[i:], kind, pc, pairOld)
		i += n
		pairN += red
		redT += red
		if i == len(us) {
			break
		}
		u := &us[i]
		t := ws.slotAt(u.addr, tagOf(int(u.lane), kind), u.h, len(tab))
		if t.used && t.v == u.v {
			if t.pc != pairOld {
				if pairN > 0 {
					ac.addPair(sl, pairOld, pairN)
					pairN = 0
				}
				pairOld = t.pc
			}
			pairN++
			redT++
		}
		t.v, t.pc, t.used = u.v, pc, true
		if len(ws.t) != len(tab) { // grown: the home slots moved
			tab = ws.hashUnits(us[i+1:], kind, sink)
		}
	}
	if pairN > 0 {
		ac.addPair(sl, pairOld, pairN)
	}
	sl.pa.redT += redT
}

// temporalRun updates the entries of the units from us[0] on that are in
// the table and whose redundant accesses go on the pair of pairOld, up to
// the first that is not (a new entry, or a pair to flush). It returns how
// many units it took and how many of them were redundant. It calls
// nothing, so that its loop keeps its variables in registers.
func temporalRun(tab []tslot, us []laneUnit, kind uint8, pc, pairOld uint64) (n int, red uint64) {
	if len(tab) == 0 {
		return 0, 0
	}
	mask := uint64(len(tab) - 1)
	for n = 0; n < len(us); n++ {
		u := &us[n]
		tag := tagOf(int(u.lane), kind)
		j := u.h & mask
		t := &tab[j]
		for t.used && (t.addr != u.addr || t.tag != tag) {
			j = (j + 1) & mask
			t = &tab[j]
		}
		if !t.used {
			break
		}
		if t.v == u.v {
			if t.pc != pairOld {
				break
			}
			red++
		}
		t.v, t.pc = u.v, pc
	}
	return n, red
}

// hashUnits sets the units' home slots in the table and loads them,
// adding them to *sink; it returns the table.
func (ws *warpState) hashUnits(us []laneUnit, kind uint8, sink *uint64) []tslot {
	tab := ws.t
	if len(tab) == 0 {
		return nil // every unit takes the slow path, which makes the table
	}
	sh := tslotShift(len(tab))
	var x uint64
	for i := range us {
		u := &us[i]
		u.h = tslotHashShift(u.addr, tagOf(int(u.lane), kind), sh)
		x += tab[u.h&uint64(len(tab)-1)].addr
	}
	*sink += x
	return tab
}

// spatial collects the units' values of data objects that were not
// looked up since the last barrier and makes them candidates where they
// were not seen before it (III.3-4: an access is redundant when an
// earlier access of this kind to the same object in the launch carried
// the same value; the earliest candidate of each value is resolved at the
// next barrier as the one non-redundant access). Global units in no
// object are counted outside.
func (w *worker) spatial(l *launchInfo, us []laneUnit, kind uint8, fseq uint32, idx int, pc uint64, global bool, pa *pcAcc) {
	sp := w.sp
	if cap(sp) < len(us) {
		sp = make([]spNew, 0, max(len(us), 64))
	}
	sp = sp[:len(us)]
	k := 0
	base := uint64(fseq)<<32 | uint64(idx)<<9
	seq := uint64(l.seq) << 32
	// The last lookup (none while lastObj is noObj): lanes of a warp often
	// carry one value.
	lastObj, lastV := noObj, uint64(0)
	outside := uint64(0)
	// The sampling level of the object of the last units (a record's
	// lanes mostly access one).
	runObj, lv := noObj, uint8(0)
	for i := range us {
		u := &us[i]
		if u.obj == noObj {
			if global {
				outside++
			}
			continue
		}
		if u.obj != runObj {
			runObj, lv = u.obj, l.level(u.obj<<1|uint32(kind))
		}
		if u.obj == lastObj && u.v == lastV {
			continue // this record already looked v up (and made it a candidate if new)
		}
		lastObj, lastV = u.obj, u.v
		ok := u.obj<<1 | uint32(kind)
		a := seq | uint64(ok)
		if lv > 0 && !spSampled(a, u.v, lv) {
			continue // outside the sample (sample.go)
		}
		// Values looked up since the last barrier need nothing more
		// until the next: they are candidates here, or were seen.
		f := &w.recent[((u.v^a*0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9)>>(64-numRecentBits)]
		if f.v == u.v && f.a == a {
			continue
		}
		f.a, f.v = a, u.v
		n := &sp[k]
		n.h, n.a, n.v, n.pos = spHash(a, u.v), a, u.v, base|uint64(u.lane)<<4|uint64(u.u)
		k++
	}
	sp = sp[:k]
	pa.outside += outside
	if len(sp) > 0 {
		w.candidates(l, sp, uint64(len(w.cand)), pc)
	}
	w.sp = sp
}

// spNew is a value a record brought that was not looked up since the
// last barrier: its hash (spHash), launch and object key, and position.
type spNew struct {
	h, a, v, pos uint64
	p            int
	vs           *valSet
}

// count adds the values of a record's units of one object to its
// counter, in order, after loading the counter's slots for them.
func (w *worker) count(oa *opAcc, us []laneUnit, ak AccessKind) {
	c := &oa.vals
	// The table's slots are loaded first where it outgrows the L1 cache;
	// a smaller one costs the hashes and nothing else.
	if n := len(c.ents); n > preloadKeys && !c.direct && len(us) > 2 {
		mask := uint64(n - 1)
		var x uint64
		last := us[0].v + 1
		for i := range us {
			if v := us[i].v; v != last {
				x += c.ents[mix64(v)&mask].n
				last = v
			}
		}
		w.sink += x
	}
	for i := range us {
		c.add(us[i].v, ak)
	}
}

// preloadKeys is the size of a value table above which count loads the
// slots of a record's values before counting them (1024 values and counts:
// 16 KiB).
const preloadKeys = 1 << 10

// candidates makes a record's new spatial values candidates where they
// were not seen before the last barrier, in order; the seen sets' and
// then the candidate tables' slots are loaded first.
func (w *worker) candidates(l *launchInfo, sp []spNew, parts, pc uint64) {
	var x uint64
	for i := range sp {
		n := &sp[i]
		hi, _ := bits.Mul64(n.h, parts)
		n.p = int(hi)
		n.vs = w.seenSet(l, n.p, uint32(n.a))
		if vs := n.vs; vs != nil && len(vs.e) > 0 {
			x += vs.e[mix64(n.v)&uint64(len(vs.e)-1)]
		}
	}
	k := 0
	for _, n := range sp {
		if n.vs != nil && n.vs.has(n.v) {
			continue
		}
		if t := &w.cand[n.p]; len(t.e) > 0 {
			x += t.e[n.h&uint64(len(t.e)-1)].pos
		}
		sp[k] = n
		k++
	}
	w.sink += x
	for _, n := range sp[:k] {
		w.cand[n.p].putHash(n.h, n.a, n.v, n.pos, pc)
	}
}
