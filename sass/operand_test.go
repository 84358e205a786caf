package sass

import (
	"math"
	"strings"
	"testing"
)

func TestParseReg(t *testing.T) {
	good := map[string]Reg{
		"R0": MakeReg(KindR, 0), "R254": MakeReg(KindR, 254), "RZ": RZ,
		"P0": MakeReg(KindP, 0), "P6": MakeReg(KindP, 6), "PT": PT, "PR": PR,
		"UR4": MakeReg(KindUR, 4), "URZ": URZ, "UP1": MakeReg(KindUP, 1), "UPT": UPT,
		"B3": MakeReg(KindB, 3), "SB5": MakeReg(KindSB, 5),
	}
	for s, want := range good {
		r, ok := ParseReg(s)
		if !ok || r != want {
			t.Errorf("ParseReg(%q) = %v, %v; want %v", s, r, ok, want)
		}
		if r.String() != s {
			t.Errorf("%q.String() = %q", s, r.String())
		}
	}
	for _, s := range []string{"", "R", "R255", "R256", "R01", "P7", "P", "UR", "Rx", "B16", "SB8", "X1", "R-1", "R1000"} {
		if r, ok := ParseReg(s); ok {
			t.Errorf("ParseReg(%q) = %v, want failure", s, r)
		}
	}
	if !RZ.Constant() || !PT.Constant() || RZ.Tracked() || !MakeReg(KindR, 3).Tracked() {
		t.Error("RZ/PT must be constants, R3 tracked")
	}
}

