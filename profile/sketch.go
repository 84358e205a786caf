package profile

import (
	"math"
	"math/bits"
	"sort"

	"github.com/cespare/xxhash/v2"
)

// ValueKind says how the raw bits of a value are read: the access kind the
// SASS analysis infers (unit size in bits, int or float).
type ValueKind uint8

const (
	ValUnknown ValueKind = iota
	ValInt
	ValFloat
)

// SketchK is the number of heavy hitters a ValueSketch keeps.
const SketchK = 16

// sketchP is the HyperLogLog precision (2^p one-byte registers).
const sketchP = 8

// TopValue is a heavy-hitter candidate: Count overestimates the value's
// true count by at most Err (SpaceSaving's guarantee).
type TopValue struct {
	Value uint64
	Count uint64
	Err   uint64
}

// ValueSketch is a bounded, mergeable summary of the values an instruction
// or data object saw: heavy hitters (SpaceSaving), a distinct-count estimate
// (HyperLogLog) and the numeric range. Its size is fixed whatever the
// number of values.
type ValueSketch struct {
	Kind  ValueKind
	Bits  uint8 // unit size in bits (8, 16, 32, 64)
	Total uint64
	Top   []TopValue // at most SketchK, sorted by value
	HLL   []byte     // 2^sketchP registers, nil until the first value
	// Range of the values read as Kind (floats as float64 bit patterns,
	// ints as int64); valid if Total > 0.
	Min, Max uint64
}

// NewValueSketch returns an empty sketch for values of the given kind.
func NewValueSketch(kind ValueKind, unitBits uint8) *ValueSketch {
	return &ValueSketch{Kind: kind, Bits: unitBits}
}

// AsFloat reads raw as a float of the sketch's unit size.
func (s *ValueSketch) AsFloat(raw uint64) float64 {
	switch {
	case s.Kind == ValFloat && s.Bits == 32:
		return float64(math.Float32frombits(uint32(raw)))
	case s.Kind == ValFloat:
		return math.Float64frombits(raw)
	default:
		return float64(s.asInt(raw))
	}
}

func (s *ValueSketch) asInt(raw uint64) int64 {
	switch s.Bits {
	case 8:
		return int64(int8(raw))
	case 16:
		return int64(int16(raw))
	case 32:
		return int64(int32(raw))
	}
	return int64(raw)
}

func (s *ValueSketch) less(a, b uint64) bool {
	if s.Kind == ValFloat {
		return s.AsFloat(a) < s.AsFloat(b)
	}
	return s.asInt(a) < s.asInt(b)
}

// AddN records n occurrences of raw.
func (s *ValueSketch) AddN(raw uint64, n uint64) {
	if n == 0 {
		return
	}
	if s.Total == 0 || s.less(raw, s.Min) {
		s.Min = raw
	}
	if s.Total == 0 || s.less(s.Max, raw) {
		s.Max = raw
	}
	s.Total += n
	if s.HLL == nil {
		s.HLL = make([]byte, 1<<sketchP)
	}
	h := xxhash.Sum64(u64bytes(raw))
	idx := h >> (64 - sketchP)
	rho := uint8(bits.LeadingZeros64(h<<sketchP|1<<(sketchP-1))) + 1
	if rho > s.HLL[idx] {
		s.HLL[idx] = rho
	}
	i := sort.Search(len(s.Top), func(i int) bool { return s.Top[i].Value >= raw })
	if i < len(s.Top) && s.Top[i].Value == raw {
		s.Top[i].Count += n
		return
	}
	if len(s.Top) < SketchK {
		s.Top = append(s.Top, TopValue{})
		copy(s.Top[i+1:], s.Top[i:])
		s.Top[i] = TopValue{Value: raw, Count: n}
		return
	}
	// SpaceSaving: replace the smallest counter, inheriting its count as error.
	m := s.minTop()
	min := s.Top[m]
	s.Top = append(s.Top[:m], s.Top[m+1:]...)
	i = sort.Search(len(s.Top), func(i int) bool { return s.Top[i].Value >= raw })
	s.Top = append(s.Top, TopValue{})
	copy(s.Top[i+1:], s.Top[i:])
	s.Top[i] = TopValue{Value: raw, Count: min.Count + n, Err: min.Count}
}

