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
			*per[w] = append(*per[w], recRef{idx: uint32(it.Index()), off: uint32(off), lanes: lanes, shard: uint8(s)})
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
	var c *unitCacheEntry
	if l.ucache != nil {
		c = &l.ucache[(k*0x9e3779b97f4a7c15)>>(64-numUnitCacheBits)]
		if c.k == k|unitCached {
			return uint32(c.u >> 32), uint32(c.u)
		}
	}
	if u, ok := l.wunits[k]; ok { // one lookup on the hot path: both units
		c.k, c.u = k|unitCached, u // c is set: wunits is made with it
		return uint32(u >> 32), uint32(u)
	}
	if l.wunits == nil { // the launch's first record: most launches have none
		l.wunits, l.bunits = map[uint64]uint64{}, map[uint32]uint32{}
		l.ucache = new([numUnitCache]unitCacheEntry)
		c = &l.ucache[(k*0x9e3779b97f4a7c15)>>(64-numUnitCacheBits)]
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
	l.wunits[k] = uint64(u)<<32 | uint64(b)
	c.k, c.u = k|unitCached, uint64(u)<<32|uint64(b)
	return u, b
}

// A launch's cache of warp units: numUnitCache entries, each a warp key
// (block << 16 | warp, with unitCached set) and its units as in wunits.
const (
	numUnitCacheBits = 8
	numUnitCache     = 1 << numUnitCacheBits
	unitCached       = 1 << 63 // keys are at most 48 bits: marks a used entry
)

type unitCacheEntry struct{ k, u uint64 }
