package profile

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sort"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// ValueKind says how the raw bits of a value are read: the access kind the
// SASS analysis infers (unit size in bits, int or float).
type ValueKind uint8

const (
	ValUnknown ValueKind = iota
	ValInt
	ValFloat
	// ValHashed: the collector stored keyed hashes of the values, never the
	// values (gpuprof run --no-values). Counts, shares and the distinct
	// estimate hold as for plain values; Min and Max are not kept, and a
	// listed "value" is a hash that names nothing outside the job.
	ValHashed
)

// SketchK is the number of heavy hitters a ValueSketch keeps.
const SketchK = 16

// sketchP is the HyperLogLog precision (2^p one-byte registers).
const sketchP = 8

// HLLRelErr is the relative standard error of Distinct once the heavy-hitter
// list overflows: 1.04/sqrt(m) with m = 2^sketchP registers (6.5% for m=256).
// Below SketchK distinct values Distinct is exact.
var HLLRelErr = 1.04 / math.Sqrt(float64(int(1)<<sketchP))

// TopValue is a heavy-hitter candidate: Count overestimates the value's
// true count by at most Err (SpaceSaving's guarantee), so
// Count-Err <= true count <= Count.
type TopValue struct {
	Value uint64
	Count uint64
	Err   uint64
}

// ValueSketch is a bounded, mergeable summary of the values an instruction
// or data object saw: heavy hitters (SpaceSaving), a distinct-count estimate
// (HyperLogLog) and the numeric range. Its size is fixed whatever the
// number of values.
//
// Guarantees, for N = Total and k = SketchK, after any sequence of AddN and
// Merge calls (tested against exact counts in sketch_test.go):
//   - Total, Min and Max are exact.
//   - While fewer than k distinct values were seen (len(Top) < k), every
//     count is exact (Err = 0) and Distinct is exact.
//   - Otherwise, for every listed value Count-Err <= true <= Count, and
//     Err <= Floor() <= N/k; every value not listed occurred at most Floor()
//     times, so every value with more than N/k occurrences is listed.
//   - Distinct has relative standard error HLLRelErr.
//
// Merge is exactly commutative. It is exactly associative while the merged
// lists fit in k entries (no truncation); otherwise different groupings may
// keep different low-count candidates, each within the bounds above.
type ValueSketch struct {
	Kind  ValueKind
	Bits  uint8 // unit size in bits (8, 16, 32, 64)
	Total uint64
	Top   []TopValue // at most SketchK, sorted by value
	HLL   []byte     // 2^sketchP registers, nil until the first value
	// Range of the values read as Kind (Min and Max are raw bit patterns
	// of the unit size); valid if Total > 0.
	Min, Max uint64
}

// NewValueSketch returns an empty sketch for values of the given kind.
func NewValueSketch(kind ValueKind, unitBits uint8) *ValueSketch {
	return &ValueSketch{Kind: kind, Bits: unitBits}
}

// AsFloat reads raw as a number of the sketch's kind and unit size.
func (s *ValueSketch) AsFloat(raw uint64) float64 {
	switch {
	case s.Kind == ValFloat && s.Bits == 16:
		return halfToFloat(uint16(raw))
	case s.Kind == ValFloat && s.Bits == 32:
		return float64(math.Float32frombits(uint32(raw)))
	case s.Kind == ValFloat:
		return math.Float64frombits(raw)
	default:
		return float64(s.AsInt(raw))
	}
}

// AsInt reads raw as a signed integer of the sketch's unit size.
func (s *ValueSketch) AsInt(raw uint64) int64 {
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

func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	man := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * man * math.Exp2(-24)
	case 0x1f:
		if man == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1 + man/1024) * math.Exp2(float64(exp-15))
}

// orderKey maps raw to an unsigned key whose order is the numeric order of
// the value read as Kind: a total order (NaNs sort beyond the infinities,
// -0 before +0), so Min and Max do not depend on the order values arrive in.
func (s *ValueSketch) orderKey(raw uint64) uint64 {
	w := uint(s.Bits)
	if w == 0 || w > 64 {
		w = 64
	}
	if w < 64 {
		raw &= 1<<w - 1
	}
	sign := uint64(1) << (w - 1)
	if s.Kind == ValFloat {
		// IEEE totalOrder: negative numbers reverse, positives move up.
		if raw&sign != 0 {
			return ^raw & (sign<<1 - 1)
		}
		return raw | sign
	}
	// Two's complement: flipping the sign bit orders signed values.
	return raw ^ sign
}

