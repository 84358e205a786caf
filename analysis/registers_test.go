package analysis

import "testing"

// Register pressure through a loop: the address R2:R3 and the bound R12
// are live on entry and to the end, the sum R4 and the step R5 across the
// back edge: 5 at once, though the code names registers up to R12. A
// guarded definition does not end R6's life: R6 stays live from the MOV
// before the loop to the STG, 6 at once.
func TestMaxLiveRegs(t *testing.T) {
	for _, c := range []struct {
		guarded string
		live    int
	}{{"", 5}, {"@P0 MOV R6, RZ {S1}\nSTG.E desc[UR4][R2.64+0x4], R6 {S1}", 6}} {
		pre := ""
		if c.guarded != "" {
			pre = "MOV R6, 0x2 {S1}"
		}
		m := parseSASS(t, "k", `
		MOV R4, RZ {S1}
		MOV R5, 0x1 {S1}
		`+pre+`
		.L_x_1:
		IADD3 R4, R4, R5, RZ {S1}
		ISETP.NE.AND P0, PT, R4, R12, PT {S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		`+c.guarded+`
		STG.E desc[UR4][R2.64], R4 {S1}
		EXIT
	`)
		f := m.Func("k")
		if got := maxLiveRegs(f); got != c.live || maxRegIndex(f) != 12 {
			t.Errorf("guarded %q: %d live, highest R%d; want %d and R12", c.guarded, got, maxRegIndex(f), c.live)
		}
	}
}
