package online

import (
	"math/bits"

	"gpuprof/collector/rawstream"
)

// The dispatch loop's part of an ACCESS frame: its records' work units
// dealt to the workers and memory workers (docs/collector.md,
// "Parallelism").

// dispatch gives each worker its lane groups' parts of a frame's records,
// and each memory worker its blocks' records.
func (a *Analyzer) dispatch(f *rawstream.Access, l *launchInfo) {
	n := len(a.workers)
	if a.per == nil {
		a.per = make([]*[]recRef, n)
	}
	per := a.per
	if len(a.lanesTo) != n {
		a.lanesTo = make([]int64, n)
	}
	lanesTo := a.lanesTo
	// The memory workers' records are split in the same pass, so no worker
	// reads records that are not its own.
	mem := a.x.ms.split()
	l.recs += uint64(f.Count)
	l.widen()
	it := f.RecordHeaders()
	lastKey, unit, bunit := ^uint64(0), uint32(0), uint32(0)
	memOn := mem.n > 0
	for {
		off := it.Offset()
		if !it.Next() {
			break
		}
		r := it.Record()
		// Records of one warp often come in runs.
		if k := uint64(r.Block)<<16 | uint64(r.Warp); k != lastKey {
			lastKey = k
			unit, bunit = a.units(l, r.Block, r.Warp)
		}
		// divHere: the record's divergence part goes with the lane group
		// of its first active lane.
		first := uint32(0)
		if memOn && divHere(r, bunit) {
			first = r.Active & -r.Active
		}
		for g := 0; g < l.groups; g++ {
			lanes := r.Active & groupMask(g, l.groups)
			if lanes == 0 {
				continue
			}
			s := l.shardOf(unit, g)
			w := s % n
			if per[w] == nil {
				per[w] = recRefs.get()
				lanesTo[w] = 0
			}
			*per[w] = append(*per[w], recRef{idx: uint32(it.Index()), off: uint32(off), lanes: lanes, shard: uint8(s), div: lanes&first != 0})
			lanesTo[w] += int64(bits.OnesCount32(lanes))
		}
		mem.add(r, uint32(off), bunit, l.splitGrains)
	}
	for i, w := range a.workers {
		if per[i] != nil {
			l.sent |= sentBit(i)
			w.sent += lanesTo[i]
			a.tBlocked += w.send(msg{kind: msgAccess, acc: f, l: l, fseq: a.fseq, recs: per[i], lanes: lanesTo[i]})
			per[i] = nil
		}
	}
	a.tMemBlocked += a.x.ms.access(f, l, mem)
}

// divHere says whether a record's divergence part (memory divergence and
// the loads' units, partDiv) is counted by the redundancy worker that gets
// its first active lane rather than by a memory worker: a global
// non-prefetch access with active lanes, of a block whose reuse is not
// measured (three blocks in four by default). Those workers parse the
// record anyway; a memory worker would parse it only for this (on
// loop_reload's live stream on the H100, a third of the memory workers'
// CPU went to reading headers).
func divHere(r *rawstream.Record, blockUnit uint32) bool {
	return blockUnit&trackedBlock == 0 && r.Size != 0 && r.Active != 0 &&
		r.Space == rawstream.SpaceGlobal && r.Flags&rawstream.FlagPrefetch == 0
}

// sentBit is worker i's bit in launchInfo.sent or memSent; workers from
// the 64th on have none and are always told.
func sentBit(i int) uint64 {
	if i >= 64 {
		return 0
	}
	return 1 << i
}

// sentTo says whether worker i is to be told of the end of a launch
// with mask sent.
func sentTo(sent uint64, i int) bool { return i >= 64 || sent&(1<<i) != 0 }

// units numbers the launch's warps and blocks in the order they first
// appear (across launches): a warp's lane groups go to consecutive shards
// and a block's reuse granularities to consecutive memory workers, so a
// launch's traced warps and blocks are spread evenly, as hashing their
// indices (spaced by the block-sampling period) would not do.
func (a *Analyzer) units(l *launchInfo, block uint32, warp uint16) (warpUnit, blockUnit uint32) {
	k := uint64(block)<<16 | uint64(warp)
	if u, ok := l.wunits.get(k); ok {
		return uint32(u >> 32), uint32(u)
	}
	if l.bunits == nil { // the launch's first record: most launches have none
		l.bunits = map[uint32]uint32{}
	}
	b, ok := l.bunits[block]
	if !ok {
		// Every ReuseSampling-th block of the launch has its reuse
		// distances measured, from its first (memSplit); those blocks are
		// numbered apart, so each kind is dealt out evenly.
		if uint32(len(l.bunits))%a.reusePeriod == 0 {
			b = a.nextTracked | trackedBlock
			a.nextTracked++
		} else {
			b = a.nextBlock
			a.nextBlock++
		}
		l.bunits[block] = b
	}
	var u uint32
	if l.narrow {
		// Its index in the launch and the launch's span when it came
		// (launchInfo.shardOf): a span widened later leaves it where it is.
		u = uint32(l.span)<<narrowIdxBits | l.nextIdx&(1<<narrowIdxBits-1)
		l.nextIdx++
	} else {
		u = a.nextWarp
		a.nextWarp++
	}
	l.wunits.put(k, uint64(u)<<32|uint64(b), l.tracedWarps)
	return u, b
}

// warpUnits maps a launch's warps (block << 16 | warp) to their units
// (warp unit << 32 | block unit): open addressing with linear probing,
// made at the launch's first record with room for the warps block
// sampling traces. The dispatch loop looks a warp up at every change of
// warp, and the records of hundreds to thousands of warps interleave in
// a frame: a Go map, and then a 256-entry cache in front of it, missed
// on most of them (a quarter of the loop's CPU on loop_reload's live
// stream on the H100).
type warpUnits struct {
	e     []warpUnitEntry
	n     int
	shift uint // 64 - log2(len(e)): a multiplicative hash's top bits
}

type warpUnitEntry struct{ k, u uint64 } // k: the key with warpUsed set

// warpUsed marks a used entry: keys are at most 48 bits.
const warpUsed = 1 << 63

// maxFirstWarpUnits bounds a table's first size (entries); a launch with
// more traced warps grows its table as they come.
const maxFirstWarpUnits = 1 << 16

func (t *warpUnits) home(k uint64) uint64 { return k * 0x9e3779b97f4a7c15 >> t.shift }

func (t *warpUnits) get(k uint64) (uint64, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.e) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		e := &t.e[i]
		if e.k == k|warpUsed {
			return e.u, true
		}
		if e.k == 0 {
			return 0, false
		}
	}
}

// put adds k, absent, with units u; traced sizes the first table.
func (t *warpUnits) put(k, u uint64, traced uint64) {
	if 2*(t.n+1) > len(t.e) {
		n := 64
		if len(t.e) > 0 {
			n = 2 * len(t.e)
		}
		for uint64(n) < 2*traced && n < maxFirstWarpUnits {
			n *= 2
		}
		old := t.e
		t.e, t.n, t.shift = make([]warpUnitEntry, n), 0, uint(64-bits.Len(uint(n-1)))
		for _, e := range old {
			if e.k != 0 {
				t.insert(e.k, e.u)
			}
		}
	}
	t.insert(k|warpUsed, u)
}

func (t *warpUnits) insert(k, u uint64) {
	mask := uint64(len(t.e) - 1)
	i := t.home(k &^ warpUsed)
	for t.e[i].k != 0 {
		i = (i + 1) & mask
	}
	t.e[i] = warpUnitEntry{k, u}
	t.n++
}
