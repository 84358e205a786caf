package profile

import (
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// stream is a generated sequence of (value, weight) with its exact counts.
type stream struct {
	vals  []uint64
	ws    []uint64
	exact map[uint64]uint64
	total uint64
}

// zipfStream draws n values from a Zipf law over `card` values (skew s > 1;
// s near 1 spreads the counts, large s concentrates them), each with weight
// 1..maxW. Values are spread over the 32-bit space so they are not ordered
// by frequency.
func zipfStream(rng *rand.Rand, n int, card uint64, s float64, maxW int) *stream {
	z := rand.NewZipf(rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())), s, 1, card-1)
	st := &stream{exact: map[uint64]uint64{}}
	for i := 0; i < n; i++ {
		v := (z.Uint64()*0x9e3779b1 + 7) & 0xffffffff
		w := uint64(1 + rng.IntN(maxW))
		st.vals = append(st.vals, v)
		st.ws = append(st.ws, w)
		st.exact[v] += w
		st.total += w
	}
	return st
}

func (st *stream) sketch(lo, hi int) *ValueSketch {
	s := NewValueSketch(ValInt, 32)
	for i := lo; i < hi; i++ {
		s.AddN(st.vals[i], st.ws[i])
	}
	return s
}

// checkBounds verifies every guarantee documented on ValueSketch against
// the exact counts.
func checkBounds(t *testing.T, s *ValueSketch, exact map[uint64]uint64, total uint64) {
	t.Helper()
	if s.Total != total {
		t.Fatalf("Total = %d, want %d", s.Total, total)
	}
	if len(s.Top) > SketchK {
		t.Fatalf("%d heavy hitters, at most %d", len(s.Top), SketchK)
	}
	if !sort.SliceIsSorted(s.Top, func(i, j int) bool { return s.Top[i].Value < s.Top[j].Value }) {
		t.Fatal("Top not sorted by value")
	}
	floor := s.Floor()
	if floor*SketchK > total {
		t.Fatalf("Floor %d > N/k = %d/%d", floor, total, SketchK)
	}
	listed := map[uint64]bool{}
	for _, tv := range s.Top {
		listed[tv.Value] = true
		tr := exact[tv.Value]
		if tv.Count < tr || tv.Count-tv.Err > tr {
			t.Fatalf("value %#x: count %d err %d, true %d", tv.Value, tv.Count, tv.Err, tr)
		}
		if tv.Err > floor {
			t.Fatalf("value %#x: err %d > floor %d", tv.Value, tv.Err, floor)
		}
		if s.Exact() && tv.Err != 0 {
			t.Fatalf("value %#x: err %d in an exact sketch", tv.Value, tv.Err)
		}
	}
	for v, c := range exact {
		if !listed[v] && c > floor {
			t.Fatalf("value %#x with %d occurrences (> floor %d, N/k %d) not listed", v, c, floor, total/SketchK)
		}
	}
	// Dominant's count is a lower bound of its value's true count, so of
	// the largest true count; exact in an exact sketch.
	dv, dc := s.Dominant()
	var most uint64
	for _, c := range exact {
		most = max(most, c)
	}
	if dc > exact[dv] || s.Exact() && dc != most {
		t.Fatalf("Dominant %#x with %d: true count %d, largest %d", dv, dc, exact[dv], most)
	}
	if s.Exact() {
		if len(s.Top) != len(exact) || s.Distinct() != float64(len(exact)) {
			t.Fatalf("exact sketch lists %d values, distinct %.0f, want %d", len(s.Top), s.Distinct(), len(exact))
		}
	}
}

func TestSketchBoundsStreaming(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		card uint64
		s    float64
	}{{8, 1.5}, {15, 1.1}, {17, 1.1}, {100, 1.05}, {1000, 1.3}, {1 << 20, 1.01}, {1 << 20, 2.5}} {
		for trial := 0; trial < 5; trial++ {
			st := zipfStream(rng, 5000, c.card, c.s, 4)
			checkBounds(t, st.sketch(0, len(st.vals)), st.exact, st.total)
		}
	}
}

// mergeTree builds one sketch per part and merges them along a random
// binary tree.
func mergeTree(rng *rand.Rand, parts []*ValueSketch) *ValueSketch {
	if len(parts) == 1 {
		return parts[0].Clone()
	}
	cut := 1 + rng.IntN(len(parts)-1)
	a := mergeTree(rng, parts[:cut])
	a.Merge(mergeTree(rng, parts[cut:]))
	return a
}

