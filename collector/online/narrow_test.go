package online

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gpuprof/collector/rawstream"
)

// varyingLaunchesStream alternates, in one calling context, launches of
// one record a warp with launches of the same grid whose warps bring
// hundreds, their warps showing up one frame after another: the small
// launches make the next one narrow, and the large ones outgrow their
// span while warps are still to come. Few addresses and values, so that
// temporal and spatial redundancy collide across warps.
func varyingLaunchesStream(t testing.TB, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 5))
	st := newTestStream(t, 1, "_Z1kv")
	put := st.put
	const base = 0x100000
	put(&rawstream.Alloc{AllocID: 1, Address: base, Size: 4096, Memory: rawstream.AllocDevice, Host: []uint64{0x400000}})
	const blocks, warps = 8, 2 // 16 warps of 32 threads
	record := func(acc *rawstream.Access, blk uint32, wp uint16) {
		flags := rawstream.FlagRead
		if rng.IntN(3) == 0 {
			flags = rawstream.FlagWrite
		}
		acc.AppendRecord(0x10000+uint64(16*rng.IntN(6)), blk, wp, rawstream.SpaceGlobal, flags, ^uint32(0), 4)
		for l := 0; l < 32; l++ {
			acc.AppendLane(base+uint64(4*rng.IntN(64)), []byte{byte(rng.IntN(3)), 0, 0, 0})
		}
	}
	for l := 0; l < 6; l++ {
		id := uint64(l + 1)
		put(&rawstream.Launch{LaunchID: id, FunctionID: 1, Grid: [3]uint32{blocks, 1, 1}, Block: [3]uint32{64, 1, 1}, Instrumented: true, Host: []uint64{0x500000}})
		per := 1
		if l%2 == 1 {
			per = 300
		}
		// Warp i shows up in frame i and brings per/8 records a frame
		// from then on, until it brought per.
		left := make([]int, blocks*warps)
		for i := range left {
			left[i] = per
		}
		for frame := 0; ; frame++ {
			acc := &rawstream.Access{LaunchID: id}
			for i := range left {
				for n := 0; n < max(1, per/8) && i <= frame && left[i] > 0; n++ {
					record(acc, uint32(i/warps), uint16(i%warps))
					left[i]--
				}
			}
			if acc.Count == 0 {
				break
			}
			put(acc)
		}
		put(&rawstream.KernelEnd{LaunchID: id, StartNS: 1, EndNS: 100, BlocksTotal: blocks, BlocksSampled: blocks})
	}
	return st.end()
}

// Launches that grow past their span widen it mid-launch, and the counts
// equal the reference's for any worker count.
func TestNarrowLaunchesWidenExactly(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		stream := varyingLaunchesStream(t, seed)
		// The second launch starts narrow and widens.
		frames, _, _ := decodeAll(t, stream)
		a := New(Options{Job: "t", Workers: 3})
		spans := map[uint64][2]int{}
		for j, fr := range frames {
			if err := a.Add(fr, int64(j)); err != nil {
				t.Fatal(err)
			}
			if x, ok := fr.(*rawstream.Access); ok {
				if l := a.launches[x.LaunchID]; l != nil {
					s := spans[x.LaunchID]
					if s[0] == 0 {
						s[0] = l.span
					}
					s[1] = l.span
					spans[x.LaunchID] = s
				}
			}
		}
		a.Close()
		if s := spans[2]; s[0] != 1 || s[1] <= s[0] {
			t.Fatalf("seed %d: launch 2's span went %d -> %d, want 1 and wider", seed, s[0], s[1])
		}
		ref := runReference(t, stream, nil)
		for _, r := range runs {
			compareRedundant(t, fmt.Sprintf("seed=%d/workers=%d/flush=%d", seed, r.workers, r.flush), ref, analyse(t, stream, r.workers, r.flush, nil))
		}
	}
}
