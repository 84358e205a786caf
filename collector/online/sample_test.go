package online

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// The samples nest (a value in the sample at level L+1 is in it at L),
// and level L keeps about one value in 2^L.
func TestSpSampledNests(t *testing.T) {
	const n = 1 << 16
	for c, value := range []func(i uint64) uint64{
		func(i uint64) uint64 { return i * 8 },                                    // values that differ in their higher bits only, as addresses do
		func(i uint64) uint64 { return uint64(math.Float32bits(float32(i) / 7)) }, // floats
	} {
		testSampledNests(t, c, n, value)
	}
}

func testSampledNests(t *testing.T, c int, n uint64, value func(uint64) uint64) {
	for lv := uint8(0); lv < 8; lv++ {
		kept := 0
		for i := uint64(0); i < n; i++ {
			v := value(i)
			if spSampled(7<<32|3, v, lv+1) && !spSampled(7<<32|3, v, lv) {
				t.Fatalf("value %#x in the sample at level %d and not at %d", v, lv+1, lv)
			}
			if spSampled(7<<32|3, v, lv) {
				kept++
			}
		}
		want := float64(n) / float64(uint64(1)<<lv)
		if math.Abs(float64(kept)-want) > 5*math.Sqrt(want) {
			t.Errorf("values %d: level %d kept %d of %d, want about %.0f", c, lv, kept, n, want)
		}
	}
}

func TestValSetRetain(t *testing.T) {
	var s valSet
	for v := uint64(0); v < 100; v++ {
		s.add(v)
	}
	s.retain(func(v uint64) bool { return v%3 == 0 })
	if got := s.len(); got != 34 { // 0, 3, ..., 99
		t.Fatalf("kept %d values, want 34", got)
	}
	for v := uint64(0); v < 100; v++ {
		if s.has(v) != (v%3 == 0) {
			t.Errorf("has(%d) = %v after retain", v, s.has(v))
		}
	}
	s.retain(func(v uint64) bool { return v != 0 })
	if s.has(0) || s.len() != 33 {
		t.Errorf("retain kept zero (%v) or %d values, want 33", s.has(0), s.len())
	}
	if !s.addNew(1) || s.addNew(3) {
		t.Error("a retained set takes new values and knows its own")
	}
}

// levelHints pass on one level less than a context's last launch ended
// with, and none below 2.
func TestStartLevels(t *testing.T) {
	a := &Analyzer{levelHints: map[uint32][]uint8{5: {0, 1, 2, 7}}}
	got := fmt.Sprint(a.startLevels(5))
	if got != "[0 0 1 6]" {
		t.Errorf("startLevels = %s, want [0 0 1 6]", got)
	}
	if a.startLevels(6) != nil {
		t.Error("a context without a hint starts at level 0")
	}
	if a.sampled != 2 {
		t.Errorf("sampled = %d, want the 2 objects that start sampled", a.sampled)
	}
}

// laneLevel keeps at least keep accesses looked up (hand-computed).
func TestLaneLevel(t *testing.T) {
	for _, c := range []struct {
		n, keep int64
		want    uint8
	}{{100, 1 << 18, 0}, {1<<19 - 1, 1 << 18, 0}, {1 << 19, 1 << 18, 1}, {1<<20 - 1, 1 << 18, 1}, {1 << 20, 1 << 18, 2}, {1 << 62, 1, maxLevel}} {
		if got := laneLevel(c.n, c.keep); got != c.want {
			t.Errorf("laneLevel(%d, %d) = %d, want %d", c.n, c.keep, got, c.want)
		}
	}
}