func split(rng *rand.Rand, st *stream, n int) []*ValueSketch {
	cuts := []int{0, len(st.vals)}
	for i := 1; i < n; i++ {
		cuts = append(cuts, rng.IntN(len(st.vals)+1))
	}
	sort.Ints(cuts)
	var out []*ValueSketch
	for i := 0; i+1 < len(cuts); i++ {
		out = append(out, st.sketch(cuts[i], cuts[i+1]))
	}
	return out
}

func TestSketchBoundsAfterMergeTrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, card := range []uint64{10, 16, 40, 5000, 1 << 24} {
		for trial := 0; trial < 10; trial++ {
			st := zipfStream(rng, 4000, card, 1.1+rng.Float64(), 3)
			parts := split(rng, st, 2+rng.IntN(30))
			rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
			checkBounds(t, mergeTree(rng, parts), st.exact, st.total)
		}
	}
}

func TestSketchMergeCommutative(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 200; trial++ {
		st := zipfStream(rng, 1+rng.IntN(600), 1+uint64(rng.IntN(100)), 1.01+rng.Float64(), 5)
		p := split(rng, st, 2)
		ab, ba := p[0].Clone(), p[1].Clone()
		ab.Merge(p[1])
		ba.Merge(p[0])
		if !reflect.DeepEqual(ab, ba) {
			t.Fatalf("trial %d: a+b != b+a\n%+v\n%+v", trial, ab, ba)
		}
	}
}

func TestSketchMergeAssociative(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	truncated := 0
	for trial := 0; trial < 300; trial++ {
		card := 1 + uint64(rng.IntN(40))
		st := zipfStream(rng, 1+rng.IntN(900), card, 1.01+rng.Float64(), 5)
		p := split(rng, st, 3)
		l := p[0].Clone() // (a+b)+c
		l.Merge(p[1])
		l.Merge(p[2])
		bc := p[1].Clone() // a+(b+c)
		bc.Merge(p[2])
		r := p[0].Clone()
		r.Merge(bc)
		if len(st.exact) < SketchK {
			// No truncation anywhere: exactly associative.
			if !reflect.DeepEqual(l, r) {
				t.Fatalf("trial %d: (a+b)+c != a+(b+c) with %d distinct values", trial, len(st.exact))
			}
			continue
		}
		truncated++
		// Beyond k values: both groupings keep every guarantee and agree on
		// the exact parts and on which values are heavy.
		checkBounds(t, l, st.exact, st.total)
		checkBounds(t, r, st.exact, st.total)
		if l.Total != r.Total || l.Min != r.Min || l.Max != r.Max || !reflect.DeepEqual(l.HLL, r.HLL) {
			t.Fatalf("trial %d: groupings disagree on an exact part", trial)
		}
		for _, tv := range l.Top {
			if st.exact[tv.Value] > 2*st.total/SketchK {
				if rc := countOf(r, tv.Value); rc < st.exact[tv.Value] {
					t.Fatalf("trial %d: heavy value %#x missing from the other grouping", trial, tv.Value)
				}
			}
		}
	}
	if truncated == 0 {
		t.Fatal("no trial exercised truncation")
	}
}

func countOf(s *ValueSketch, v uint64) uint64 {
	for _, tv := range s.Top {
		if tv.Value == v {
			return tv.Count
		}
	}
	return 0
}

// TestSketchDistinctError measures Distinct's relative error against exact
// distinct counts and checks its RMS stays near HLLRelErr.
func TestSketchDistinctError(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	trials := 60
	if testing.Short() {
		trials = 20
	}
	worst := 0.0
	for _, card := range []int{5, 15, 50, 200, 1000, 10000, 100000} {
		var sq, bias float64
		for trial := 0; trial < trials; trial++ {
			s := NewValueSketch(ValInt, 64)
			base := rng.Uint64()
			for i := 0; i < card; i++ {
				s.AddN(base+uint64(i)*0x9e3779b97f4a7c15, 1+uint64(i%3))
			}
			e := (s.Distinct() - float64(card)) / float64(card)
			sq += e * e
			bias += e
		}
		rms := math.Sqrt(sq / float64(trials))
		t.Logf("distinct %7d: RMS relative error %.4f, bias %+.4f (bound %.4f)", card, rms, bias/float64(trials), HLLRelErr)
		if card < SketchK && rms != 0 {
			t.Fatalf("distinct %d: below k the count must be exact, RMS %.4f", card, rms)
		}
		worst = max(worst, rms)
	}
	// 1.04/sqrt(m) is the asymptotic standard error; allow sampling noise.
	if worst > 1.3*HLLRelErr {
		t.Fatalf("worst RMS relative error %.4f > 1.3 × %.4f", worst, HLLRelErr)
	}
}

