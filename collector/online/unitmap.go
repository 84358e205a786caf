package online

// unitMap maps a reuse tracker's units to the time of their latest load:
// open addressing with linear probing and backward-shift deletion (no
// tombstones), 12 bytes a slot. It replaces a Go map on the reuse
// trackers' hot path, where every unit of every global access is looked
// up and written once per granularity. Times are positive; 0 marks an
// empty slot.
type unitMap struct {
	keys []uint64
	vals []int32
	n    int
}

func (m *unitMap) slot(u uint64) uint64 { return mix64(u) & uint64(len(m.keys)-1) }

// get returns u's time, or 0.
func (m *unitMap) get(u uint64) int32 {
	if m.n == 0 {
		return 0
	}
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(u); ; i = (i + 1) & mask {
		switch {
		case m.vals[i] == 0:
			return 0
		case m.keys[i] == u:
			return m.vals[i]
		}
	}
}

// set sets u's time (t > 0).
func (m *unitMap) set(u uint64, t int32) {
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	mask := uint64(len(m.keys) - 1)
	for i := m.slot(u); ; i = (i + 1) & mask {
		if m.vals[i] == 0 {
			m.keys[i], m.vals[i] = u, t
			m.n++
			return
		}
		if m.keys[i] == u {
			m.vals[i] = t
			return
		}
	}
}

// del removes u if present.
func (m *unitMap) del(u uint64) {
	if m.n == 0 {
		return
	}
	mask := uint64(len(m.keys) - 1)
	i := m.slot(u)
	for ; ; i = (i + 1) & mask {
		if m.vals[i] == 0 {
			return
		}
		if m.keys[i] == u {
			break
		}
	}
	// Backward shift: move later entries of the run into the hole when
	// their home slot does not lie (cyclically) between the hole and them.
	for j := (i + 1) & mask; m.vals[j] != 0; j = (j + 1) & mask {
		h := m.slot(m.keys[j])
		if (j-h)&mask >= (j-i)&mask {
			m.keys[i], m.vals[i] = m.keys[j], m.vals[j]
			i = j
		}
	}
	m.vals[i] = 0
	m.n--
}

func (m *unitMap) grow() {
	ok, ov := m.keys, m.vals
	n := max(2*len(ok), 64)
	m.keys, m.vals, m.n = make([]uint64, n), make([]int32, n), 0
	for i, v := range ov {
		if v != 0 {
			m.set(ok[i], v)
		}
	}
}

// clear empties the map, keeping its room.
func (m *unitMap) clear() {
	if m.n > 0 {
		clear(m.vals)
		m.n = 0
	}
}