// With few values kept, the spatial counts are estimates: on streams of
// mostly new values, the redundant accesses stay within five standard
// deviations of the exact count (the variance is at most the distinct
// values times 2^level, sample.go), and everything else is exact.
func TestSpatialSamplingEstimates(t *testing.T) {
	capture, err := os.ReadFile("../../testdata/captures/stall_memory.redundancy.p1.gpr")
	if err != nil {
		t.Fatal(err)
	}
	ins := []struct {
		name   string
		stream []byte
		st     StructureSource
	}{
		{"stall_memory capture", capture, &SASS{NVDisasm: "-", Files: []string{"../../testdata/sass/stall_memory"}}},
		{"random synth", synthStream(t, synth.Options{Seed: 9, Pattern: synth.PatternRandom, BlockSampling: 1, KernelSampling: 1, Iterations: 3}, 1), nil},
		// Eight values: the levels rise with the accesses alone.
		{"few-values synth", synthStream(t, synth.Options{Seed: 10, Pattern: synth.PatternFew, BlockSampling: 1, KernelSampling: 1, Iterations: 3}, 1), nil},
	}
	for _, in := range ins {
		for _, w := range []int{1, 3} {
			name := fmt.Sprintf("%s/workers=%d", in.name, w)
			exact, be := analyseWith(t, in.stream, Options{Workers: w, Structures: in.st, ReuseSampling: 1, SpatialKeep: -1}, 0)
			// Barriers every 256 records a worker: levels rise at barriers.
			est, bs := analyseWith(t, in.stream, Options{Workers: w, Structures: in.st, ReuseSampling: 1, SpatialKeep: 64, ResolveEvery: 256}, 0)
			if be.Sampled != 0 {
				t.Fatalf("%s: SpatialKeep -1 sampled %d objects", name, be.Sampled)
			}
			if bs.Sampled == 0 || bs.MaxLevel == 0 {
				t.Fatalf("%s: SpatialKeep 64 sampled nothing: the test does not exercise it", name)
			}
			// The profile says so, for the report.
			for r, ri := range est.Ranks {
				if ri.SpatialLevel != uint32(bs.MaxLevel) || exact.Ranks[r].SpatialLevel != 0 {
					t.Errorf("%s: rank %d: spatial level %d sampled (want %d), %d exact (want 0)", name, r, ri.SpatialLevel, bs.MaxLevel, exact.Ranks[r].SpatialLevel)
				}
			}
			red := func(p *profile.Profile) (n float64) {
				for _, v := range p.Spatial {
					n += float64(v)
				}
				return n
			}
			var accesses float64
			for _, s := range exact.ObjStats {
				accesses += float64(s.Accesses)
			}
			re, rs := red(exact), red(est)
			distinct := accesses - re
			sd := math.Sqrt(distinct * float64(uint64(1)<<bs.MaxLevel))
			t.Logf("%s: %d objects sampled, level up to %d: redundant %.0f exact, %.0f estimated (sd at most %.0f; %.0f accesses, %.0f distinct)",
				name, bs.Sampled, bs.MaxLevel, re, rs, sd, accesses, distinct)
			if math.Abs(rs-re) > 5*sd {
				t.Errorf("%s: estimated %.0f spatially redundant accesses, exact %.0f: more than 5 sd (%.0f) apart", name, rs, re, sd)
			}
			// Temporal redundancy is not sampled.
			for k, v := range exact.Temporal {
				if est.Temporal[k] != v {
					t.Errorf("%s: temporal pair %v: %d sampled, %d exact", name, k, est.Temporal[k], v)
					break
				}
			}
		}
	}
}

