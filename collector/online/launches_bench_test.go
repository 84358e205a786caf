package online

import (
	"encoding/binary"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"gpuprof/collector/rawstream"
)

// manyLaunchesStream writes the stream of testdata/cuda/many_launches
// traced at P=50 K=1, as the library writes it (compact records): a
// five-point Jacobi step on a 1024 x 256 grid of floats launched n
// times, ping-ponging between two buffers, in blocks of 256 threads of
// which every 50th is traced (21 of 1,024); each traced warp loads its
// four neighbours and stores its point, or copies a border point.
// Values are x + y, the same at every step, as in the program.
func manyLaunchesStream(tb testing.TB, n int) []byte {
	const nx, ny, p = 1024, 256, 50
	st := newTestStream(tb, p, "_Z11jacobi_stepPKfPfii")
	put := st.put
	bufs := [2]uint64{0x7f0000000000, 0x7f0000200000}
	for i, b := range bufs {
		put(&rawstream.Alloc{AllocID: uint64(i + 1), Address: b, Size: nx * ny * 4, Memory: rawstream.AllocDevice, Host: []uint64{0x400000}})
	}
	val := func(x, y int) []byte {
		return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(x+y)))
	}
	const blocksX = nx / 256
	for l := 0; l < n; l++ {
		id := uint64(l + 1)
		in, out := bufs[l%2], bufs[(l+1)%2]
		put(&rawstream.Launch{LaunchID: id, FunctionID: 1, Grid: [3]uint32{blocksX, ny, 1}, Block: [3]uint32{256, 1, 1}, Instrumented: true, Host: []uint64{0x500000, 0x600000}})
		acc := &rawstream.Access{LaunchID: id}
		for blk := 0; blk < blocksX*ny; blk += p {
			bx, y := blk%blocksX, blk/blocksX
			for wp := 0; wp < 8; wp++ {
				x0 := bx*256 + wp*32
				record := func(pc uint64, flags rawstream.Flags, dx, dy int) {
					acc.AppendRecord(pc, uint32(blk), uint16(wp), rawstream.SpaceGlobal, flags, ^uint32(0), 4)
					for lane := 0; lane < 32; lane++ {
						x, yy := x0+lane+dx, y+dy
						base := in
						if flags == rawstream.FlagWrite {
							base = out
						}
						acc.AppendLane(base+uint64(4*(yy*nx+x)), val(x, yy))
					}
				}
				if y == 0 || y == ny-1 {
					record(0x10080, rawstream.FlagRead, 0, 0)
					record(0x10090, rawstream.FlagWrite, 0, 0)
				} else {
					// Interior warps (the x borders are one lane of a
					// warp, left in for brevity).
					record(0x10100, rawstream.FlagRead, -1, 0)
					record(0x10110, rawstream.FlagRead, 1, 0)
					record(0x10120, rawstream.FlagRead, 0, -1)
					record(0x10130, rawstream.FlagRead, 0, 1)
					record(0x10140, rawstream.FlagWrite, 0, 0)
				}
				acc.AppendRecord(0x103f0, uint32(blk), uint16(wp), rawstream.SpaceNone, rawstream.FlagBlockExit, ^uint32(0), 0)
			}
		}
		put(acc)
		put(&rawstream.KernelEnd{LaunchID: id, StartNS: 1, EndNS: 6000, BlocksTotal: blocksX * ny, BlocksSampled: uint32((blocksX*ny + p - 1) / p)})
	}
	compact, err := rawstream.CompactStream(st.end())
	if err != nil {
		tb.Fatal(err)
	}
	return compact
}

var (
	manyLaunchesOnce   sync.Once
	manyLaunchesFrames []rawstream.Frame
	manyLaunchesRecs   uint64
)

// BenchmarkManyLaunches analyses many_launches' stream at P=50 K=1 (2,500
// launches of about a thousand records each, every launch traced): what
// a launch costs the analysis beyond its records, with the H100's 16
// workers (their CPU time is what is measured; this machine's cores
// only interleave them). It reports CPU per launch and per record.
func BenchmarkManyLaunches(b *testing.B) {
	const launches = 2500
	manyLaunchesOnce.Do(func() {
		manyLaunchesFrames, _, manyLaunchesRecs = decodeAll(b, manyLaunchesStream(b, launches))
	})
	frames, recs := manyLaunchesFrames, manyLaunchesRecs
	for _, workers := range []int{1, 16} {
		b.Run(map[int]string{1: "workers=1", 16: "workers=16"}[workers], func(b *testing.B) {
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				a := New(Options{Job: "bench", Workers: workers})
				replayFrames(b, a, frames)
				a.Close()
			}
			cpu := float64((cpuTime() - cpu0).Nanoseconds()) / float64(b.N)
			b.ReportMetric(cpu/launches/1e3, "cpu-µs/launch")
			b.ReportMetric(cpu/float64(recs), "cpu-ns/record")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// liveManyLaunches is many_launches' stream as the library wrote it on the
// H100 (P=50 K=10, 2,500 launches of which 250 traced), compressed.
const liveManyLaunches = "../../testdata/overhead/h100-nonblocking/many_launches.p50k10.gpr.zst"

var (
	liveLaunchesOnce   sync.Once
	liveLaunchesFrames []rawstream.Frame
	liveLaunchesRecs   uint64
)

// BenchmarkLiveManyLaunches analyses the stream the library wrote for
// many_launches on the H100, with 16 workers: the generated stream of
// BenchmarkManyLaunches did not show what the live collector's profile
// did (warps' temporal tables growing from their smallest size).
func BenchmarkLiveManyLaunches(b *testing.B) {
	liveLaunchesOnce.Do(func() {
		z, err := os.ReadFile(liveManyLaunches)
		if err != nil {
			b.Fatal(err)
		}
		d, err := zstd.NewReader(nil)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		raw, err := d.DecodeAll(z, nil)
		if err != nil {
			b.Fatalf("%s: %v", liveManyLaunches, err)
		}
		liveLaunchesFrames, _, liveLaunchesRecs = decodeAll(b, raw)
	})
	frames, recs := liveLaunchesFrames, liveLaunchesRecs
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		a := New(Options{Job: "bench", Workers: 16})
		replayFrames(b, a, frames)
		a.Close()
	}
	cpu := float64((cpuTime() - cpu0).Nanoseconds()) / float64(b.N)
	b.ReportMetric(cpu/float64(recs), "cpu-ns/record")
	b.ReportMetric(cpu/1e6, "cpu-ms/op")
	b.ReportMetric(0, "ns/op")
}
