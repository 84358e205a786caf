package analysis

import (
	"strings"
	"testing"

	"gpuprof/profile"
)

// A tree reduction over a block of 256 threads (8 warps): the loop halves
// s from 128 to 1 (8 passes), the threads below s add, and every pass ends
// at the barrier. The add runs on 4, 2, 1, 1, 1, 1, 1, 1 warps: 12
// executions, each 12 samples (the LDS pair, the FADD's wait, the STS);
// the loop control costs 1 sample per execution on all 64.
//
// T = 1120: work W = 496 (prologue 16, header 128, guarded 144, latch
// 192, epilogue 16) and B = 624 barrier waits (sampled at the SHF after
// the BAR). Eq. 3 gives 1120/496. With the counts, P = 64/8 = 8 passes;
// the slowest warp's path is the latch (3 × 8), the header (2 × 8) and the
// guarded add ((1 + 1 + 9 + 1) × 8, 8 passes > 12/8 per warp): 136, so
// F = 8 × 136 = 1088 and W + B - max(W, F) = 32 samples can go:
// 1120/1088. Without the counts: n/a.
func TestWarpBalanceStructural(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		S2R R0, SR_TID.X {S1}
		MOV R3, 0x80 {S1}
		.L_x_1:
		#line 4
		ISETP.GE.AND P0, PT, R0, R3, PT {S1}
		@P0 BRA `+"`(.L_x_2)"+` {S1}
		LDS R4, [R1] {S1}
		LDS R5, [R2] {W0 S1}
		FADD R4, R4, R5 {B0 S4}
		STS [R1], R4 {S1}
		.L_x_2:
		#line 5
		BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
		SHF.R.U32.HI R3, RZ, 0x1, R3 {S1}
		ISETP.NE.AND P1, PT, R3, RZ, PT {S4}
		@P1 BRA `+"`(.L_x_1)"+` {S1}
		#line 6
		STG.E desc[UR4][R10.64], R4 {S1}
		EXIT
	`)
	for _, counted := range []bool{true, false} {
		s := sampledKernel(t, m, "k", mod1)
		s.launches(1, 256, 1, 32)
		for _, x := range []struct {
			off, n uint64
			e      uint64 // samples per execution
		}{{0x00, 8, 1}, {0x10, 8, 1}, {0x20, 64, 1}, {0x30, 64, 1}, {0x40, 12, 1}, {0x50, 12, 1}, {0x60, 12, 9}, {0x70, 12, 1},
			{0x80, 64, 0}, {0x90, 64, 1}, {0xa0, 64, 1}, {0xb0, 64, 1}, {0xc0, 8, 1}, {0xd0, 8, 1}} {
			if x.e > 0 {
				s.stall(x.off, "selected", x.n)
				if x.e > 1 {
					s.stall(x.off, "short_scoreboard", x.n*(x.e-1))
				}
			}
			if counted {
				s.p.Add(s.node[x.off], profile.InstExecuted, x.n)
			}
		}
		s.stall(0x90, "barrier", 624)
		a := findKind(t, s.advise(t, m, Options{}), OptWarpBalance)
		if counted && (!approx(a.Speedup, 1120.0/1088) || !strings.Contains(a.Evidence, "F = 1088")) {
			t.Errorf("counted: speedup %v, want 1120/1088; %s", a.Speedup, a.Evidence)
		}
		if !counted && a.SpeedupNA == "" {
			t.Errorf("not counted: speedup %v, want n/a; %s", a.Speedup, a.Evidence)
		}
	}
}

// One warp fills a tile alone (64 iterations of 10 samples each) while the
// block's other 7 warps wait at the barrier: B = 7 × 640 = 4480. That work
// can be spread: P = 1 pass, the loop lies outside any loop with the
// barrier, so a warp's weight for it is its average, 64/8 = 8 executions
// per warp: path 3 + 8 × 10 = 83, F = 8 × 83 = 664 = W, and all of B can
// go, as eq. 3 says: T = 664 + 4480 + 24 after the barrier, 5168/688.
func TestWarpBalanceSpreadable(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		S2R R0, SR_TID.X {S1}
		ISETP.GE.AND P0, PT, R0, 0x20, PT {S1}
		@P0 BRA `+"`(.L_x_2)"+` {S1}
		.L_x_1:
		#line 4
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		STS [R6], R4 {B0 S1}
		IADD3 R2, P1, R2, 0x4, RZ {S1}
		ISETP.NE.AND P1, PT, R2, R8, PT {S4}
		@P1 BRA `+"`(.L_x_1)"+` {S1}
		.L_x_2:
		#line 5
		BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
		LDS R5, [R7] {S1}
		STG.E desc[UR4][R10.64], R5 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.launches(1, 256, 1, 32)
	for _, x := range []struct{ off, n, samples uint64 }{
		{0x00, 8, 8}, {0x10, 8, 8}, {0x20, 8, 8},
		{0x30, 64, 64}, {0x40, 64, 6 * 64}, {0x50, 64, 64}, {0x60, 64, 64}, {0x70, 64, 64},
		{0x80, 8, 0}, {0x90, 8, 8}, {0xa0, 8, 8}, {0xb0, 8, 8},
	} {
		if x.samples > 0 {
			s.stall(x.off, "selected", x.samples)
		}
		s.p.Add(s.node[x.off], profile.InstExecuted, x.n)
	}
	s.stall(0x90, "barrier", 4480)
	a := findKind(t, s.advise(t, m, Options{}), OptWarpBalance)
	if !approx(a.Speedup, 5168.0/688) || !strings.Contains(a.Evidence, "F = 664") {
		t.Errorf("speedup %v, want 5168/688; %s", a.Speedup, a.Evidence)
	}
}
