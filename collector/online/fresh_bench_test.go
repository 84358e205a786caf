package online

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"gpuprof/collector/rawstream"
)

// BenchmarkAnalyzeFresh measures the analysis where every access is new:
// a pointer chase through a table larger than the caches (stall_memory's
// shape; hash tables and graph walks have it too), whose addresses and
// values never repeat, so every lane takes a new temporal slot and a new
// spatial value. The committed capture is small (16 chain steps, a 16 MiB
// table, a block or two per launch); the live overhead runs trace about
// 20 warps of about a thousand records each per launch (256 steps) into a
// 64 MiB table. The stream is widened to that shape: the table's
// allocation is moved and grown to 64 MiB, each traced block is repeated
// as blocks further along the sampling period, each load of the table is
// repeated as the steps of a longer chase, and the table's lanes get
// fresh addresses and values from a hash of their position; the launches
// are replayed under fresh ids until about 2^19 records went through.
// With one worker, GOMAXPROCS and 16 (the H100 machine's): the tables a
// worker holds, and so the memory the analysis maps, grow with them.
func BenchmarkAnalyzeFresh(b *testing.B) {
	caps := loadCaptures(b, captureGlob("stall_memory.redundancy.p50k10.gpr"))
	frames, total := freshFrames(b, caps[0].data, 4, 16)
	b.Logf("%d access records", total)
	for _, w := range []int{1, runtime.GOMAXPROCS(0), 16} {
		b.Run(fmt.Sprintf("workers=%d", w), func(b *testing.B) {
			benchReplay(b, frames, total, caps[0].st, w)
		})
	}
}

// freshFrames widens a sampled capture as BenchmarkAnalyzeFresh says:
// each traced block becomes grow blocks, each record that reads the
// largest allocation becomes steps records, and those lanes get fresh
// addresses (in the moved, 64 MiB allocation) and fresh 24-bit values.
func freshFrames(tb testing.TB, data []byte, grow uint32, steps int) (frames []rawstream.Frame, total uint64) {
	const tableBytes = 64 << 20
	const newBase = 0x7f4000000000
	all, _, _ := decodeAll(tb, data)
	var big *rawstream.Alloc
	for _, fr := range all {
		if a, ok := fr.(*rawstream.Alloc); ok && (big == nil || a.Size > big.Size) {
			big = a
		}
	}
	if big == nil {
		tb.Fatal("capture has no allocation")
	}
	var p uint32 = 50
	head, launches, maxID := replayParts(all)
	for i, fr := range head {
		switch x := fr.(type) {
		case *rawstream.Hello:
			p = x.BlockSampling
		case *rawstream.Alloc:
			if x == big {
				c := *x
				c.Address, c.Size = newBase, tableBytes
				head[i] = &c
			}
		}
	}
	frames = append(frames, head...)
	var seq uint64
	for r := uint64(0); total < 1<<19; r++ {
		shift := r * (maxID + 1)
		for _, fr := range launches {
			switch x := fr.(type) {
			case *rawstream.Launch:
				c := shifted(x, shift).(*rawstream.Launch)
				c.Grid[0] = p * grow
				frames = append(frames, c)
			case *rawstream.KernelEnd:
				c := shifted(x, shift).(*rawstream.KernelEnd)
				c.BlocksTotal, c.BlocksSampled, c.Records = p*grow, x.BlocksSampled*grow, x.Records*uint64(grow)
				frames = append(frames, c)
			case *rawstream.Access:
				out := &rawstream.Access{LaunchID: x.LaunchID + shift}
				for g := uint32(0); g < grow; g++ {
					it := x.Records()
					for it.Next() {
						rec := it.Record()
						chase := false
						if rec.NumLanes() > 0 {
							addr, val := rec.Lane(0)
							chase = addr >= big.Address && addr < big.Address+big.Size && len(val) == 4
						}
						for k := 0; k < steps && (k == 0 || chase); k++ {
							out.AppendRecord(rec.PC, rec.Block+g*p, rec.Warp, rec.Space, rec.Flags, rec.Active, rec.Size)
							for i := 0; i < rec.NumLanes(); i++ {
								addr, val := rec.Lane(i)
								if addr >= big.Address && addr < big.Address+big.Size && len(val) == 4 {
									seq++
									h := splitmix(seq)
									addr = newBase + (h%(tableBytes/4))*4
									var v [4]byte
									binary.LittleEndian.PutUint32(v[:], uint32(h>>40)&(1<<24-1))
									out.AppendLane(addr, v[:])
									continue
								}
								out.AppendLane(addr, val)
							}
						}
					}
					if err := it.Err(); err != nil {
						tb.Fatal(err)
					}
				}
				total += uint64(out.Count)
				frames = append(frames, out)
			}
		}
	}
	return frames, total
}

// splitmix is splitmix64: fresh, well-spread addresses and values.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
