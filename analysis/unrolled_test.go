package analysis

import (
	"strings"
	"testing"

	"gpuprof/sass"
)

// A dot product's inner loop as nvcc unrolls it 4 times, with the pointer
// advanced by the span of its four loads (a), or the address computed from
// an index advanced by 4 (b); a walk over 40-byte structures reading the
// fields at 0x0, 0x4 and 0x24, unrolled 4 times: the offsets are that
// pattern at 0x0, 0x28, 0x50 and 0x78, the pointer advances by 0xa0 (c);
// the same walk not unrolled (d, advancing by 0x28); a 5-point stencil
// walking rows (e) reads consecutive words too, but advances by a pitch in
// a register: no unroll.
func TestCompilerUnroll(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"pointer", `
			MOV R9, RZ
		.L_x_0:
			LDG.E R4, desc[UR4][R2.64]
			LDG.E R5, desc[UR4][R2.64+0x4]
			LDG.E R6, desc[UR4][R2.64+0x8]
			LDG.E R7, desc[UR4][R2.64+0xc]
			FFMA R9, R4, R4, R9
			FFMA R9, R5, R5, R9
			FFMA R9, R6, R6, R9
			FFMA R9, R7, R7, R9
			IADD3 R2, P0, R2, 0x10, RZ
			IADD3.X R3, RZ, R3, RZ, P0, !PT
			ISETP.NE.AND P1, PT, R2, R10, PT
			@P1 BRA ` + "`(.L_x_0)" + `
			EXIT`, 4},
		{"index", `
			MOV R11, RZ
		.L_x_0:
			IMAD.WIDE R2, R11, 0x4, R12
			LDG.E R4, desc[UR4][R2.64]
			LDG.E R5, desc[UR4][R2.64+0x4]
			LDG.E R6, desc[UR4][R2.64+0x8]
			LDG.E R7, desc[UR4][R2.64+0xc]
			FFMA R9, R4, R5, R9
			FFMA R9, R6, R7, R9
			IADD3 R11, R11, 0x4, RZ
			ISETP.NE.AND P1, PT, R11, R10, PT
			@P1 BRA ` + "`(.L_x_0)" + `
			EXIT`, 4},
		{"structures", `
			MOV R9, RZ
		.L_x_0:
			LDG.E R4, desc[UR4][R2.64]
			LDG.E R5, desc[UR4][R2.64+0x4]
			LDG.E R6, desc[UR4][R2.64+0x24]
			LDG.E R7, desc[UR4][R2.64+0x28]
			LDG.E R8, desc[UR4][R2.64+0x2c]
			LDG.E R16, desc[UR4][R2.64+0x4c]
			LDG.E R17, desc[UR4][R2.64+0x50]
			LDG.E R18, desc[UR4][R2.64+0x54]
			LDG.E R19, desc[UR4][R2.64+0x74]
			LDG.E R20, desc[UR4][R2.64+0x78]
			LDG.E R21, desc[UR4][R2.64+0x7c]
			LDG.E R22, desc[UR4][R2.64+0x9c]
			FFMA R9, R4, R5, R9
			FFMA R9, R6, R7, R9
			FFMA R9, R8, R16, R9
			FFMA R9, R17, R18, R9
			FFMA R9, R19, R20, R9
			FFMA R9, R21, R22, R9
			IADD3 R2, P0, R2, 0xa0, RZ
			IADD3.X R3, RZ, R3, RZ, P0, !PT
			ISETP.NE.AND P1, PT, R2, R10, PT
			@P1 BRA ` + "`(.L_x_0)" + `
			EXIT`, 4},
		{"one structure", `
			MOV R9, RZ
		.L_x_0:
			LDG.E R4, desc[UR4][R2.64]
			LDG.E R5, desc[UR4][R2.64+0x4]
			LDG.E R6, desc[UR4][R2.64+0x24]
			FFMA R9, R4, R5, R9
			FFMA R9, R6, R6, R9
			IADD3 R2, P0, R2, 0x28, RZ
			IADD3.X R3, RZ, R3, RZ, P0, !PT
			ISETP.NE.AND P1, PT, R2, R10, PT
			@P1 BRA ` + "`(.L_x_0)" + `
			EXIT`, 1},
		{"stencil rows", `
		.L_x_0:
			LDG.E R4, desc[UR4][R2.64+-0x8]
			LDG.E R5, desc[UR4][R2.64+-0x4]
			LDG.E R6, desc[UR4][R2.64]
			LDG.E R7, desc[UR4][R2.64+0x4]
			LDG.E R8, desc[UR4][R2.64+0x8]
			FADD R9, R4, R5
			FADD R9, R9, R6
			FADD R9, R9, R7
			FADD R9, R9, R8
			IADD3 R2, P0, R2, R14, RZ
			IADD3.X R3, RZ, R3, R15, P0, !PT
			ISETP.NE.AND P1, PT, R2, R10, PT
			@P1 BRA ` + "`(.L_x_0)" + `
			EXIT`, 1},
	} {
		m, err := sass.Parse([]byte(sassText("k", tc.body)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := buildCode(m, m.Functions[0])
		if n := len(c.F.CFG().Loops); n != 1 {
			t.Fatalf("%s: %d loops", tc.name, n)
		}
		if got := c.compilerUnroll(0); got != tc.want {
			t.Errorf("%s: unrolled %d times, want %d", tc.name, got, tc.want)
		}
	}
}

// nvcc's unrolled loop followed by the loop of the remaining iterations,
// both at the loop's line 4: the waits lie in the remainder loop (M = 40
// of T = 60, its active samples A = 20). Loop unrolling there is n/a, the
// remainder of a loop unrolled 4 times; when the first loop advances by a
// pitch in a register (no unroll seen), eq. 6 gives 60/40.
func TestRemainderOfUnrolledLoop(t *testing.T) {
	for _, unrolled := range []bool{true, false} {
		step := "0x10"
		if !unrolled {
			step = "R14"
		}
		m := parseSASS(t, "k", `
		#line 3
		MOV R9, RZ {S1}
		#line 4
		.L_x_0:
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		LDG.E R5, desc[UR4][R2.64+0x4] {W1 S1}
		LDG.E R6, desc[UR4][R2.64+0x8] {W2 S1}
		LDG.E R7, desc[UR4][R2.64+0xc] {W3 S1}
		FFMA R9, R4, R4, R9 {B0 S4}
		FFMA R9, R5, R5, R9 {B1 S4}
		FFMA R9, R6, R6, R9 {B2 S4}
		FFMA R9, R7, R7, R9 {B3 S4}
		IADD3 R2, P0, R2, `+step+`, RZ {S1}
		ISETP.NE.AND P1, PT, R2, R10, PT {S4}
		@P1 BRA `+"`(.L_x_0)"+` {S1}
		.L_x_1:
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		FFMA R9, R4, R4, R9 {B0 S4}
		IADD3 R2, P0, R2, 0x4, RZ {S1}
		ISETP.NE.AND P2, PT, R2, R12, PT {S4}
		@P2 BRA `+"`(.L_x_1)"+` {S1}
		#line 6
		STG.E desc[UR4][R14.64], R9 {S1}
		EXIT
		`)
		c := codeOf(m, m.Func("k"))
		if n := len(c.F.CFG().Loops); n != 2 {
			t.Fatalf("%d loops", n)
		}
		a := findKind(t, loopWaits(t, m, 0xc0, "long_scoreboard"), OptLoopUnrolling)
		if unrolled && !strings.Contains(a.SpeedupNA, "remainder of a loop at the same line that the compiler unrolled 4 times") {
			t.Errorf("after an unrolled loop: %v (%q), want n/a", a.Speedup, a.SpeedupNA)
		}
		if !unrolled && !approx(a.Speedup, 60.0/40) {
			t.Errorf("after a loop not unrolled: %v (%q), want 60/40; %s", a.Speedup, a.SpeedupNA, a.Evidence)
		}
	}
}

// nvcc's loop unrolled 4 times whose copies compute their addresses in
// four registers, each from its own copy of the index (no one walk for
// compilerUnroll), beside the loop of the iterations left over at the same
// line 4, with one load a pass: a thread's elements 32 floats apart, the
// index advanced by 4·32 in the first loop and 32 in the second. The
// first holds 4 times the second's loads and steps 4 times as far, so it
// is unrolled 4 times and loop unrolling there is n/a (item 52). With two
// loads a pass in the second loop (a ratio of 2) it is not: the waits
// (M = 40 of T = 60, A = 20) give eq. 6's 60/40.
func TestUnrolledBesideRemainder(t *testing.T) {
	for _, ratio4 := range []bool{true, false} {
		rem := "IMAD.WIDE R2, R11, 0x4, R12 {S4}\nLDG.E R4, desc[UR4][R2.64] {W0 S1}\n"
		if !ratio4 {
			rem += "LDG.E R5, desc[UR4][R2.64+0x80] {W1 S1}\n"
		}
		m := parseSASS(t, "k", `
		#line 3
		MOV R9, RZ {S1}
		#line 4
		.L_x_0:
		MOV R20, R11 {S1}
		MOV R21, R11 {S1}
		MOV R22, R11 {S1}
		MOV R23, R11 {S1}
		IMAD.WIDE R24, R20, 0x4, R12 {S4}
		IMAD.WIDE R26, R21, 0x4, R12 {S4}
		IMAD.WIDE R28, R22, 0x4, R12 {S4}
		IMAD.WIDE R30, R23, 0x4, R12 {S4}
		LDG.E R4, desc[UR4][R24.64] {W0 S1}
		LDG.E R5, desc[UR4][R26.64+0x80] {W1 S1}
		LDG.E R6, desc[UR4][R28.64+0x100] {W2 S1}
		LDG.E R7, desc[UR4][R30.64+0x180] {W3 S1}
		FFMA R9, R4, R4, R9 {B0 S4}
		FFMA R9, R5, R5, R9 {B1 S4}
		FFMA R9, R6, R6, R9 {B2 S4}
		FFMA R9, R7, R7, R9 {B3 S4}
		IADD3 R11, R11, 0x80, RZ {S1}
		ISETP.NE.AND P1, PT, R11, R10, PT {S4}
		@P1 BRA `+"`(.L_x_0)"+` {S1}
		.L_x_1:
		`+rem+`
		FFMA R9, R4, R4, R9 {B0 S4}
		IADD3 R11, R11, 0x20, RZ {S1}
		ISETP.NE.AND P2, PT, R11, R15, PT {S4}
		@P2 BRA `+"`(.L_x_1)"+` {S1}
		#line 6
		STG.E desc[UR4][R14.64], R9 {S1}
		EXIT
		`)
		c := codeOf(m, m.Func("k"))
		if n := len(c.F.CFG().Loops); n != 2 {
			t.Fatalf("%d loops", n)
		}
		if u := c.compilerUnroll(0); u != 1 {
			t.Fatalf("compilerUnroll sees %d copies; the test wants a loop it does not see", u)
		}
		a := findKind(t, loopWaits(t, m, 0xc0, "long_scoreboard"), OptLoopUnrolling)
		if ratio4 && !strings.Contains(a.SpeedupNA, "already unrolled this loop 4 times (its body holds 4 times the loads of the loop at the same line") {
			t.Errorf("beside a remainder of a quarter of its loads: %v (%q), want n/a", a.Speedup, a.SpeedupNA)
		}
		if !ratio4 && !approx(a.Speedup, 60.0/40) {
			t.Errorf("beside a loop of half its loads: %v (%q), want 60/40; %s", a.Speedup, a.SpeedupNA, a.Evidence)
		}
	}
}

// loopWaits advises on kernel k of m with 60 samples around a wait: 10
// selected at off, 40 of reason at the next instruction, 10 selected at
// the one after (T = 60, M = 40, A = 20), one launch of a 128-thread
// block at 16 registers.
func loopWaits(t *testing.T, m *sass.Module, off uint64, reason string) []Advice {
	t.Helper()
	s := sampledKernel(t, m, "k", mod1)
	s.stall(off, "selected", 10)
	s.stall(off+0x10, reason, 40)
	s.stall(off+0x20, "selected", 10)
	s.launches(1, 128, 1, 16)
	return s.advise(t, m, Options{})
}
