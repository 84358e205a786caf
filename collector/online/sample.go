package online

import "math/bits"

// Spatial redundancy by distinct sampling (docs/collector.md). Counting
// an object's first occurrences exactly keeps every distinct value it
// carried in the launch: a pointer chase's launch brings hundreds of
// thousands, and looking each up, making it a candidate and resolving it
// was half of its collector's CPU on the H100. Past SpatialKeep distinct
// values of one (launch, object, kind), or 4 x SpatialKeep accesses
// (laneKeep), only values whose hash has its top L bits zero are
// followed: at level L one in 2^L, each first occurrence found counting
// 2^L.
//
// The estimate is unbiased because the samples nest (a value in the
// sample at level L is in it at every lower level) and levels only rise:
// a value's first occurrence, at level L, makes a candidate with
// probability 2^-L and then counts 2^L; if it does not, no later
// occurrence, at level L or higher, makes one, and the seen sets drop
// the values a new level leaves out. Its variance is at most D 2^L for D
// distinct values, and the level rises only while more than SpatialKeep/2
// values would be kept, so the relative error of the first occurrences
// is about sqrt(2/SpatialKeep): 0.6% at the default.

// spatialKeep is the default of Options.SpatialKeep: the seen sets of
// one (launch, object, kind) stay near 2^16 values (1 MiB of slots).
const spatialKeep = 1 << 16

// laneKeep: the level also rises with an object's accesses, so that at
// least laneKeep x SpatialKeep of them (2^18) are looked up at each
// level. Most of the spatial analysis' time is the lookups, one an
// access, whether its value is new or not; and the variance bound D 2^L
// is at most N 2^L for N accesses, so a level that keeps N/2^L at 2^18 or
// more keeps the standard deviation of the object's redundant fraction
// under 2^-9, 0.2 points, whatever its values.
const laneKeep = 4

// countLanes adds n accesses of (object, kind) ok to the worker's row.
func (w *worker) countLanes(l *launchInfo, ok uint32, n int64) {
	row := l.lanes[w.id]
	if int(ok) >= len(row) {
		row = append(row, make([]int64, int(ok)+1-len(row))...)
		l.lanes[w.id] = row
	}
	row[ok] += n
}

// laneLevel is the level at which n accesses keep keep of them looked up.
func laneLevel(n, keep int64) uint8 {
	lv := uint8(0)
	for lv < maxLevel && n>>(lv+1) >= keep {
		lv++
	}
	return lv
}

// maxLevel bounds the levels (one value in 2^24 is still followed).
const maxLevel = 24

// spSampled says whether value v of launch and object key a is in the
// sample at level lv: the top lv bits of a multiplicative hash are zero.
// It runs for every access of a sampled object, so it is one multiply
// rather than spHash's mix; a function apart from spHash, whose low bits
// pick the candidate tables' slots and high bits the partitions, so the
// sample crowds neither.
func spSampled(a, v uint64, lv uint8) bool {
	return ((v^a*0x9e3779b97f4a7c15)*0xd6e8feb86659fd93)>>(64-lv) == 0
}

// level is the sampling level of (object, kind) ok in the launch.
func (l *launchInfo) level(ok uint32) uint8 {
	if int(ok) < len(l.levels) {
		return l.levels[ok]
	}
	return 0
}

// weight is what one first occurrence found at (object, kind) ok counts.
func (l *launchInfo) weight(ok uint32) int64 { return 1 << l.level(ok) }

// startLevels is a new launch's levels in calling context ctx: one below
// those its context's last launch ended with, so that a launch like the
// last samples from its start (and rises to the same level if it is as
// large), where starting from none would follow every value of its first
// window. A launch much smaller than the last of its context pays for
// this in variance (docs/collector.md).
func (a *Analyzer) startLevels(ctx uint32) []uint8 {
	h := a.levelHints[ctx]
	if len(h) == 0 {
		return nil
	}
	ls := make([]uint8, len(h))
	for i, lv := range h {
		if lv > 1 {
			ls[i] = lv - 1
			a.sampled++
			a.maxLevel = max(a.maxLevel, lv-1)
		}
	}
	return ls
}

