package online

import (
	"time"
)

// Spatial redundancy's barriers: the workers bring candidate first
// occurrences of values; at a barrier every worker has analysed every
// frame sent, and the candidates are resolved per value partition, in
// parallel (docs/collector.md, "Parallelism").

// resolveEvery is the default of Options.ResolveEvery, how many access
// records per worker may pass between barriers: enough to keep the
// workers busy between them (every barrier drains the workers' queues
// before the dispatcher sends more: 2^16, with items every 2^20 records,
// took a quarter off loop_reload's replay on the H100 against 2^14 and
// 2^18). candLimit bounds a worker's candidates between barriers: with
// values that are mostly new (every lane a new value, 32 candidates a
// record) 2^14 records made 32 MB tables, where every insert missed the
// cache; 2^15 entries keep them at 2 MB, while streams of recurring
// values keep the long interval and its few barriers.
const resolveEvery = 1 << 16

// firstTableSize is the first size of a worker's candidate table of one
// partition: room for its share of the candidate limit at load 1/2 (a
// power of two, 64 to 2^14 slots; 4096 slots, 128 KiB, for 16 workers).
func firstTableSize(limit int64, parts int) int {
	n := 64
	for n < 1<<14 && int64(n) < 2*limit/int64(parts) {
		n *= 2
	}
	return n
}

// candLimit is the default of Options.CandidateLimit, a variable so that
// tests can make early barriers frequent.
var candLimit int64 = 1 << 15

// candidatesFull says whether some worker holds, or will hold once the
// frames queued for it are analysed, candLimit candidates. The workers
// run up to a queue of frames behind the dispatcher, so what they report
// lags: the queued lanes are counted at the worker's candidates per lane
// so far in this window, or in the last one before its first report (one
// a lane before any: with none, the first window of a stream of new
// values ran until the queues were full, and its tables grew to hold it).
// (On the H100 a pointer chase's candidate tables grew a quarter of its
// collector's CPU; this bound alone did not stop that, docs/overhead.md.)
func (a *Analyzer) candidatesFull() bool {
	for _, w := range a.workers {
		c, done := w.candN.Load(), w.lanesDone.Load()
		if c >= a.o.CandidateLimit {
			return true
		}
		r := w.ratio
		if done >= minRatioLanes {
			r = float64(c) / float64(done)
		}
		if queued := w.sent - done; queued > 0 && float64(c)+r*float64(queued) >= float64(a.o.CandidateLimit) {
			return true
		}
	}
	return false
}

// windowRatio takes a window's candidates and lanes into the worker's
// candidates per lane, once its windows since the last change have
// minRatioLanes lanes.
func (w *worker) windowRatio(cands, lanes int64) {
	if w.ratioC, w.ratioL = w.ratioC+cands, w.ratioL+lanes; w.ratioL >= minRatioLanes {
		w.ratio = float64(w.ratioC) / float64(w.ratioL)
		w.ratioC, w.ratioL = 0, 0
	}
}

// minRatioLanes is how many lanes a worker analyses in a window before
// its own candidates per lane replace the last window's.
const minRatioLanes = 1 << 12

