package sass

import (
	"os"
	"testing"
)

func benchData(b *testing.B, name string) []byte {
	data, err := os.ReadFile(td + name)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkParse reports parse throughput (MB/s) on the real samples.
func BenchmarkParse(b *testing.B) {
	for _, s := range []string{"probe/k.sass.txt", "probe/k.hex.txt", "cflow/c.sm90.sass.txt", "cflow/c.sm90.hex.txt", "cflow/c.sm100.hex.txt"} {
		data := benchData(b, s)
		b.Run(s, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAnalyze measures CFG, loops, def-use and access kinds of every
// function, per instruction.
func BenchmarkAnalyze(b *testing.B) {
	for _, s := range []string{"probe/k.hex.txt", "cflow/c.sm90.hex.txt"} {
		data := benchData(b, s)
		m0, _ := Parse(data)
		n := 0
		for _, f := range m0.Functions {
			n += len(f.Insts)
		}
		b.Run(s, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				m, _ := Parse(data)
				b.StartTimer()
				for _, f := range m.Functions {
					f.AccessKinds()
				}
				m.Structure()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/inst")
		})
	}
}

func BenchmarkEncodeDecode(b *testing.B) {
	m, _ := Parse(benchData(b, "cflow/c.sm90.hex.txt"))
	enc := m.Encode()
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			m.Encode()
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(len(enc)), "bytes")
}

func BenchmarkLookup(b *testing.B) {
	m, _ := Parse(benchData(b, "cflow/c.sm90.hex.txt"))
	s := m.Structure()
	type pc struct {
		fn  string
		off uint64
	}
	var pcs []pc
	for _, f := range m.Functions {
		for i := range f.Insts {
			pcs = append(pcs, pc{f.Name, f.Insts[i].Offset - f.Start})
		}
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		p := pcs[i%len(pcs)]
		if _, ok := s.Lookup(p.fn, p.off); !ok {
			b.Fatal(p)
		}
		i++
	}
}

func BenchmarkParseCubin(b *testing.B) {
	data := benchData(b, "cflow/c.sm90.cubin")
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c, err := ParseCubin(data)
		if err != nil {
			b.Fatal(err)
		}
		c.Module()
	}
}