func (s *ValueSketch) less(a, b uint64) bool { return s.orderKey(a) < s.orderKey(b) }

// AddN records n occurrences of raw.
func (s *ValueSketch) AddN(raw uint64, n uint64) {
	if n == 0 {
		return
	}
	if s.Kind == ValHashed {
		// A hash spans 64 bits whatever the unit, and a range of hashes
		// means nothing.
	} else {
		if s.Bits > 0 && s.Bits < 64 {
			raw &= 1<<s.Bits - 1 // bits beyond the unit are not part of the value
		}
		if k := s.orderKey(raw); s.Total == 0 {
			s.Min, s.Max = raw, raw
		} else if k < s.orderKey(s.Min) {
			s.Min = raw
		} else if k > s.orderKey(s.Max) {
			s.Max = raw
		}
	}
	s.Total += n
	if s.HLL == nil {
		s.HLL = make([]byte, 1<<sketchP)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], raw)
	h := xxhash.Sum64(b[:])
	idx := h >> (64 - sketchP)
	rho := uint8(bits.LeadingZeros64(h<<sketchP|1<<(sketchP-1))) + 1
	if rho > s.HLL[idx] {
		s.HLL[idx] = rho
	}
	// raw's place in Top (sorted by value): a binary search written out,
	// as sort.Search's closure is not inlined and this runs per value.
	i, j := 0, len(s.Top)
	for i < j {
		h := int(uint(i+j) >> 1)
		if s.Top[h].Value < raw {
			i = h + 1
		} else {
			j = h
		}
	}
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
	// SpaceSaving: replace the smallest counter, inheriting its count as
	// error; the entries between the removed one and raw's place move by
	// one (a value-heavy stream comes here for most of its lanes).
	m := s.minTop()
	min := s.Top[m]
	if i > m {
		copy(s.Top[m:i-1], s.Top[m+1:i])
		i--
	} else {
		copy(s.Top[i+1:m+1], s.Top[i:m])
	}
	s.Top[i] = TopValue{Value: raw, Count: min.Count + n, Err: min.Count}
}

// minTop returns the index of the smallest counter (lowest value on ties, so
// the choice is deterministic).
func (s *ValueSketch) minTop() int {
	if len(s.Top) == 0 {
		return 0
	}
	// The running minimum in a register: reloading Top[m] at each step
	// was most of the scan, which runs for every new value of a full list.
	m, c := 0, s.Top[0].Count
	for i := 1; i < len(s.Top); i++ {
		if x := s.Top[i].Count; x < c {
			m, c = i, x
		}
	}
	return m
}

// Floor is the bound on the count of any value not listed in Top and on
// every listed value's Err: the smallest counter once the list is full, 0
// before (then every count is exact). Floor <= Total/SketchK.
func (s *ValueSketch) Floor() uint64 {
	if s == nil || len(s.Top) < SketchK {
		return 0
	}
	return s.Top[s.minTop()].Count
}

// Exact reports whether every count and the distinct count are exact (fewer
// than SketchK distinct values were ever seen).
func (s *ValueSketch) Exact() bool { return s == nil || len(s.Top) < SketchK }