func TestParseOperand(t *testing.T) {
	r := func(k RegKind, i int) Reg { return MakeReg(k, i) }
	tests := []struct {
		in   string
		want Operand
	}{
		{"R0", Operand{Kind: OperandReg, Reg: r(KindR, 0)}},
		{"R7.reuse", Operand{Kind: OperandReg, Reg: r(KindR, 7), Reuse: true}},
		{"R2.64", Operand{Kind: OperandReg, Reg: r(KindR, 2), Pair: true}},
		{"-R8", Operand{Kind: OperandReg, Reg: r(KindR, 8), Neg: true}},
		{"-RZ", Operand{Kind: OperandReg, Reg: RZ, Neg: true}},
		{"!PT", Operand{Kind: OperandReg, Reg: PT, Not: true}},
		{"!P0", Operand{Kind: OperandReg, Reg: r(KindP, 0), Not: true}},
		{"~R3", Operand{Kind: OperandReg, Reg: r(KindR, 3), Inv: true}},
		{"-|R4|", Operand{Kind: OperandReg, Reg: r(KindR, 4), Neg: true, Abs: true}},
		{"R4.H0_H0", Operand{Kind: OperandReg, Reg: r(KindR, 4), Mods: ".H0_H0"}},
		{"R0.reuse.H1", Operand{Kind: OperandReg, Reg: r(KindR, 0), Reuse: true, Mods: ".H1"}},
		{"UR4", Operand{Kind: OperandReg, Reg: r(KindUR, 4)}},
		{"UPT", Operand{Kind: OperandReg, Reg: UPT}},
		{"B0", Operand{Kind: OperandReg, Reg: r(KindB, 0)}},
		{"SB0", Operand{Kind: OperandReg, Reg: r(KindSB, 0)}},
		{"0x400", Operand{Kind: OperandImm, Imm: 0x400}},
		{"-0x4", Operand{Kind: OperandImm, Imm: -4}},
		{"0xffffffff", Operand{Kind: OperandImm, Imm: 0xffffffff}},
		{"0x4008000000000000", Operand{Kind: OperandImm, Imm: 0x4008000000000000}},
		{"1", Operand{Kind: OperandFloat, Float: 1, Imm: 1}},
		{"0.5", Operand{Kind: OperandFloat, Float: 0.5}},
		{"1.00000000000000000000e+09", Operand{Kind: OperandFloat, Float: 1e9, Imm: 1e9}},
		{"9.5367431640625e-07", Operand{Kind: OperandFloat, Float: 9.5367431640625e-07}},
		{"-2", Operand{Kind: OperandFloat, Float: -2, Imm: -2}},
		{"c[0x0][0x28]", Operand{Kind: OperandConst, Offset: 0x28}},
		{"c[0x3][0x10]", Operand{Kind: OperandConst, Bank: 3, Offset: 0x10}},
		{"c[0x0][RZ]", Operand{Kind: OperandConst, Base: RZ}},
		{"c[0x2][R0+0xc]", Operand{Kind: OperandConst, Bank: 2, Base: r(KindR, 0), Offset: 0xc}},
		{"cx[UR4][R0+0x10]", Operand{Kind: OperandConst, BankReg: r(KindUR, 4), Base: r(KindR, 0), Offset: 0x10}},
		{"[R2.64+0x10]", Operand{Kind: OperandMem, Base: r(KindR, 2), Pair: true, Offset: 0x10}},
		{"[R0+UR4]", Operand{Kind: OperandMem, Base: r(KindR, 0), UBase: r(KindUR, 4)}},
		{"[UR4]", Operand{Kind: OperandMem, UBase: r(KindUR, 4)}},
		{"[UR10+0x480]", Operand{Kind: OperandMem, UBase: r(KindUR, 10), Offset: 0x480}},
		{"[R13+-0x4]", Operand{Kind: OperandMem, Base: r(KindR, 13), Offset: -4}},
		{"[0x480]", Operand{Kind: OperandMem, Offset: 0x480}},
		{"[RZ]", Operand{Kind: OperandMem, Base: RZ}},
		{"[R0.X16]", Operand{Kind: OperandMem, Base: r(KindR, 0), Mods: ".X16"}},
		{"desc[UR4][R2.64]", Operand{Kind: OperandMem, Desc: r(KindUR, 4), Base: r(KindR, 2), Pair: true}},
		{"desc[UR8][R2.64+0x8]", Operand{Kind: OperandMem, Desc: r(KindUR, 8), Base: r(KindR, 2), Pair: true, Offset: 8}},
		{"desc[UR12]", Operand{Kind: OperandMem, Desc: r(KindUR, 12)}},
		{"SR_TID.X", Operand{Kind: OperandSpecial, Name: "SR_TID.X"}},
		{"SR_CgaCtaId", Operand{Kind: OperandSpecial, Name: "SR_CgaCtaId"}},
		{"SRZ", Operand{Kind: OperandSpecial, Name: "SRZ"}},
		{"`(.L_x_0)", Operand{Kind: OperandLabel, Name: ".L_x_0"}},
		{"`($_Z6reloadPKfPfii$_Z6helperPKfi)", Operand{Kind: OperandLabel, Name: "$_Z6reloadPKfPfii$_Z6helperPKfi"}},
		{"2D", Operand{Kind: OperandOther}},
		{"QNAN", Operand{Kind: OperandFloat, Float: math.NaN()}},
		{"-INF", Operand{Kind: OperandFloat, Float: math.Inf(-1)}},
	}
	for _, tc := range tests {
		got, err := ParseOperand(tc.in)
		if err != nil {
			t.Errorf("ParseOperand(%q): %v", tc.in, err)
			continue
		}
		tc.want.Text = tc.in
		if math.IsNaN(tc.want.Float) && math.IsNaN(got.Float) {
			got.Float, tc.want.Float = 0, 0
		}
		if got != tc.want {
			t.Errorf("ParseOperand(%q) =\n %+v\nwant\n %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseOperandErrors(t *testing.T) {
	for _, s := range []string{"", "[", "[R0", "[]", "[R0+]", "[R0+R1]", "[UR1+UR2]", "[P0]", "[foo]", "desc[R0][R2]",
		"desc[UR4]x", "desc[UR4]]", "c[0x0]", "c[R0][0x0]", "c[0x0][0x1]x", "[R0]x", "`(", "-", "|R0"} {
		if o, err := ParseOperand(s); err == nil {
			t.Errorf("ParseOperand(%q) = %+v, want an error", s, o)
		}
	}
}

func TestSplitOperands(t *testing.T) {
	tests := map[string]string{
		"R0, R1, 0x4":                      "R0|R1|0x4",
		"desc[UR4][R2.64], R5":             "desc[UR4][R2.64]|R5",
		"R4 -0x1a0":                        "R4|-0x1a0",
		"R6 `(_Z6reloadPKfPfii)":           "R6|`(_Z6reloadPKfPfii)",
		"PT, RZ, [R4], R2, R3":             "PT|RZ|[R4]|R2|R3",
		"R0, -|R1|, c[0x0][R2+0x4], {1,2}": "R0|-|R1||c[0x0][R2+0x4]|{1,2}",
		"":                                 "",
		"P0, PT, R7, 1.00000000000000000000e+09, PT": "P0|PT|R7|1.00000000000000000000e+09|PT",
	}
	for in, want := range tests {
		got, err := splitOperands(in)
		if err != nil {
			t.Errorf("splitOperands(%q): %v", in, err)
			continue
		}
		if strings.Join(got, "|") != want {
			t.Errorf("splitOperands(%q) = %q, want %q", in, strings.Join(got, "|"), want)
		}
	}
	for _, bad := range []string{"[R0", "R0]", "c[0x0][0x1", "{R0"} {
		if _, err := splitOperands(bad); err == nil {
			t.Errorf("splitOperands(%q): want an error", bad)
		}
	}
}

func TestFloat16Bits(t *testing.T) {
	tests := map[float64]uint16{0: 0, 1: 0x3c00, 2: 0x4000, -2: 0xc000, 0.5: 0x3800, 9.5367431640625e-07: 0x0010,
		1.1920928955078125e-07: 0x0002, 65504: 0x7bff}
	for v, want := range tests {
		got, ok := float16bits(v)
		if !ok || got != want {
			t.Errorf("float16bits(%v) = %#x, %v; want %#x", v, got, ok, want)
		}
	}
	if _, ok := float16bits(0.1); ok {
		t.Error("0.1 is not exactly representable in binary16")
	}
}

// AddressRegs names the registers of the memory operand only: a store's
// data is not part of its address; a .64 base and a descriptor are pairs.
func TestAddressRegs(t *testing.T) {
	for _, c := range []struct {
		ops  []string
		want string
	}{
		{[]string{"[R6]", "R7"}, "R6"},
		{[]string{"R2", "desc[UR4][R4.64+0x8]"}, "R4 R5 UR4 UR5"},
		{[]string{"R8", "[R6+UR5+0x10]"}, "R6 UR5"},
		{[]string{"R1", "R2"}, ""},
	} {
		in := Instruction{}
		for _, s := range c.ops {
			o, err := ParseOperand(s)
			if err != nil {
				t.Fatal(err)
			}
			in.Operands = append(in.Operands, o)
		}
		var got []string
		for _, r := range in.AddressRegs() {
			got = append(got, r.String())
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("%v: %q, want %q", c.ops, g, c.want)
		}
	}
}