// barrier waits until every worker has analysed every frame sent so far,
// then resolves the spatial candidates: per partition (in parallel), the
// earliest access of each new value is its first occurrence, the others
// are redundant.
func (a *Analyzer) barrier() error {
	t0 := time.Now()
	a.barriers++
	a.sinceResolve = 0
	done := make(chan error, len(a.workers))
	for _, w := range a.workers {
		a.tBlocked += w.send(msg{kind: msgBarrier, done: done})
	}
	var err error
	for range a.workers {
		if e := <-done; e != nil && err == nil {
			err = e
		}
	}
	t1 := time.Now()
	a.tWait += t1.Sub(t0)
	defer func() { a.tResolve += time.Since(t1) }()
	if err != nil {
		return err
	}
	parts := len(a.workers)
	firsts := make([]map[objPCKey]uint64, parts)
	ended := make([]map[uint64]int64, parts)
	if err := parallel(len(a.workers), parts, func(p int) {
		firsts[p], ended[p] = a.resolve(p)
		// Emptied here, in parallel: the tables of all partitions are
		// hundreds of MB to clear for streams of new values.
		for _, w := range a.workers {
			w.cand[p].reset()
		}
	}); err != nil {
		return err
	}
	for _, w := range a.workers {
		w.windowRatio(w.candN.Load(), w.lanesDone.Load())
		w.candN.Store(0)
		w.lanesDone.Store(0)
		w.sent = 0
	}
	for _, f := range firsts {
		for k, n := range f {
			a.first[k] += n
		}
	}
	if err := a.raiseLevels(ended); err != nil {
		return err
	}
	for _, l := range a.ended {
		l.seen = nil // its candidates are resolved; no access comes after KERNEL_END
		delete(a.bySeq, l.seq)
	}
	a.ended = a.ended[:0]
	return nil
}

// resolve finds, in partition p, the first access of every candidate
// value: the earliest among the workers that saw it. Every other access of
// the value is spatially redundant; resolve counts the first occurrences
// per (object, PC), which the builder subtracts from the accesses.
func (a *Analyzer) resolve(p int) (map[objPCKey]uint64, map[uint64]int64) {
	// Counted by the entries' own words (launch, object and kind; PC) in a
	// table of their own: a Go map with objPCKey keys cost more than the
	// rest of the resolution for streams of new values.
	var counts firstCounts
	set := func(e *spEntry) *valSet {
		l := a.bySeq[uint32(e.a>>32)]
		ok := uint32(e.a)
		if l.seen[p] == nil {
			l.seen[p] = map[uint32]*valSet{}
		}
		vs := l.seen[p][ok]
		if vs == nil {
			vs = &valSet{}
			l.seen[p][ok] = vs
		}
		return vs
	}
	// Pass 1: the first worker to bring a value counts its candidate as the
	// first occurrence (flagged in the entry). A value several workers
	// brought is a conflict, settled in pass 2.
	// The candidates come in hash order, from many launches and objects
	// at once: their seen sets are cached by key, and taken in batches
	// whose slots in the seen sets are loaded first, so that the cache
	// misses overlap.
	//
	// A launch that ended before the barrier gets no more accesses and
	// its seen sets are dropped after it: its values are not added to
	// them. With one worker each of its candidates is a first occurrence;
	// with more, a scratch set of (launch and object, value) finds the
	// values several workers brought.
	// A value several workers brought is settled once, whichever of its
	// candidates came up first here: the others would find the same
	// earliest candidate.
	conflicts := a.conflicts[p][:0]
	var sets [64]struct {
		a     uint64
		vs    *valSet
		ended bool
		w     int64 // what a first occurrence counts (sample.go)
	}
	var ws [32]int64
	var batch [32]*spEntry
	var vss [32]*valSet
	var sink uint64
	one := len(a.workers) == 1
	var scratch, conflicted *pairSet
	if !one {
		total := 0
		for _, w := range a.workers {
			total += w.cand[p].n
		}
		scratch, conflicted = &a.scratch[p], &a.conflicted[p]
		scratch.reset(total)
		conflicted.reset(total)
	}
	flush := func(n int) {
		for i, e := range batch[:n] {
			c := &sets[e.a*0x9e3779b97f4a7c15>>58]
			if c.vs == nil && !c.ended || c.a != e.a {
				l := a.bySeq[uint32(e.a>>32)]
				c.a, c.vs, c.ended, c.w = e.a, nil, l.ended, l.weight(uint32(e.a))
				if !c.ended {
					c.vs = set(e)
				}
			}
			vs := c.vs
			vss[i], ws[i] = vs, c.w
			switch {
			case vs != nil && len(vs.e) > 0:
				sink += vs.e[mix64(e.v)&uint64(len(vs.e)-1)]
			case vs == nil && !one:
				sink += scratch.touch(e.a, e.v)
			}
		}
		for i, e := range batch[:n] {
			var first bool
			switch {
			case vss[i] != nil:
				first = vss[i].addNew(e.v)
			case one:
				first = true
			default:
				first = scratch.addNew(e.a, e.v)
			}
			if first {
				e.pc |= firstFlag
				counts.add(e.a, e.pc&^firstFlag, ws[i])
			} else if one || conflicted.addNew(e.a, e.v) {
				conflicts = append(conflicts, e)
			}
		}
	}
	n := 0
	for _, w := range a.workers {
		w.cand[p].each(func(e *spEntry) {
			batch[n] = e
			if n++; n == len(batch) {
				flush(n)
				n = 0
			}
		})
	}
	flush(n)
	a.sinks[p] = sink
	a.settleConflicts(p, conflicts, &counts)
	clear(conflicts) // the entries belong to the candidate tables
	a.conflicts[p] = conflicts[:0]
	return a.firstsByKey(&counts)
}

