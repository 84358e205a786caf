package online

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
)

// benchFrames decodes a generated rank stream once: every block traced,
// every launch instrumented, grids scaled up.
func benchFrames(b *testing.B, pattern synth.Pattern) ([]rawstream.Frame, []int64, uint64) {
	return decodeAll(b, synthStream(b, synth.Options{Seed: 7, BlockSampling: 1, KernelSampling: 1, Scale: 8, Iterations: 2, Pattern: pattern, FrameRecords: 16384}, 0))
}

// decodeAll decodes a whole raw stream: its frames, the offset after each,
// and its access records.
func decodeAll(tb testing.TB, stream []byte) (fs []rawstream.Frame, offs []int64, recs uint64) {
	d := rawstream.NewDecoder(bytes.NewReader(stream))
	for {
		f, err := d.Next()
		if err == io.EOF {
			return fs, offs, recs
		}
		if err != nil {
			tb.Fatal(err)
		}
		if a, ok := f.(*rawstream.Access); ok {
			recs += uint64(a.Count)
		}
		fs = append(fs, f)
		offs = append(offs, d.Offset())
	}
}

// BenchmarkAnalyze measures the online analysis in warp-level access
// records per second (each record carries up to 32 lane accesses), in total
// and per worker, for 1 worker up to GOMAXPROCS.
func BenchmarkAnalyze(b *testing.B) {
	probe := &SASS{NVDisasm: "-", Files: []string{"../../testdata/sass/probe/k.sass.txt"}}
	for _, pat := range []synth.Pattern{synth.PatternDefault, synth.PatternRandom} {
		fs, offs, recs := benchFrames(b, pat)
		b.Logf("values=%v: %d access records in %d frames", pat, recs, len(fs))
		var ws []int
		for w := 1; w < runtime.GOMAXPROCS(0); w *= 2 {
			ws = append(ws, w)
		}
		ws = append(ws, runtime.GOMAXPROCS(0))
		for _, w := range ws {
			b.Run(fmt.Sprintf("values=%v/workers=%d", pat, w), func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := cpuTime()
				var resolve, build time.Duration
				flush := func(a *Analyzer, seq uint32) {
					if _, err := a.Flush(seq); err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; i < b.N; i++ {
					a := New(Options{Job: "bench", Workers: w, Structures: probe})
					seq := uint32(0)
					for j, f := range fs {
						if err := a.Add(f, offs[j]); err != nil {
							b.Fatal(err)
						}
						// Items every 2^18 records, the collector's default batching.
						if a.Pending() >= 1<<18 {
							flush(a, seq)
							seq++
						}
					}
					flush(a, seq)
					a.Close()
					resolve += a.tResolve
					build += a.tBuild
				}
				cpu := cpuTime() - cpu0
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(recs)/float64(b.N), "cpu-ns/record")
				rps := float64(recs) * float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(rps, "records/s")
				b.ReportMetric(rps/float64(w), "records/s/core")
				// The serial parts: resolving spatial candidates (parallel over
				// partitions, but workers wait) and building items.
				b.ReportMetric(100*resolve.Seconds()/b.Elapsed().Seconds(), "%resolve")
				b.ReportMetric(100*build.Seconds()/b.Elapsed().Seconds(), "%build")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// cpuTime is the process's user+system CPU time: on a shared machine it
// measures the analysis's cost where wall time measures the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAnalyzeCaptures analyses the fully traced H100 captures of the
// test programs (testdata/captures/*.redundancy.p1.gpr) one after the
// other: real records, small streams.
func BenchmarkAnalyzeCaptures(b *testing.B) {
	type capture struct {
		fs   []rawstream.Frame
		offs []int64
		st   StructureSource
	}
	var caps []capture
	var recs uint64
	for _, tc := range loadCaptures(b, benchGlob()) {
		c := capture{st: tc.st}
		var n uint64
		c.fs, c.offs, n = decodeAll(b, tc.data)
		recs += n
		caps = append(caps, c)
	}
	b.Logf("%d captures, %d access records", len(caps), recs)
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for _, c := range caps {
					a := New(Options{Job: "bench", Workers: w, Structures: c.st})
					for j, f := range c.fs {
						if err := a.Add(f, c.offs[j]); err != nil {
							b.Fatal(err)
						}
					}
					a.Final()
					if _, err := a.Flush(0); err != nil {
						b.Fatal(err)
					}
					a.Close()
				}
			}
			rps := float64(recs) * float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rps, "records/s")
			b.ReportMetric(rps/float64(w), "records/s/core")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchGlob selects the captures BenchmarkAnalyzeCaptures reads:
// GPUPROF_BENCH_CAPTURES (a glob) or the fully traced ones.
func benchGlob() string {
	if g := os.Getenv("GPUPROF_BENCH_CAPTURES"); g != "" {
		return g
	}
	return captureGlob("*.redundancy.p1.gpr")
}

// BenchmarkAnalyzeSteady measures the analysis in its steady state on real
// records: each sampled H100 capture (P=50, K=10, the inputs of the
// overhead study's sampled runs, scaled down) is fed to one long-lived
// analyzer, its launches replayed under fresh launch ids until 2^20 records
// went through, with an item every 2^18 records as the collector makes
// them, so table growth and SASS parsing are paid once as in a live run.
// With one worker and with GOMAXPROCS (the default). The figures per core:
// records/cpu-s is records per second of the process's CPU time (all of
// the analysis: dispatch, workers, memory workers, resolution, items,
// garbage collection), records/busy-s records per second of the workers'
// and memory workers' busy time (Analyzer.Busy, as the collector's last
// log line counts it).
func BenchmarkAnalyzeSteady(b *testing.B) {
	for _, c := range loadCaptures(b, captureGlob("*.redundancy.p50k10.gpr")) {
		prog, st := strings.SplitN(c.name, ".", 2)[0], c.st
		frames, total := steadyFrames(b, c.data)
		for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/workers=%d", prog, w), func(b *testing.B) {
				benchReplay(b, frames, total, st, w)
			})
		}
	}
}

