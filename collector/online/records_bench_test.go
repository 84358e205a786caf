package online

import (
	"os"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
)

// BenchmarkAnalyzeRecords measures the per-record cost of the online
// analysis on the fully traced H100 captures
// (testdata/captures/*.redundancy.p1.gpr, or the glob in
// GPUPROF_BENCH_RECORDS) with one worker, replayed until 2^20 records
// went through one long-lived analyzer, so that its set-up (SASS parsing,
// table growth) is paid once and the records dominate. Two replays:
// fresh, the capture's launches again under fresh launch ids (as
// BenchmarkAnalyzeSteady: every launch's values are new, the spatial
// candidates weigh most); long, each launch's records again within the
// launch, as in the H100 runs' launches of 10^5 records and more, where
// most values were seen before; long-compact, the long replay with the
// records re-encoded as the library writes them now. It reports records/s and ns/record of
// wall time and cpu-ns/record of the process's CPU time (dispatch,
// worker, memory worker, items, garbage collection).
func BenchmarkAnalyzeRecords(b *testing.B) {
	glob := os.Getenv("GPUPROF_BENCH_RECORDS")
	if glob == "" {
		glob = captureGlob("*.redundancy.p1.gpr")
	}
	for _, c := range loadCaptures(b, glob) {
		// The library now writes compact records (affine addresses,
		// uniform values), which the workers read in place.
		compact, err := rawstream.CompactStream(c.data)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"fresh", "long", "long-compact"} {
			frames, total := steadyFrames(b, c.data)
			switch mode {
			case "long":
				frames, total = longFrames(b, c.data)
			case "long-compact":
				frames, total = longFrames(b, compact)
			}
			benchRecords(b, strings.TrimSuffix(c.name, ".gpr")+"/"+mode, c.st, frames, total)
		}
	}
}

// benchRecords runs one of BenchmarkAnalyzeRecords's replays.
func benchRecords(b *testing.B, name string, st StructureSource, frames []rawstream.Frame, total uint64) {
	b.Run(name, func(b *testing.B) {
		cpu0 := cpuTime()
		level := uint8(0)
		for i := 0; i < b.N; i++ {
			a := New(Options{Job: "bench", Workers: 1, Structures: st})
			replayFrames(b, a, frames)
			level = a.Busy().MaxLevel
			a.Close()
		}
		cpu := cpuTime() - cpu0
		n := float64(total) * float64(b.N)
		b.ReportMetric(n/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
		b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/record")
		b.ReportMetric(float64(level), "spatial-level")
		b.ReportMetric(0, "ns/op")
	})
}

// longFrames is a capture's frames for the long replay: each launch's
// access frames again, before its end, until 2^20 records went through;
// total is their access records.
func longFrames(b *testing.B, data []byte) (frames []rawstream.Frame, total uint64) {
	all, _, recs := decodeAll(b, data)
	reps := max(1, (1<<20+recs-1)/max(recs, 1))
	accs := map[uint64][]rawstream.Frame{}
	for _, fr := range all {
		if x, ok := fr.(*rawstream.Access); ok {
			accs[x.LaunchID] = append(accs[x.LaunchID], fr)
		}
	}
	for _, fr := range all {
		switch x := fr.(type) {
		case *rawstream.Access:
			continue
		case *rawstream.KernelEnd:
			for r := uint64(0); r < reps; r++ {
				frames = append(frames, accs[x.LaunchID]...)
			}
			delete(accs, x.LaunchID)
		}
		frames = append(frames, fr)
	}
	return frames, recs * reps
}