// raiseLevels runs at a barrier, after the resolution: where a launch's
// seen sets of one (object, kind) hold more than SpatialKeep values (for
// an ended launch, with the values found new at this barrier, which its
// seen sets do not take: endedNew, by partition, keyed launch << 32 |
// object << 1 | kind), its
// level rises until about SpatialKeep/2 would be kept, and the sets drop
// the values out of the new sample (in parallel, by partition). Ended
// launches that saw values leave their levels, raised the same way, as
// their context's hint (kernel sampling's untraced launches see none, and
// passing on theirs wore the hint down by a level a launch).
func (a *Analyzer) raiseLevels(endedNew []map[uint64]int64) error {
	keep := a.o.SpatialKeep
	if keep <= 0 {
		return nil
	}
	type raise struct {
		l  *launchInfo
		ok uint32
		lv uint8
	}
	var rs []raise
	// The ended launches' new values, by launch and then (object, kind).
	news := map[uint32]map[uint32]int64{}
	for _, m := range endedNew {
		for k, n := range m {
			if news[uint32(k>>32)] == nil {
				news[uint32(k>>32)] = map[uint32]int64{}
			}
			news[uint32(k>>32)][uint32(k)] += n
		}
	}
	totals := map[uint32]int64{}
	var accesses []int64
	for _, l := range a.bySeq {
		if l.seen == nil {
			continue
		}
		accesses = accesses[:0]
		for _, row := range l.lanes {
			if len(row) > len(accesses) {
				accesses = append(accesses, make([]int64, len(row)-len(accesses))...)
			}
			for ok, n := range row {
				accesses[ok] += n
			}
		}
		clear(totals)
		for _, m := range l.seen {
			for ok, vs := range m {
				totals[ok] += vs.len()
			}
		}
		for ok, n := range news[l.seq] {
			totals[ok] += n
		}
		if l.ended && len(totals) == 0 {
			continue // untraced, or no values in objects: the hint stands
		}
		var hint []uint8
		if l.ended {
			hint = append([]uint8(nil), l.levels...)
		}
		for ok, n := range accesses {
			if _, has := totals[uint32(ok)]; !has && n > 0 {
				totals[uint32(ok)] = 0 // no values kept (all sampled out), accesses yes
			}
		}
		for ok, n := range totals {
			lv := l.level(ok)
			up := lv
			// A live launch rises past SpatialKeep values; an ended one
			// passes on the level that keeps SpatialKeep/2, so that the
			// next launch, a level below, rises to the same.
			for n > keep/2 && up < maxLevel && (up > lv || n > keep || l.ended) {
				n /= 2
				up++
			}
			if int(ok) < len(accesses) {
				up = max(up, laneLevel(accesses[ok], laneKeep*keep))
			}
			if up <= lv {
				continue
			}
			if l.ended {
				hint = setLevel(hint, ok, up)
				continue
			}
			if lv == 0 {
				a.sampled++
			}
			a.maxLevel = max(a.maxLevel, up)
			l.levels = setLevel(l.levels, ok, up)
			rs = append(rs, raise{l, ok, up})
		}
		if l.ended {
			if a.levelHints == nil {
				a.levelHints = map[uint32][]uint8{}
			}
			a.levelHints[l.ctx] = hint
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return parallel(len(a.workers), len(a.workers), func(p int) {
		for _, r := range rs {
			if vs := r.l.seen[p][r.ok]; vs != nil {
				a := uint64(r.l.seq)<<32 | uint64(r.ok)
				vs.retain(func(v uint64) bool { return spSampled(a, v, r.lv) })
			}
		}
	})
}

// setLevel sets ls[ok] to lv, growing ls.
func setLevel(ls []uint8, ok uint32, lv uint8) []uint8 {
	if int(ok) >= len(ls) {
		ls = append(ls, make([]uint8, int(ok)+1-len(ls))...)
	}
	ls[ok] = lv
	return ls
}

// len is the number of values in s.
func (s *valSet) len() int64 {
	n := int64(s.n)
	if s.zero {
		n++
	}
	return n
}

// retain keeps the values for which keep says true, in a table sized for
// them.
func (s *valSet) retain(keep func(uint64) bool) {
	var kept []uint64
	for _, v := range s.e {
		if v != 0 && keep(v) {
			kept = append(kept, v)
		}
	}
	s.zero = s.zero && keep(0)
	s.e, s.n = nil, 0
	if len(kept) > 0 {
		s.e = make([]uint64, max(16, 1<<bits.Len(uint(2*len(kept)))))
	}
	for _, v := range kept {
		s.addNew(v)
	}
}
