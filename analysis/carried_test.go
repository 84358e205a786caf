package analysis

import (
	"strings"
	"testing"
)

// acc[i] += a[j] * x in a loop, the compiler keeping acc[i] in memory: the
// load and the store of one loop-invariant address are flagged; the loop's
// pointer walk (a base the loop advances) is not. The estimate removes
// the load (its 10 samples and the FFMA's 100 long_scoreboard samples
// blamed on it) and the store (10): M = 120 of T = 145, eq. 3 145/25,
// which the issue of what is left (25 selected samples) allows exactly.
func TestCarriedValue(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		MOV R10, RZ {S1}
		.L_x_1:
		#line 4
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		LDG.E R5, desc[UR4][R6.64] {W1 S1}
		IADD3 R6, R6, 0x4, RZ {S1}
		FFMA R4, R5, R8, R4 {B01 S4}
		STG.E desc[UR4][R2.64], R4 {S1}
		IADD3 R10, R10, 0x1, RZ {S1}
		ISETP.NE.AND P1, PT, R10, R9, PT {S4}
		@P1 BRA `+"`(.L_x_1)"+` {S1}
		EXIT
	`)
	as := StaticCheck(m)
	var a *Advice
	for i := range as {
		if as[i].Kind == StaticCarried {
			a = &as[i]
		}
	}
	if a == nil || len(a.Hotspots) != 2 || !strings.Contains(a.Hotspots[0].SASS, "LDG.E R4") || !strings.Contains(a.Hotspots[1].SASS, "STG.E") {
		t.Fatalf("carried value: %+v", a)
	}
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x10, "selected", 10)
	s.stall(0x40, "long_scoreboard", 100)
	s.stall(0x40, "selected", 10)
	s.stall(0x50, "selected", 10)
	s.stall(0x60, "selected", 5)
	s.stall(0x70, "selected", 5)
	s.stall(0x80, "selected", 5)
	adv, err := Advise(s.p, Modules{mod1: m}, Options{Static: true})
	if err != nil {
		t.Fatal(err)
	}
	c := find(adv, StaticCarried)
	if c == nil {
		t.Fatal("no carried-value advice in the report")
	}
	if want := 145.0 / 25; !approx(c.Speedup, want) {
		t.Fatalf("speedup %v, want %v (%s)", c.Speedup, want, c.Evidence)
	}
}
