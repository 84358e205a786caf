package online

import "math/bits"

// spTable is an open-addressing hash table (linear probing, load <= 1/2)
// from (a, v) to the position and PC of a first access. It replaces Go maps
// on the hot path of the spatial analysis, where every lane unit of a new
// value costs a lookup and an insert: hashing two words with mix64 and one
// probe is several times cheaper than a map with a struct key.
type spTable struct {
	e    []spEntry
	n    int
	peak int // entries held lately (reset)
	// first is the size of the first allocation: a worker's tables start
	// at their share of the candidate limit, since growing from a few
	// slots (rehashing every entry at each doubling, into fresh memory)
	// cost a pointer chase on the H100 an eighth of its analysis CPU.
	first int
}

type spEntry struct {
	a, v    uint64 // a: (launch << 32 | object << 1 | kind) or (object << 1 | kind)
	pos, pc uint64 // pos 0 marks an empty slot
}

func spHash(a, v uint64) uint64 { return mix64(v ^ a*0x9e3779b97f4a7c15) }

// get returns the entry of (a, v) or nil.
func (t *spTable) get(a, v uint64) *spEntry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.e) - 1)
	for i := spHash(a, v) & mask; ; i = (i + 1) & mask {
		e := &t.e[i]
		if e.pos == 0 {
			return nil
		}
		if e.a == a && e.v == v {
			return e
		}
	}
}

// put returns the entry of (a, v), inserting it with pos and pc if absent;
// added says whether it was inserted.
func (t *spTable) put(a, v, pos, pc uint64) (e *spEntry, added bool) {
	return t.putHash(spHash(a, v), a, v, pos, pc)
}

// putHash is put with spHash(a, v) given.
func (t *spTable) putHash(h, a, v, pos, pc uint64) (e *spEntry, added bool) {
	if 2*(t.n+1) > len(t.e) {
		t.grow()
	}
	mask := uint64(len(t.e) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := &t.e[i]
		if e.pos == 0 {
			*e = spEntry{a, v, pos, pc}
			t.n++
			return e, true
		}
		if e.a == a && e.v == v {
			return e, false
		}
	}
}

func (t *spTable) grow() {
	old := t.e
	n := max(2*len(old), 64, t.first)
	t.e = make([]spEntry, n)
	prefault(t.e)
	t.n = 0
	mask := uint64(n - 1)
	for _, e := range old {
		if e.pos == 0 {
			continue
		}
		i := spHash(e.a, e.v) & mask
		for t.e[i].pos != 0 {
			i = (i + 1) & mask
		}
		t.e[i] = e
		t.n++
	}
}

// reset empties the table. Its size follows its use: a table much larger
// than what it held lately is replaced by a smaller one, since both
// clearing and iterating cost its capacity, not its entries. "Lately" is
// a peak that decays by a quarter at each reset, so that a table whose
// load varies from one barrier to the next is not shrunk and grown again.
func (t *spTable) reset() {
	t.peak = max(t.n, t.peak-t.peak/4)
	if t.n == 0 && len(t.e) <= 64 {
		return
	}
	if want := max(64, t.first, 4*t.peak); len(t.e) > 4*want {
		n := 64
		for n < want {
			n *= 2
		}
		t.e = make([]spEntry, n)
		prefault(t.e)
	} else if t.n > 0 {
		clear(t.e)
	}
	t.n = 0
}

// each calls f on every entry.
func (t *spTable) each(f func(e *spEntry)) {
	left := t.n
	for i := 0; left > 0 && i < len(t.e); i++ {
		if t.e[i].pos != 0 {
			f(&t.e[i])
			left--
		}
	}
}

// valSet is an open-addressing set of values (8 bytes a slot: the seen
// values of one object and access kind in one launch can be millions, and
// this is the table that must stay small).
type valSet struct {
	e    []uint64 // 0 marks an empty slot; value 0 is kept in zero
	n    int
	zero bool
}

func (s *valSet) has(v uint64) bool {
	if v == 0 {
		return s.zero
	}
	if s.n == 0 {
		return false
	}
	mask := uint64(len(s.e) - 1)
	for i := mix64(v) & mask; ; i = (i + 1) & mask {
		switch s.e[i] {
		case v:
			return true
		case 0:
			return false
		}
	}
}

