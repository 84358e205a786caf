package analysis

import (
	"math"
	"strings"
	"testing"
)

// A loop's add waits on a 128-bit and a 64-bit load: M = 60 latency
// samples of T = 200, A = 140 active ones (20 selected, 120 not
// selected), so code reordering hides all 60 (eq. 6): 200/140. Moving both
// loads keeps their 4 + 2 registers live longer. With 24 registers per
// thread, 30 still allow 8 blocks of 256 threads per SM (1,024 registers
// a warp, 64 warps): 200/140. With 32, 38 take 1,280 a warp: 51 warps, 6
// blocks (was 8), 12 warps per scheduler instead of 16; at the issue
// probability the hiding leaves, 20/200 × 200/140 = 1/7, eq. 9-10 give
// (1 - (6/7)^12) / (1 - (6/7)^16) = 0.921 of the issue rate: 200/140 ×
// 0.921 = 1.316. Without the kernel's registers per thread: n/a. Loop
// unrolling, whose loop scope holds the same waits and work, is charged
// alike, but unrolled 4 times it hides 3/4 of the 60 waits (item 43):
// 200/155, and 75% of the waits keep 5 more registers live (4.5 rounded
// up): 29 still allow 8 blocks; 37 take 1,280 a warp, 6 blocks, and at
// the issue probability 20/155 eq. 9-10 give (1 - (1-20/155)^12) / (1 -
// (1-20/155)^16) of the issue rate.
func TestMovedLoadsCostOccupancy(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		MOV R12, RZ {S1}
		.L_x_1:
		#line 4
		LDG.E.128 R4, desc[UR4][R2.64] {W0 S1}
		LDG.E.64 R8, desc[UR4][R16.64] {W1 S1}
		IADD3 R2, P0, R2, 0x40, RZ {S1}
		IADD3 R16, P1, R16, 0x20, RZ {S1}
		FADD R12, R4, R8 {B01 S4}
		ISETP.NE.AND P2, PT, R2, R18, PT {S4}
		@P2 BRA `+"`(.L_x_1)"+` {S1}
		#line 6
		STG.E desc[UR4][R14.64], R12 {S1}
		EXIT
	`)
	hide := 200.0 / 140
	lost := (1 - math.Pow(6.0/7, 12)) / (1 - math.Pow(6.0/7, 16))
	hideU := 200.0 / 155
	lostU := (1 - math.Pow(1-20.0/155, 12)) / (1 - math.Pow(1-20.0/155, 16))
	for _, c := range []struct {
		regs         uint64 // 0: no launch attributes
		want, wantLU float64
	}{{24, hide, hideU}, {32, hide * lost, hideU * lostU}, {0, 0, 0}} {
		s := sampledKernel(t, m, "k", mod1)
		for off := uint64(0x10); off <= 0x40; off += 0x10 {
			s.stall(off, "selected", 5)
			s.stall(off, "not_selected", 30)
		}
		s.stall(0x50, "long_scoreboard", 60)
		if c.regs > 0 {
			s.launches(1, 256, 132*8*4, c.regs)
		}
		as := s.advise(t, m, Options{})
		for _, kind := range []string{OptCodeReordering, OptLoopUnrolling} {
			a := findKind(t, as, kind)
			want, regs := c.want, "6 more registers"
			if kind == OptLoopUnrolling {
				want, regs = c.wantLU, "5 more registers"
			}
			if c.want == 0 {
				if a.SpeedupNA == "" || !strings.Contains(a.SpeedupNA, regs) {
					t.Errorf("%s without registers per thread: %v (%q), want n/a", kind, a.Speedup, a.SpeedupNA)
				}
				continue
			}
			if !approx(a.Speedup, want) || !strings.Contains(a.Evidence, "item 29") {
				t.Errorf("%s, %d registers: %v, want %v; %s", kind, c.regs, a.Speedup, want, a.Evidence)
			}
		}
	}
}
