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
// and bytes per access record, with every record validated.
func BenchmarkDecode(b *testing.B) {
	files, _ := filepath.Glob("../../testdata/captures/*.redundancy.p50k10.gpr")
	if len(files) == 0 {
		b.Skip("no captures")
	}
	var streams [][]byte
	var size int64
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		streams = append(streams, data)
		size += int64(len(data))
	}
	b.SetBytes(size)
	var recs uint64
	for i := 0; i < b.N; i++ {
		recs = 0
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
					recs += uint64(a.Count)
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(recs)/float64(b.N), "ns/record")
}