// TestSketchDistinctMerged checks that merging per-rank sketches of
// overlapping value sets estimates the union's distinct count.
func TestSketchDistinctMerged(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var sq float64
	const trials = 30
	for trial := 0; trial < trials; trial++ {
		union := map[uint64]bool{}
		var parts []*ValueSketch
		for r := 0; r < 8; r++ {
			s := NewValueSketch(ValInt, 64)
			for i := 0; i < 3000; i++ {
				v := uint64(rng.IntN(12000))*0x9e3779b97f4a7c15 + uint64(trial)
				union[v] = true
				s.AddN(v, 1)
			}
			parts = append(parts, s)
		}
		m := mergeTree(rng, parts)
		e := (m.Distinct() - float64(len(union))) / float64(len(union))
		sq += e * e
	}
	rms := math.Sqrt(sq / trials)
	t.Logf("merged 8 ranks: RMS relative error %.4f", rms)
	if rms > 1.3*HLLRelErr {
		t.Fatalf("merged RMS relative error %.4f > 1.3 × %.4f", rms, HLLRelErr)
	}
}

func TestSketchRangeTotalOrder(t *testing.T) {
	f32 := func(f float32) uint64 { return uint64(math.Float32bits(f)) }
	vals := []uint64{f32(1.5), f32(-2), f32(0), f32(float32(math.Copysign(0, -1))), f32(float32(math.Inf(1))), f32(-1e-30), f32(3e38)}
	rng := rand.New(rand.NewPCG(13, 14))
	for trial := 0; trial < 50; trial++ {
		rng.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
		s := NewValueSketch(ValFloat, 32)
		for _, v := range vals {
			s.AddN(v, 1)
		}
		if s.AsFloat(s.Min) != -2 || !math.IsInf(s.AsFloat(s.Max), 1) {
			t.Fatalf("range [%g, %g], want [-2, +Inf]", s.AsFloat(s.Min), s.AsFloat(s.Max))
		}
	}
	ints := NewValueSketch(ValInt, 16)
	for _, v := range []int16{5, -300, 7, 32767, -32768} {
		ints.AddN(uint64(uint16(v)), 1)
	}
	if ints.AsInt(ints.Min) != -32768 || ints.AsInt(ints.Max) != 32767 {
		t.Fatalf("int16 range [%d, %d]", ints.AsInt(ints.Min), ints.AsInt(ints.Max))
	}
	// A NaN arriving first or last gives the same range.
	a, b := NewValueSketch(ValFloat, 64), NewValueSketch(ValFloat, 64)
	a.AddN(math.Float64bits(math.NaN()), 1)
	a.AddN(math.Float64bits(1), 1)
	b.AddN(math.Float64bits(1), 1)
	b.AddN(math.Float64bits(math.NaN()), 1)
	if a.Min != b.Min || a.Max != b.Max || a.AsFloat(a.Min) != 1 {
		t.Fatalf("NaN order changes the range: %#x..%#x vs %#x..%#x", a.Min, a.Max, b.Min, b.Max)
	}
}

func TestSketchMemBytes(t *testing.T) {
	s := NewValueSketch(ValFloat, 32)
	for i := 0; i < 100000; i++ {
		s.AddN(uint64(i), 1)
	}
	used := int(unsafe.Sizeof(*s)) + cap(s.Top)*24 + len(s.HLL)
	t.Logf("sketch memory: %d bytes per PC or object (%d heavy hitters, %d HLL registers)", s.MemBytes(), SketchK, len(s.HLL))
	if used > s.MemBytes()+8*24 { // append may round the slice capacity up
		t.Fatalf("a full sketch uses %d bytes, MemBytes says %d", used, s.MemBytes())
	}
	if s.MemBytes() > 1024 {
		t.Fatalf("%d bytes per sketch, budget 1 KiB", s.MemBytes())
	}
}

