package analysis

import (
	"strings"
	"testing"

	"gpuprof/profile"
)

// A load strided by 32 bytes (32 sectors per warp access where 4 would do)
// and a coalesced store, each of the 7 instructions executed 100 times
// (warp-level counts) and sampled selected once: 700 issued instructions
// over 7 selected samples, one sample per 100 cycles of a warp's life. The
// add waits on the load with N long_scoreboard samples, so from the load's
// issue to the add's a warp spends (1 + 1 + N) samples / 100 executions ×
// 100 cycles = 2 + N cycles, at 1980 MHz. The kernel is memory bound (N of
// T = 7 + N samples wait on memory): coalescing saves the excess traffic's
// share of them (item 1), 32 × (3200 - 400) = 89,600 of the 115,200 bytes,
// and of that only the share f = min(1, elapsed / 398.4 ns) that DRAM
// round trips can account for (item 31):
//   - N = 392: 394 cycles, 199.0 ns, f = 0.4995: M = 392 × 89600/115200 ×
//     0.4995 = 152.3 of T = 399, 1.617× (the old model: 304.9, 4.240×);
//   - N = 2000: 1,011 ns, above the least DRAM round trip: f = 1, M =
//     1555.6 of T = 2007, 4.446× as before;
//   - without instruction counts: n/a;
//   - GPA's rules alone keep GPA's model, the load's cost (its sample and
//     the 392 waits) × (1 - 4/32): 344 of 399, 7.238×.
func TestCachedSectorsLeaveTheCoalescingEstimate(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		S2R R0, SR_TID.X {S1}
		IMAD.WIDE R2, R0, 0x20, R10 {S4}
		#line 4
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		IADD3 R5, R0, 0x1, RZ {S1}
		FADD R6, R4, R5 {B0 S4}
		STG.E desc[UR4][R12.64], R6 {S1}
		EXIT
	`)
	excess := 32.0 * (3200 - 400) / (32 * (3200 + 400))
	for _, c := range []struct {
		n       uint64
		counted bool
		gpa     bool
		f       float64 // 0: n/a
	}{
		{392, true, false, (2 + 392) / 1.98 / 398.4},
		{2000, true, false, 1},
		{392, false, false, 0},
		{392, true, true, 1},
	} {
		s := sampledKernel(t, m, "k", mod1)
		for off := uint64(0); off <= 0x60; off += 0x10 {
			s.stall(off, "selected", 1)
			if c.counted {
				s.p.Add(s.node[off], profile.InstExecuted, 100)
			}
		}
		s.stall(0x40, "long_scoreboard", c.n)
		s.p.Add(s.node[0x20], profile.MemWarpAccess, 100)
		s.p.Add(s.node[0x20], profile.MemSectors, 3200)
		s.p.Add(s.node[0x20], profile.MemLoads, 3200)
		s.p.Add(s.node[0x50], profile.MemWarpAccess, 100)
		s.p.Add(s.node[0x50], profile.MemSectors, 400)
		s.p.Add(s.node[0x50], profile.MemStores, 3200)
		a := findKind(t, s.advise(t, m, Options{GPAOnly: c.gpa}), OptGlobalAdjust)
		T := 7 + float64(c.n)
		if c.f == 0 {
			if a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "no instruction counts") {
				t.Errorf("N = %d without counts: speedup %v, n/a %q; want n/a", c.n, a.Speedup, a.SpeedupNA)
			}
			continue
		}
		want := StallElimination(T, float64(c.n)*excess*c.f)
		if c.gpa { // not memory bound under GPA's rules: the load's cost × (1 - 4/32)
			want = StallElimination(T, (1+float64(c.n))*(1-4.0/32))
		}
		if !approx(a.Speedup, want) {
			t.Errorf("N = %d, counted %v, GPA %v: speedup %v, want %v; %s", c.n, c.counted, c.gpa, a.Speedup, want, a.Evidence)
		}
		if note := strings.Contains(a.Evidence, "item 31"); note == c.gpa {
			t.Errorf("N = %d, GPA %v: item 31's note in the evidence %v; %s", c.n, c.gpa, note, a.Evidence)
		}
	}
}
