package online

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"

	"gpuprof/collector/rawstream"
)

// BenchmarkMemStats runs the bank-conflict and reuse-distance workers
// alone over the fully traced H100 captures' access records, to set their
// cost beside BenchmarkAnalyzeCaptures (which includes them).
func BenchmarkMemStats(b *testing.B) {
	type item struct {
		acc *rawstream.Access
		l   *launchInfo
	}
	var items []item
	var recs uint64
	for _, c := range loadCaptures(b, captureGlob("*.redundancy.p1.gpr")) {
		d := rawstream.NewDecoder(bytes.NewReader(c.data))
		ls := map[uint64]*launchInfo{}
		fn := &funcInfo{}
		snap := &funcSnap{}
		for seq := uint32(1); ; {
			fr, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			switch x := fr.(type) {
			case *rawstream.Launch:
				ls[x.LaunchID] = &launchInfo{seq: seq, fn: fn, funcs: snap, warps: int((x.Block[0]*x.Block[1]*x.Block[2] + 31) / 32)}
				seq++
			case *rawstream.Access:
				if l := ls[x.LaunchID]; l != nil {
					items = append(items, item{x, l})
					recs += uint64(x.Count)
				}
			}
		}
	}
	for _, c := range []struct{ w, period uint32 }{{1, 1}, {1, DefaultReuseSampling}, {uint32(runtime.GOMAXPROCS(0)), 1}, {uint32(runtime.GOMAXPROCS(0)), DefaultReuseSampling}} {
		w := int(c.w)
		b.Run(fmt.Sprintf("workers=%d/reuse-sampling=%d", w, c.period), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				var s memStats
				s.start(w, 16)
				for _, it := range items {
					m := s.split()
					r := it.acc.Records()
					for {
						off := r.Offset()
						if !r.Next() {
							break
						}
						// Blocks in order stand for their units.
						unit := r.Record().Block
						if unit%c.period == 0 {
							unit = unit/c.period | trackedBlock
						}
						m.add(r.Record(), uint32(off), unit, false)
					}
					s.access(it.acc, it.l, m)
				}
				s.collect()
				s.stop()
			}
			rps := float64(recs) * float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rps, "records/s")
			b.ReportMetric(rps/float64(w), "records/s/core")
			b.ReportMetric(0, "ns/op")
		})
	}
}