// Merge adds o into s (mergeable SpaceSaving as in Cafaro et al.'s parallel
// SpaceSaving: sum the counters of both, a value missing from a full side is
// credited that side's smallest count as count and error, then keep the
// SketchK largest). The sum of the kept counters stays <= Total, so the
// bounds documented on ValueSketch survive any merge tree.
func (s *ValueSketch) Merge(o *ValueSketch) {
	if o == nil || o.Total == 0 {
		return
	}
	if s.Total == 0 {
		s.Kind, s.Bits = o.Kind, o.Bits
		s.Min, s.Max = o.Min, o.Max
	} else {
		// Disagreeing kinds (not expected for one PC) resolve the same way
		// whatever the merge order.
		if o.Kind > s.Kind || (o.Kind == s.Kind && o.Bits > s.Bits) {
			s.Kind, s.Bits = o.Kind, o.Bits
		}
		s.Min = s.minOf(s.Min, o.Min)
		s.Max = s.maxOf(s.Max, o.Max)
	}
	if s.Kind == ValHashed {
		s.Min, s.Max = 0, 0
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
	fs, fo := s.Floor(), o.Floor()
	all := make([]TopValue, 0, len(s.Top)+len(o.Top))
	i, j := 0, 0
	for i < len(s.Top) || j < len(o.Top) {
		switch {
		case j == len(o.Top) || (i < len(s.Top) && s.Top[i].Value < o.Top[j].Value):
			t := s.Top[i]
			all = append(all, TopValue{t.Value, t.Count + fo, t.Err + fo})
			i++
		case i == len(s.Top) || o.Top[j].Value < s.Top[i].Value:
			t := o.Top[j]
			all = append(all, TopValue{t.Value, t.Count + fs, t.Err + fs})
			j++
		default:
			a, b := s.Top[i], o.Top[j]
			all = append(all, TopValue{a.Value, a.Count + b.Count, a.Err + b.Err})
			i++
			j++
		}
	}
	if len(all) > SketchK {
		sort.Slice(all, func(i, j int) bool {
			if all[i].Count != all[j].Count {
				return all[i].Count > all[j].Count
			}
			return all[i].Value < all[j].Value
		})
		all = all[:SketchK]
		sort.Slice(all, func(i, j int) bool { return all[i].Value < all[j].Value })
	}
	s.Top = all
}

func (s *ValueSketch) minOf(a, b uint64) uint64 {
	if s.less(b, a) {
		return b
	}
	return a
}

func (s *ValueSketch) maxOf(a, b uint64) uint64 {
	if s.less(a, b) {
		return b
	}
	return a
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

// Distinct estimates the number of distinct values: exact while the
// heavy-hitter list has room (every value seen is listed), else
// HyperLogLog with Ertl's improved raw estimator (no bias correction
// tables, even error from small to large cardinalities).
func (s *ValueSketch) Distinct() float64 {
	if s == nil || s.Total == 0 {
		return 0
	}
	if len(s.Top) < SketchK {
		return float64(len(s.Top))
	}
	if s.HLL == nil {
		return float64(len(s.Top))
	}
	return hllEstimate(s.HLL)
}

// hllEstimate is Ertl's improved raw estimator (arXiv:1702.01284, alg. 6)
// for registers holding rho in 0..q+1, q = 64-p.
func hllEstimate(regs []byte) float64 {
	const q = 64 - sketchP
	m := float64(len(regs))
	var c [q + 2]float64
	for _, r := range regs {
		c[min(int(r), q+1)]++
	}
	z := m * hllTau(1-c[q+1]/m)
	for k := q; k >= 1; k-- {
		z = 0.5 * (z + c[k])
	}
	z += m * hllSigma(c[0]/m)
	return m * m / (2 * math.Ln2 * z)
}

func hllSigma(x float64) float64 {
	if x == 1 {
		return math.Inf(1)
	}
	y, z := 1.0, x
	for {
		x *= x
		old := z
		z += x * y
		y += y
		if z == old {
			return z
		}
	}
}

func hllTau(x float64) float64 {
	if x == 0 || x == 1 {
		return 0
	}
	y, z := 1.0, 1-x
	for {
		x = math.Sqrt(x)
		old := z
		y *= 0.5
		z -= (1 - x) * (1 - x) * y
		if z == old {
			return z / 3
		}
	}
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

// Dominant returns the value with the largest guaranteed count and that
// count (Count-Err, a lower bound of its true count; exact while the sketch
// is Exact). For a value that was heavy in every input the collector fed
// and merged, Err stays 0, so the bound is its count.
func (s *ValueSketch) Dominant() (value, count uint64) {
	for _, t := range s.Top {
		if c := t.Count - t.Err; c > count || c == count && t.Value < value {
			value, count = t.Value, c
		}
	}
	return value, count
}

// MemBytes is the sketch's memory footprint: the struct, a full
// heavy-hitter list and the HyperLogLog registers (the most it ever holds).
func (s *ValueSketch) MemBytes() int {
	return int(unsafe.Sizeof(*s)) + SketchK*int(unsafe.Sizeof(TopValue{})) + 1<<sketchP
}
