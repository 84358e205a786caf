package analysis

import "testing"

// A loop whose FADD waits on a MUFU.RCP (M = 40 short-scoreboard samples
// of T = 60, A = 20 active): where the MUFU reads the FADD's own sum
// (x = x + 1/x, a chain through the iterations) unrolling overlaps
// nothing, and there is no loop-unrolling advice (item 54); where it
// reads a value fixed outside the loop, the iterations' MUFUs are
// independent: waits on arithmetic hide by instruction-level parallelism
// (eq. 4), at most 3/4 of them unrolled by 4 (item 43), 30 of 60 samples:
// 60/30.
func TestUnrollingLeavesChains(t *testing.T) {
	for _, chain := range []bool{true, false} {
		src := "R8"
		if chain {
			src = "R9"
		}
		m := parseSASS(t, "k", `
		#line 3
		MOV R9, RZ {S1}
		#line 4
		.L_x_0:
		MUFU.RCP R10, `+src+` {W1 S1}
		FADD R9, R9, R10 {B1 S4}
		IADD3 R2, R2, 0x1, RZ {S1}
		ISETP.NE.AND P1, PT, R2, R11, PT {S4}
		@P1 BRA `+"`(.L_x_0)"+` {S1}
		#line 6
		STG.E desc[UR4][R14.64], R9 {S1}
		EXIT
		`)
		c := codeOf(m, m.Func("k"))
		mufu, fadd := 1, 2
		if got := c.onRecurrence(mufu, fadd, 0); got != chain {
			t.Errorf("chain %v: onRecurrence(MUFU, FADD) = %v", chain, got)
		}
		as := loopWaits(t, m, 0x10, "short_scoreboard")
		if chain {
			for _, a := range as {
				if a.Kind == OptLoopUnrolling {
					t.Errorf("loop unrolling on a chain through the iterations: %v (%s)", a.Speedup, a.Evidence)
				}
			}
			continue
		}
		if a := findKind(t, as, OptLoopUnrolling); !approx(a.Speedup, 60.0/30) {
			t.Errorf("independent iterations: %v (%q), want 60/30; %s", a.Speedup, a.SpeedupNA, a.Evidence)
		}
	}
}