// FuzzSketchMerge reads the input as weighted 16-bit values split in three
// parts and checks the bounds, exact commutativity, and associativity
// (exact without truncation, within the bounds with it).
func FuzzSketchMerge(f *testing.F) {
	f.Add([]byte{1, 0, 1, 2, 0, 3, 1, 0, 1}, uint8(1), uint8(2))
	f.Add(make([]byte, 300), uint8(50), uint8(70))
	seed := make([]byte, 600)
	for i := range seed {
		seed[i] = byte(i * 37)
	}
	f.Add(seed, uint8(10), uint8(150))
	f.Fuzz(func(t *testing.T, data []byte, c1, c2 uint8) {
		type rec struct{ v, w uint64 }
		var recs []rec
		exact := map[uint64]uint64{}
		var total uint64
		for i := 0; i+3 <= len(data); i += 3 {
			v := uint64(binary.LittleEndian.Uint16(data[i:]))
			w := uint64(data[i+2]%7) + 1
			recs = append(recs, rec{v, w})
			exact[v] += w
			total += w
		}
		i1, i2 := min(int(c1), len(recs)), min(int(c2), len(recs))
		if i1 > i2 {
			i1, i2 = i2, i1
		}
		mk := func(rs []rec) *ValueSketch {
			s := NewValueSketch(ValInt, 16)
			for _, r := range rs {
				s.AddN(r.v, r.w)
			}
			return s
		}
		a, b, c := mk(recs[:i1]), mk(recs[i1:i2]), mk(recs[i2:])
		ab, ba := a.Clone(), b.Clone()
		ab.Merge(b)
		ba.Merge(a)
		if !reflect.DeepEqual(ab, ba) {
			t.Fatalf("a+b != b+a")
		}
		l := ab.Clone()
		l.Merge(c)
		bc := b.Clone()
		bc.Merge(c)
		r := a.Clone()
		r.Merge(bc)
		if total == 0 {
			return
		}
		checkBounds(t, l, exact, total)
		checkBounds(t, r, exact, total)
		if len(exact) < SketchK && !reflect.DeepEqual(l, r) {
			t.Fatalf("(a+b)+c != a+(b+c) with %d distinct values", len(exact))
		}
	})
}

// addNReference is AddN as first written (remove the smallest counter, then
// insert the new one): the oracle of the one that moves entries once.
func addNReference(s *ValueSketch, raw uint64, n uint64) {
	if n == 0 {
		return
	}
	if s.Bits > 0 && s.Bits < 64 {
		raw &= 1<<s.Bits - 1
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
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], raw)
	h := xxhash.Sum64(b[:])
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
	m := 0 // the smallest counter, the lowest value on ties
	for i, t := range s.Top {
		if t.Count < s.Top[m].Count {
			m = i
		}
	}
	min := s.Top[m]
	s.Top = append(s.Top[:m], s.Top[m+1:]...)
	i = sort.Search(len(s.Top), func(i int) bool { return s.Top[i].Value >= raw })
	s.Top = append(s.Top, TopValue{})
	copy(s.Top[i+1:], s.Top[i:])
	s.Top[i] = TopValue{Value: raw, Count: min.Count + n, Err: min.Count}
}

// TestAddNMatchesReference: the fast AddN leaves every sketch exactly as
// the reference does, over value streams from few to all distinct values,
// with weights, units and kinds.
func TestAddNMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 300; trial++ {
		kind := []ValueKind{ValInt, ValFloat, ValUnknown}[trial%3]
		unit := []uint8{8, 16, 32, 64}[trial%4]
		a, b := NewValueSketch(kind, unit), NewValueSketch(kind, unit)
		distinct := 1 + rng.IntN([]int{4, 20, 200, 1 << 20}[trial%4])
		for i := 0; i < 2000; i++ {
			v := uint64(rng.IntN(distinct)) * 0x9e3779b97f4a7c15
			n := uint64(1)
			if rng.IntN(4) == 0 {
				n = uint64(rng.IntN(40))
			}
			a.AddN(v, n)
			addNReference(b, v, n)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("trial %d (%d distinct): fast %+v, reference %+v", trial, distinct, a, b)
		}
	}
}

// BenchmarkAddN: the sketch's update against the reference, on a stream of
// mostly new values (every lane of a pointer chase or a transposed tile:
// the replacement path) and on few recurring values (the counting path).
func BenchmarkAddN(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		name     string
		distinct int
	}{{"new-values", 1 << 30}, {"recurring", 12}} {
		vals := make([]uint64, 1<<16)
		for i := range vals {
			vals[i] = uint64(rng.IntN(c.distinct)) * 0x9e3779b97f4a7c15
		}
		for _, impl := range []struct {
			name string
			add  func(s *ValueSketch, v, n uint64)
		}{{"fast", (*ValueSketch).AddN}, {"reference", addNReference}} {
			b.Run(c.name+"/"+impl.name, func(b *testing.B) {
				s := NewValueSketch(ValInt, 32)
				for i := 0; i < b.N; i++ {
					impl.add(s, vals[i&(len(vals)-1)], 1)
				}
			})
		}
	}
}