// chaseStream writes a pointer chase's stream: launches of one kernel
// from one call site, each with records of 32 lanes loading new random
// 8-byte values from one large allocation (every value distinct), as the
// H100's stall_memory brings hundreds of thousands a launch; after each,
// untraced launches from the same call site (kernel sampling's).
func chaseStream(tb testing.TB, launches, records, untraced int) []byte {
	rng := rand.New(rand.NewPCG(3, 5))
	st := newTestStream(tb, 1, "_Z5chasev")
	put := st.put
	const base, size = 0x1000000, 1 << 30
	put(&rawstream.Alloc{AllocID: 1, Address: base, Size: size, Memory: rawstream.AllocDevice, Host: []uint64{0x400000}})
	var val [8]byte
	id := uint64(1000)
	for l := 1; l <= launches; l++ {
		for u := 0; u < untraced && l > 1; u++ {
			id++
			put(&rawstream.Launch{LaunchID: id, FunctionID: 1, Grid: [3]uint32{1024, 1, 1}, Block: [3]uint32{256, 1, 1}, Host: []uint64{0x500000, 0x600000}})
			put(&rawstream.KernelEnd{LaunchID: id, StartNS: 1, EndNS: 100, BlocksTotal: 1024})
		}
		put(&rawstream.Launch{LaunchID: uint64(l), FunctionID: 1, Grid: [3]uint32{1024, 1, 1}, Block: [3]uint32{256, 1, 1},
			Instrumented: true, Host: []uint64{0x500000, 0x600000}})
		for done := 0; done < records; {
			acc := &rawstream.Access{LaunchID: uint64(l)}
			for r := 0; r < 512 && done < records; r, done = r+1, done+1 {
				acc.AppendRecord(0x10010, uint32(done/64%1024), uint16(done%8), rawstream.SpaceGlobal, rawstream.FlagRead, ^uint32(0), 8)
				for lane := 0; lane < 32; lane++ {
					binary.LittleEndian.PutUint64(val[:], rng.Uint64())
					acc.AppendLane(base+8*rng.Uint64N(size/8), val[:])
				}
			}
			put(acc)
		}
		put(&rawstream.KernelEnd{LaunchID: uint64(l), StartNS: 1, EndNS: 100, BlocksTotal: 1024, BlocksSampled: 1024})
	}
	return st.end()
}

// A launch starts sampled when its context's last traced launch was, and
// the untraced launches between them (kernel sampling's) leave the hint.
func TestLevelsSurviveUntracedLaunches(t *testing.T) {
	frames, _ := decodeFrames(t, chaseStream(t, 5, 1<<12, 9))
	a := New(Options{Job: "test", Workers: 2})
	defer a.Close()
	var starts []uint8 // each traced launch's level when it began
	for j, fr := range frames {
		if err := a.Add(fr, int64(j)); err != nil {
			t.Fatal(err)
		}
		switch f := fr.(type) {
		case *rawstream.Launch:
			if f.Instrumented {
				l := a.launches[f.LaunchID]
				lv := uint8(0)
				for _, x := range l.levels {
					lv = max(lv, x)
				}
				starts = append(starts, lv)
			}
		case *rawstream.KernelEnd:
			// A barrier after every launch, untraced ones too, as where
			// barriers come often beside kernel sampling's short launches.
			if _, err := a.Flush(uint32(j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first launch (131k new values) rises to level 2 or more, and
	// the traced launches after it begin one level below the last, the
	// nine untraced launches between them notwithstanding.
	if len(starts) != 5 || starts[0] != 0 {
		t.Fatalf("traced launches began at levels %v: want 5, the first at 0", starts)
	}
	for i, lv := range starts[1:] {
		if lv < 1 {
			t.Errorf("traced launch %d began at level %d (all: %v): the hint was lost", i+2, lv, starts)
		}
	}
}

// BenchmarkSpatialSampling analyses a pointer chase's launches of 2^15
// records (a million new values each) with every value followed and with
// the default sampling.
func BenchmarkSpatialSampling(b *testing.B) {
	frames, total := decodeFrames(b, chaseStream(b, 6, 1<<15, 9))
	for _, keep := range []int64{-1, 0} {
		b.Run(fmt.Sprintf("keep=%d", keep), func(b *testing.B) {
			cpu0 := cpuTime()
			var bz Busy
			for i := 0; i < b.N; i++ {
				a := New(Options{Job: "bench", SpatialKeep: keep})
				replayFrames(b, a, frames)
				bz = a.Busy()
				a.Close()
			}
			n := float64(total) * float64(b.N)
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/n, "cpu-ns/record")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
			b.ReportMetric(float64(bz.Barriers), "barriers")
			b.ReportMetric(float64(bz.MaxLevel), "level")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// decodeFrames is a stream's frames and access records.
func decodeFrames(b testing.TB, stream []byte) ([]rawstream.Frame, uint64) {
	fs, _, recs := decodeAll(b, stream)
	return fs, recs
}
