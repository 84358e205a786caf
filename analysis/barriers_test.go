package analysis

import (
	"strings"
	"testing"
)

// barrierLoop is a tiled loop: a global load stored to shared memory,
// a barrier, a shared load summed, a barrier. sync is the barrier's text
// (a NOP for the same loop without barriers).
func barrierLoop(t *testing.T, sync string) (Modules, *sampled) {
	t.Helper()
	m := parseSASS(t, "k", `
		#line 3
		MOV R4, RZ {S1}
		.L_x_1:
		#line 4
		LDG.E R2, desc[UR4][R10.64] {W0 S1}
		IADD3 R10, R10, 0x4, RZ {S1}
		STS [R6], R2 {B0 S1}
		#line 5
		`+sync+` {S1}
		LDS R8, [R7] {W1 S1}
		FADD R4, R4, R8 {B1 S4}
		`+sync+` {S1}
		ISETP.NE.AND P1, PT, R10, R12, PT {S4}
		@P1 BRA `+"`(.L_x_1)"+` {S1}
		#line 6
		STG.E desc[UR4][R14.64], R4 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x10, "selected", 5)
	s.stall(0x20, "selected", 5)
	s.stall(0x30, "long_scoreboard", 60) // waits on the LDG
	s.stall(0x30, "long_scoreboard_not_issued", 60)
	s.stall(0x50, "selected", 5)
	s.stall(0x50, "barrier", 30) // warps at the barrier, sampled after it
	s.stall(0x50, "barrier_not_issued", 10)
	s.stall(0x60, "selected", 5)
	s.stall(0x60, "short_scoreboard", 20) // waits on the LDS
	s.stall(0x60, "short_scoreboard_not_issued", 20)
	s.stall(0x80, "selected", 10)
	s.stall(0x80, "not_selected", 10)
	s.launches(1, 128, 1, 16)
	return Modules{mod1: m}, s
}

// With the barriers (item 18), T = 150 samples, of which 90 not issued.
// The intervals are X = the LDG, IADD3 and STS with the loop control and
// the code outside the loop, and Y = the LDS and FADD between the two
// barriers. The STS's 60 waits hide behind X's 30 active samples (5 + 5 +
// 20); the FADD's 20 behind Y's 10: the LDS's 25 active samples less its
// 20 barrier waits sampled while another warp issued, and the FADD's 5.
// Code reordering: 150/(150-40). The loop passes a barrier in every
// iteration: no loop unrolling. Without the barriers (NOPs), or with GPA's
// rules alone, one scope: min(A = 60, M = 80), 150/90 for code reordering;
// loop unrolling's scope, the loop, holds M = 60 of those waits, and
// unrolled 4 times it hides 3/4 of them (item 43): min(60, 45), 150/105;
// with GPA's rules alone min(60, 60), 150/90.
func TestBarrierLimitsLatencyHiding(t *testing.T) {
	for _, c := range []struct {
		sync string
		gpa  bool
	}{{"BAR.SYNC.DEFER_BLOCKING 0x0", false}, {"NOP", false}, {"BAR.SYNC.DEFER_BLOCKING 0x0", true}} {
		mods, s := barrierLoop(t, c.sync)
		as, err := Advise(s.p, mods, Options{GPAOnly: c.gpa})
		if err != nil {
			t.Fatal(err)
		}
		cr, lu := findKind(t, as, OptCodeReordering), find(as, OptLoopUnrolling)
		barriers := strings.HasPrefix(c.sync, "BAR") && !c.gpa
		want := 150.0 / 90
		if barriers {
			want = 150.0 / 110
		}
		if !approx(cr.Speedup, want) || strings.Contains(cr.Evidence, "barrier") != barriers {
			t.Errorf("%s, GPA only %v: code reordering %v, want %v; %s", c.sync, c.gpa, cr.Speedup, want, cr.Evidence)
		}
		switch {
		case barriers && lu != nil:
			t.Errorf("loop unrolling on a loop with a barrier in every iteration: %v; %s", lu.Speedup, lu.Evidence)
		case !barriers && !c.gpa && (lu == nil || !approx(lu.Speedup, 150.0/105)):
			t.Errorf("%s: loop unrolling %+v, want 150/105", c.sync, lu)
		case c.gpa && (lu == nil || !approx(lu.Speedup, 150.0/90)):
			t.Errorf("%s, GPA only: loop unrolling %+v, want 150/90", c.sync, lu)
		}
	}
}

// The intervals of barrierLoop's code, and which loops pass a barrier in
// every iteration: not one whose barrier sits on one branch of an if.
func TestBarrierIntervals(t *testing.T) {
	mods, _ := barrierLoop(t, "BAR.SYNC.DEFER_BLOCKING 0x0")
	f := mods[mod1].Func("k")
	iv, n := codeOf(mods[mod1], f).barrierIntervals()
	x, y := iv[0], iv[5]
	want := []int{x, x, x, x, -1, y, y, -1, x, x, x, x}
	if n != 2 || x == y || len(iv) != len(want) {
		t.Fatalf("intervals %v (%d)", iv, n)
	}
	for i := range want {
		if iv[i] != want[i] {
			t.Fatalf("intervals %v, want %v", iv, want)
		}
	}
	m := parseSASS(t, "k", `
		MOV R4, RZ {S1}
		.L_x_1:
		ISETP.NE.AND P0, PT, R4, RZ, PT {S4}
		@P0 BRA `+"`(.L_x_2)"+` {S1}
		BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
		.L_x_2:
		IADD3 R4, R4, 0x1, RZ {S1}
		ISETP.NE.AND P1, PT, R4, R12, PT {S4}
		@P1 BRA `+"`(.L_x_1)"+` {S1}
		EXIT
	`)
	fv := &fnView{c: codeOf(m, m.Func("k"))}
	if fv.barrierEveryIteration(0) {
		t.Fatal("a barrier on one branch counted as passed in every iteration")
	}
	if fv := (&fnView{c: codeOf(mods[mod1], f)}); !fv.barrierEveryIteration(0) {
		t.Fatal("the tiled loop's barriers not seen")
	}
}