func u64bytes(v uint64) []byte {
	var b [8]byte
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return b[:]
}

// minTop returns the index of the smallest counter (lowest value on ties, so
// the choice is deterministic).
func (s *ValueSketch) minTop() int {
	m := 0
	for i, t := range s.Top {
		if t.Count < s.Top[m].Count {
			m = i
		}
	}
	return m
}

// Merge adds o into s (mergeable SpaceSaving: sum the counters of both, then
// keep the SketchK largest; a value missing from a full side is credited that
// side's smallest count as error). Merge is commutative; associativity holds
// exactly while no truncation happens and within the error bounds otherwise.
func (s *ValueSketch) Merge(o *ValueSketch) {
	if o == nil || o.Total == 0 {
		return
	}
	if s.Total == 0 {
		s.Kind, s.Bits = o.Kind, o.Bits
		s.Min, s.Max = o.Min, o.Max
	} else {
		if s.less(o.Min, s.Min) {
			s.Min = o.Min
		}
		if s.less(s.Max, o.Max) {
			s.Max = o.Max
		}
	}
	s.Total += o.Total
	if o.HLL != nil {
		if s.HLL == nil {
			s.HLL = make([]byte, 1<<sketchP)
		}
		for i, r := range o.HLL {
			if r > s.HLL[i] {
				s.HLL[i] = r
			}
		}
	}
	floor := func(t []TopValue) uint64 {
		if len(t) < SketchK {
			return 0
		}
		m := t[0].Count
		for _, x := range t {
			m = min(m, x.Count)
		}
		return m
	}
	fs, fo := floor(s.Top), floor(o.Top)
	all := map[uint64]TopValue{}
	for _, t := range s.Top {
		all[t.Value] = TopValue{t.Value, t.Count + fo, t.Err + fo}
	}
	for _, t := range o.Top {
		if a, ok := all[t.Value]; ok {
			all[t.Value] = TopValue{t.Value, a.Count - fo + t.Count, a.Err - fo + t.Err}
		} else {
			all[t.Value] = TopValue{t.Value, t.Count + fs, t.Err + fs}
		}
	}
	top := make([]TopValue, 0, len(all))
	for _, t := range all {
		top = append(top, t)
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Count != top[j].Count {
			return top[i].Count > top[j].Count
		}
		return top[i].Value < top[j].Value
	})
	if len(top) > SketchK {
		top = top[:SketchK]
	}
	sort.Slice(top, func(i, j int) bool { return top[i].Value < top[j].Value })
	s.Top = top
}

// Clone copies s.
func (s *ValueSketch) Clone() *ValueSketch {
	if s == nil {
		return nil
	}
	c := *s
	c.Top = append([]TopValue(nil), s.Top...)
	if s.HLL != nil {
		c.HLL = append([]byte(nil), s.HLL...)
	}
	return &c
}

// Distinct estimates the number of distinct values (HyperLogLog with the
// small-range correction).
func (s *ValueSketch) Distinct() float64 {
	if s == nil || s.HLL == nil {
		return 0
	}
	m := float64(len(s.HLL))
	sum, zeros := 0.0, 0
	for _, r := range s.HLL {
		sum += math.Exp2(-float64(r))
		if r == 0 {
			zeros++
		}
	}
	alpha := 0.7213 / (1 + 1.079/m)
	e := alpha * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return e
}

// Heaviest returns the heavy hitters by descending count.
func (s *ValueSketch) Heaviest() []TopValue {
	t := append([]TopValue(nil), s.Top...)
	sort.Slice(t, func(i, j int) bool {
		if t[i].Count != t[j].Count {
			return t[i].Count > t[j].Count
		}
		return t[i].Value < t[j].Value
	})
	return t
}