// benchReplay replays frames (total access records) into a fresh analyzer
// of w workers b.N times and reports what the replay benchmarks report:
// barriers (all and early), CPU nanoseconds a record, records per second
// of CPU, of the workers' busy time and of wall time, minor page faults a
// run (fresh memory is mapped at its first touch, which on a virtual
// machine costs more than the analysis around it), and the dispatch
// loop's waits at barriers and for items a run.
func benchReplay(b *testing.B, frames []rawstream.Frame, total uint64, st StructureSource, w int) {
	var barriers, early int
	var busy, wait, build time.Duration
	cpu0, faults0 := cpuTime(), minorFaults()
	for i := 0; i < b.N; i++ {
		a := New(Options{Job: "bench", Workers: w, Structures: st})
		replayFrames(b, a, frames)
		bz := a.Busy()
		barriers, early = bz.Barriers, bz.EarlyBarriers
		busy += bz.WorkerBusy + bz.MemBusy
		wait += bz.BarrierWait
		build += bz.Build
		a.Close()
	}
	cpu := cpuTime() - cpu0
	n := float64(total) * float64(b.N)
	b.ReportMetric(float64(barriers), "barriers")
	b.ReportMetric(float64(early), "early-barriers")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/record")
	b.ReportMetric(n/cpu.Seconds(), "records/cpu-s")
	b.ReportMetric(n/busy.Seconds(), "records/busy-s")
	b.ReportMetric(n/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(minorFaults()-faults0)/float64(b.N), "faults/run")
	b.ReportMetric(wait.Seconds()/float64(b.N), "barrier-s")
	b.ReportMetric(build.Seconds()/float64(b.N), "item-s")
	b.ReportMetric(0, "ns/op")
}

// minorFaults is the process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Minflt
}

// steadyFrames is a capture's frames for BenchmarkAnalyzeSteady: its
// set-up frames once, then its launches (with their records and ends)
// again under fresh launch ids until 2^20 records went through; total is
// their access records.
func steadyFrames(b *testing.B, data []byte) (frames []rawstream.Frame, total uint64) {
	all, _, recs := decodeAll(b, data)
	head, launches, maxID := replayParts(all)
	// The replays' frames, with launch ids moved past the previous
	// replay's.
	replays := max(1, (1<<20+recs-1)/max(recs, 1))
	frames = append([]rawstream.Frame(nil), head...)
	for r := uint64(0); r < replays; r++ {
		for _, fr := range launches {
			frames = append(frames, shifted(fr, r*(maxID+1)))
		}
	}
	return frames, recs * replays
}

// shifted is a copy of a launch's frame (LAUNCH, ACCESS or KERNEL_END)
// under launch id + shift, so a replay's launches do not meet the
// previous replay's.
func shifted(fr rawstream.Frame, shift uint64) rawstream.Frame {
	switch x := fr.(type) {
	case *rawstream.Launch:
		c := *x
		c.LaunchID += shift
		return &c
	case *rawstream.Access:
		c := *x
		c.LaunchID += shift
		return &c
	case *rawstream.KernelEnd:
		c := *x
		c.LaunchID += shift
		return &c
	}
	return fr
}

// replayParts splits a capture's frames for replaying its launches again:
// the set-up frames (kept once), the launches' frames (LAUNCH, ACCESS,
// KERNEL_END) and the highest launch id. Frees and the end are dropped:
// allocations stay live across the replays.
func replayParts(all []rawstream.Frame) (head, launches []rawstream.Frame, maxID uint64) {
	for _, fr := range all {
		switch x := fr.(type) {
		case *rawstream.Launch:
			maxID = max(maxID, x.LaunchID)
			launches = append(launches, fr)
		case *rawstream.Access, *rawstream.KernelEnd:
			launches = append(launches, fr)
		case *rawstream.Free, *rawstream.End:
		default:
			head = append(head, fr)
		}
	}
	return head, launches, maxID
}

// replayFrames adds frames to a, flushing every 2^18 pending records as a
// live collector does, then finishes it.
func replayFrames(b *testing.B, a *Analyzer, frames []rawstream.Frame) {
	seq := uint32(0)
	for j, fr := range frames {
		if err := a.Add(fr, int64(j)); err != nil {
			b.Fatal(err)
		}
		if a.Pending() >= 1<<18 {
			if _, err := a.Flush(seq); err != nil {
				b.Fatal(err)
			}
			seq++
		}
	}
	a.Final()
	if _, err := a.Flush(seq); err != nil {
		b.Fatal(err)
	}
}