// addNew adds v and reports whether it was absent.
func (s *valSet) addNew(v uint64) bool {
	if v == 0 {
		had := s.zero
		s.zero = true
		return !had
	}
	if 2*(s.n+1) > len(s.e) {
		old := s.e
		s.e = make([]uint64, max(2*len(old), 16))
		prefault(s.e)
		s.n = 0
		for _, x := range old {
			if x != 0 {
				s.addNew(x)
			}
		}
	}
	mask := uint64(len(s.e) - 1)
	for i := mix64(v) & mask; ; i = (i + 1) & mask {
		switch s.e[i] {
		case v:
			return false
		case 0:
			s.e[i] = v
			s.n++
			return true
		}
	}
}

func (s *valSet) add(v uint64) { s.addNew(v) }

// keyTable is an open-addressing table (linear probing, load 1/2 at
// most) from a pair of words (k1, k2), k2 never 0, to a *V it makes on
// first use: the accumulators of an instruction (packed PC, context and
// access kind), where a Go map with a struct key cost a hash of the whole
// struct a record.
type keyTable[V any] struct {
	e []keyEnt[V]
	n int
}

type keyEnt[V any] struct {
	k1, k2 uint64 // k2 0: an empty slot
	v      *V
}

// get returns the value of (k1, k2), made if there was none; added says
// whether it was.
func (t *keyTable[V]) get(k1, k2 uint64) (v *V, added bool) {
	if 2*(t.n+1) > len(t.e) {
		old := t.e
		t.e = make([]keyEnt[V], max(2*len(old), 64))
		mask := uint64(len(t.e) - 1)
		for _, o := range old {
			if o.k2 != 0 {
				i := keyHash(o.k1, o.k2, mask)
				for t.e[i].k2 != 0 {
					i = (i + 1) & mask
				}
				t.e[i] = o
			}
		}
	}
	mask := uint64(len(t.e) - 1)
	for i := keyHash(k1, k2, mask); ; i = (i + 1) & mask {
		e := &t.e[i]
		if e.k2 == k2 && e.k1 == k1 {
			return e.v, false
		}
		if e.k2 == 0 {
			e.k1, e.k2, e.v = k1, k2, new(V)
			t.n++
			return e.v, true
		}
	}
}

// keyHash is the home slot of (k1, k2) in a table of mask+1 slots: the
// high bits of a multiplicative hash.
func keyHash(k1, k2, mask uint64) uint64 {
	h := (k1 ^ k2*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
	return h >> (64 - uint(bits.Len64(mask)))
}

// pairSet is an open-addressing set of (a, v) pairs, a never 0 (16 bytes
// a slot), emptied and reused: the resolution's values of launches that
// ended, which need no seen set of their own.
type pairSet struct {
	e []struct{ a, v uint64 }
	n int
}

// reset empties the set with room for n pairs at load 1/2 at most. The
// table is the first slots of the memory it had, where it had enough:
// the sizes the barriers ask for vary, and allocating at each change was
// most of what a short launch's resolution allocated. Memory allocated
// anew has room for twice the size asked: a stream of new values asks for
// more at every barrier, and each allocation is fresh memory that the
// kernel maps page by page at its first touch (on the H100, a third of a
// pointer chase's collector CPU was the kernel's).
func (s *pairSet) reset(n int) {
	size := 64
	for size < 2*n {
		size *= 2
	}
	if s.n > 0 {
		clear(s.e)
	}
	if cap(s.e) < size {
		s.e = make([]struct{ a, v uint64 }, size, 2*size)
		prefault(s.e)
	} else {
		s.e = s.e[:size]
	}
	s.n = 0
}

func (s *pairSet) home(a, v uint64) uint64 { return spHash(a, v) & uint64(len(s.e)-1) }

// touch loads the home slot of (a, v).
func (s *pairSet) touch(a, v uint64) uint64 { return s.e[s.home(a, v)].v }

// addNew adds (a, v) and reports whether it was absent. The set holds at
// most the n pairs it was reset for.
func (s *pairSet) addNew(a, v uint64) bool {
	mask := uint64(len(s.e) - 1)
	for i := s.home(a, v); ; i = (i + 1) & mask {
		e := &s.e[i]
		if e.a == 0 {
			e.a, e.v = a, v
			s.n++
			return true
		}
		if e.a == a && e.v == v {
			return false
		}
	}
}
