package reducer

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gpuprof/profile"
	"gpuprof/profile/chunk"
	"gpuprof/profile/proftest"
)

var (
	realOnce  sync.Once
	realItems [][]*profile.Profile // per rank: one data item and the done item
)

// realistic64 builds 64 realistic ranks once (generation is not measured).
func realistic64() [][]*profile.Profile {
	realOnce.Do(func() {
		realItems = make([][]*profile.Profile, 64)
		var wg sync.WaitGroup
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		for r := range realItems {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				realItems[r] = proftest.Rank("bench", 1, proftest.Realistic, int32(r), 1)
				<-sem
			}()
		}
		wg.Wait()
	})
	return realItems
}

// peakHeap runs f while sampling the live heap, and returns the peak above
// the heap before f, in MB.
func peakHeap(f func()) float64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		ss := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				metrics.Read(ss)
				if v := ss[0].Value.Uint64(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	f()
	close(stop)
	<-done
	metrics.Read(s)
	p := max(peak.Load(), s[0].Value.Uint64())
	if p < base {
		return 0
	}
	return float64(p-base) / (1 << 20)
}

// BenchmarkMerge64 is the reduction tree's work for 64 realistic ranks
// (about 20k contexts and 100k redundancy pairs each) with fan-in 8, on one
// core: 8 leaves each merge 8 ranks and encode their partial; the root
// decodes the 8 partials, merges them and encodes the final profile. It
// reports the total (s), the largest leaf's and the root's share, and the
// peak heap. The flat variant is one process merging all 64 ranks.
func BenchmarkMerge64(b *testing.B) {
	items := realistic64()
	b.Run("tree-k8", func(b *testing.B) {
		var total, leafMax, root time.Duration
		var peak float64
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				t0 := time.Now()
				var parts [][]byte
				var hdrs []partialHeader
				leafMax = 0
				for l := 0; l < 8; l++ {
					tl := time.Now()
					p := profile.New("bench")
					for r := l * 8; r < l*8+8; r++ {
						for _, it := range items[r] {
							if err := p.Merge(it); err != nil {
								b.Fatal(err)
							}
						}
					}
					chunks, h, err := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "bench"}, Node: uint32(l)}, p, 1<<30)
					if err != nil {
						b.Fatal(err)
					}
					parts, hdrs = append(parts, chunks[0]), append(hdrs, h)
					leafMax = max(leafMax, time.Since(tl))
				}
				tr := time.Now()
				var dec []*profile.Profile
				for i, c := range parts {
					h := hdrs[i]
					q, err := decodePartial(&h, c[partialFixed+len(h.Job):])
					if err != nil {
						b.Fatal(err)
					}
					dec = append(dec, q)
				}
				fin := profile.NewSized("bench", dec...)
				for _, q := range dec {
					if err := fin.Merge(q); err != nil {
						b.Fatal(err)
					}
				}
				if _, _, err := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "bench"}, Level: 1}, fin, 1<<30); err != nil {
					b.Fatal(err)
				}
				root = time.Since(tr)
				total = time.Since(t0)
			}))
		}
		b.ReportMetric(total.Seconds(), "s")
		b.ReportMetric(leafMax.Seconds(), "leaf-s")
		b.ReportMetric(root.Seconds(), "root-s")
		b.ReportMetric(peak, "heap-MB")
	})
	b.Run("flat", func(b *testing.B) {
		var total time.Duration
		var peak float64
		for b.Loop() {
			peak = max(peak, peakHeap(func() {
				t0 := time.Now()
				p := profile.New("bench")
				for _, rank := range items {
					for _, it := range rank {
						if err := p.Merge(it); err != nil {
							b.Fatal(err)
						}
					}
				}
				total = time.Since(t0)
			}))
		}
		b.ReportMetric(total.Seconds(), "s")
		b.ReportMetric(peak, "heap-MB")
	})
}

// BenchmarkTail64 is the work on the tail's critical path for 64 realistic
// ranks and fan-in 8, without the broker: "leaf" encodes a leaf's final
// state of 8 ranks as a partial; "root" decodes the 8 leaf partials in
// parallel (as they arrive together), merges them and encodes the final
// profile. The tail is about leaf + root plus publishing.
func BenchmarkTail64(b *testing.B) {
	items := realistic64()
	leaves := make([]*profile.Profile, 8)
	var parts [][]byte
	var hdrs []partialHeader
	for l := range leaves {
		p := profile.New("bench")
		for r := l * 8; r < l*8+8; r++ {
			for _, it := range items[r] {
				if err := p.Merge(it); err != nil {
					b.Fatal(err)
				}
			}
		}
		leaves[l] = p
		chunks, h, err := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "bench"}, Node: uint32(l)}, p, 1<<30)
		if err != nil {
			b.Fatal(err)
		}
		parts, hdrs = append(parts, chunks[0]), append(hdrs, h)
	}
	b.Run("leaf", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "bench"}}, leaves[0], 1<<30); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("root", func(b *testing.B) {
		var dec, merge, enc time.Duration
		for b.Loop() {
			t0 := time.Now()
			qs := make([]*profile.Profile, len(parts))
			var wg sync.WaitGroup
			for i := range parts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := hdrs[i]
					q, err := decodePartial(&h, parts[i][partialFixed+len(h.Job):])
					if err != nil {
						panic(err)
					}
					qs[i] = q
				}()
			}
			wg.Wait()
			t1 := time.Now()
			fin := profile.NewSized("bench", qs...)
			for _, err := range fin.MergeAll(qs) {
				if err != nil {
					b.Fatal(err)
				}
			}
			t2 := time.Now()
			if _, _, err := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "bench"}, Level: 1}, fin, 1<<30); err != nil {
				b.Fatal(err)
			}
			dec, merge, enc = dec+t1.Sub(t0), merge+t2.Sub(t1), enc+time.Since(t2)
		}
		n := float64(b.N)
		b.ReportMetric(dec.Seconds()/n, "decode-s")
		b.ReportMetric(merge.Seconds()/n, "merge-s")
		b.ReportMetric(enc.Seconds()/n, "encode-s")
	})
}
