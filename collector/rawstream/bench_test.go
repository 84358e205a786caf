package rawstream_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector/rawstream"
)

// BenchmarkDecode decodes the sampled H100 captures (the collector's
// reader does this on one goroutine for every rank's stream): nanoseconds
// and bytes per access record, with every record validated; as recorded
// (plain) and re-encoded as the library now writes them (compact).
func BenchmarkDecode(b *testing.B) {
	plain, compact := sampledCaptures(b)
	for _, c := range []struct {
		name    string
		streams [][]byte
	}{{"plain", plain}, {"compact", compact}} {
		b.Run(c.name, func(b *testing.B) {
			var size int64
			for _, s := range c.streams {
				size += int64(len(s))
			}
			b.SetBytes(size)
			var recs uint64
			for i := 0; i < b.N; i++ {
				recs = 0
				for _, s := range c.streams {
					recs += decodeRecords(b, s)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(recs)/float64(b.N), "ns/record")
		})
	}
}

// BenchmarkExpand is what an analysis worker pays to read every record of
// the compact captures with its lanes (expanding compact ones), against
// the plain captures' zero-copy lanes.
func BenchmarkExpand(b *testing.B) {
	plain, compact := sampledCaptures(b)
	for _, c := range []struct {
		name    string
		streams [][]byte
	}{{"plain", plain}, {"compact", compact}} {
		frames, recs := accessFrames(b, c.streams)
		b.Run(c.name, func(b *testing.B) {
			var lanes int
			for i := 0; i < b.N; i++ {
				for _, a := range frames {
					it := a.Records()
					for it.Next() {
						lanes += len(it.Record().Lanes)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(recs)/float64(b.N), "ns/record")
		})
	}
}

// accessFrames decodes the streams' access frames and counts their records.
func accessFrames(b *testing.B, streams [][]byte) (frames []*rawstream.Access, recs int) {
	for _, s := range streams {
		d := rawstream.NewDecoder(bytes.NewReader(s))
		for {
			f, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if a, ok := f.(*rawstream.Access); ok {
				frames = append(frames, a)
				recs += int(a.Count)
			}
		}
	}
	return frames, recs
}

// sampledCaptures returns the sampled H100 captures as recorded (plain)
// and re-encoded compactly.
func sampledCaptures(b *testing.B) (plain, compact [][]byte) {
	files, _ := filepath.Glob("../../testdata/captures/*.redundancy.p50k10.gpr")
	if len(files) == 0 {
		b.Skip("no captures")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		plain = append(plain, data)
		compact = append(compact, compactStream(b, data))
	}
	return plain, compact
}

// decodeRecords decodes a stream and returns its access records.
func decodeRecords(b *testing.B, s []byte) uint64 {
	var recs uint64
	d := rawstream.NewDecoder(bytes.NewReader(s))
	for {
		f, err := d.Next()
		if err == io.EOF {
			return recs
		}
		if err != nil {
			b.Fatal(err)
		}
		if a, ok := f.(*rawstream.Access); ok {
			recs += uint64(a.Count)
		}
	}
}

// compactStream re-encodes a stream's access frames compactly.
func compactStream(b *testing.B, data []byte) []byte {
	c, err := rawstream.CompactStream(data)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkHeaders is the dispatch loop's walk over a frame's record
// headers, on frames copied until they outgrow the caches (256 MiB), as
// the live stream's 1-2 GB do: every header is a first touch.
func BenchmarkHeaders(b *testing.B) {
	_, compact := sampledCaptures(b)
	var frames []*rawstream.Access
	var recs, size int
	for size < 256<<20 {
		fs, n := accessFrames(b, compact)
		for _, a := range fs { // fresh memory for every copy
			c := *a
			c.Data = bytes.Clone(a.Data)
			frames = append(frames, &c)
			size += len(a.Data)
		}
		recs += n
	}
	b.ResetTimer()
	var x uint64
	for i := 0; i < b.N; i++ {
		for _, f := range frames {
			it := f.RecordHeaders()
			for it.Next() {
				r := it.Record()
				x += uint64(r.Block) ^ uint64(r.Active)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(recs)/float64(b.N), "ns/record")
	b.ReportMetric(float64(x&1), "sink")
}
