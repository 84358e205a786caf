package sass

import "testing"

// TestAccessKind64BitPairs: a 64-bit access whose register pair the code
// ties together as one integer (funnel shift, sign extension, carry chain)
// is int64; two unrelated 32-bit words stay int32x2.
func TestAccessKind64BitPairs(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		want  string // kind of the first memory instruction
	}{
		{"store of a sign-extended int", []string{
			"IMAD R6, R0, R0, RZ",
			"SHF.R.S32.HI R7, RZ, 0x1f, R6",
			"STG.E.64 desc[UR4][R2.64], R6",
			"EXIT",
		}, "int64"},
		{"store of a carry-chain sum (wide_type classify<long long>)", []string{
			"SEL R0, RZ, 0x1, !P0",
			"SEL R5, RZ, 0x1, !P1",
			"IADD3 R6, P0, P1, R6, R0, R5",
			"IADD3.X R7, RZ, RZ, RZ, P0, P1",
			"STG.E.64 desc[UR4][R8.64], R6",
			"EXIT",
		}, "int64"},
		{"load used as a 64-bit index (wide_type apply_class_weight<long long>)", []string{
			"LDG.E.64 R4, desc[UR4][R4.64]",
			"LEA R2, P1, R4, UR8, 0x2",
			"LEA.HI.X R3, R4, UR9, R5, 0x2, P1",
			"LDG.E R2, desc[UR4][R2.64]",
			"EXIT",
		}, "int64"},
		{"load compared as a 64-bit integer", []string{
			"LDG.E.64 R4, desc[UR4][R2.64]",
			"ISETP.GE.U32.AND P0, PT, R4, UR6, PT",
			"ISETP.GE.AND.EX P0, PT, R5, UR7, PT, P0",
			"@P0 EXIT",
			"EXIT",
		}, "int64"},
		{"load shifted as a 64-bit integer", []string{
			"LDG.E.64 R4, desc[UR4][R2.64]",
			"SHF.L.U64.HI R9, R4, 0x2, R5",
			"IMAD.SHL.U32 R8, R4, 0x4, RZ",
			"STG.E.64 desc[UR4][R2.64], R8",
			"EXIT",
		}, "int64"},
		{"int2 whose words are added separately", []string{
			"LDG.E.64 R4, desc[UR4][R2.64]",
			"IADD3 R6, R4, 0x1, RZ",
			"IADD3 R7, R5, 0x2, RZ",
			"STG.E.64 desc[UR4][R2.64], R6",
			"EXIT",
		}, "int32x2"},
		{"int2 whose low word is sign-extended into an address", []string{
			"LDG.E.64 R4, desc[UR4][R2.64]",
			"LEA R8, P0, R4, UR8, 0x2",
			"LEA.HI.X.SX32 R9, R4, UR9, 0x2, P0",
			"IADD3 R7, R5, 0x2, RZ",
			"STG.E desc[UR4][R8.64], R7",
			"EXIT",
		}, "int32x2"},
		{"two ints stored from a carry chain of other registers", []string{
			"IADD3 R6, P0, R10, R12, RZ",
			"IADD3.X R9, R11, R13, RZ, P0, !PT",
			"IADD3 R7, R14, 0x1, RZ",
			"STG.E.64 desc[UR4][R2.64], R6",
			"EXIT",
		}, "int32x2"},
	}
	for _, c := range cases {
		f := snippet(t, c.lines...)
		ks := f.AccessKinds()
		got := ""
		for i := range f.Insts {
			if ks[i].Vec > 0 {
				got = ks[i].String()
				break
			}
		}
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