// settleConflicts is resolve's pass 2: of a value several workers brought,
// the first occurrence is the earliest candidate of all workers, which
// takes the flag (and the count) from the one pass 1 chose.
func (a *Analyzer) settleConflicts(p int, conflicts []*spEntry, counts *firstCounts) {
	for _, c := range conflicts {
		var min, flagged *spEntry
		for _, w := range a.workers {
			if e := w.cand[p].get(c.a, c.v); e != nil {
				if min == nil || e.pos < min.pos {
					min = e
				}
				if e.pc&firstFlag != 0 {
					flagged = e
				}
			}
		}
		if min != flagged {
			w := a.bySeq[uint32(c.a>>32)].weight(uint32(c.a))
			counts.add(flagged.a, flagged.pc&^firstFlag, -w)
			flagged.pc &^= firstFlag
			min.pc |= firstFlag
			counts.add(min.a, min.pc&^firstFlag, w)
		}
	}
}

// firstsByKey turns the counts by launch and object into first
// occurrences per (context, kind, object, PC); and, for the launches that
// ended, the sampled values found new per (launch, object, kind), which
// their seen sets do not take (raiseLevels).
func (a *Analyzer) firstsByKey(counts *firstCounts) (map[objPCKey]uint64, map[uint64]int64) {
	firsts := make(map[objPCKey]uint64, counts.n)
	var ended map[uint64]int64
	for _, e := range counts.e {
		if e.n == 0 {
			continue
		}
		l := a.bySeq[uint32(e.a>>32)]
		ok := uint32(e.a)
		firsts[objPCKey{l.ctx, uint8(ok & 1), ok >> 1, e.pc}] += uint64(e.n)
		if l.ended {
			if ended == nil {
				ended = map[uint64]int64{}
			}
			ended[e.a] += e.n / l.weight(ok)
		}
	}
	return firsts, ended
}

// firstCounts counts first occurrences by (launch << 32 | object << 1 |
// kind, packed PC): an open-addressing table, since the keys are few (the
// instructions and objects of the launches between two barriers) and
// every candidate adds to one.
type firstCounts struct {
	e []firstCount
	n int
}

type firstCount struct {
	a, pc uint64
	n     int64
	used  bool
}

func (c *firstCounts) add(a, pc uint64, d int64) {
	if 2*(c.n+1) > len(c.e) {
		old := c.e
		c.e = make([]firstCount, max(2*len(old), 16))
		c.n = 0
		for _, x := range old {
			if x.used {
				c.add(x.a, x.pc, x.n)
			}
		}
	}
	mask := uint64(len(c.e) - 1)
	for i := mix64(pc^a*0x9e3779b97f4a7c15) & mask; ; i = (i + 1) & mask {
		x := &c.e[i]
		if !x.used {
			*x = firstCount{a: a, pc: pc, n: d, used: true}
			c.n++
			return
		}
		if x.a == a && x.pc == pc {
			x.n += d
			return
		}
	}
}

// firstFlag marks, in a candidate's pc, the candidate counted as its
// value's first occurrence (packed PCs use 63 bits at most).
const firstFlag = 1 << 63
