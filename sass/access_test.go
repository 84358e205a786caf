package sass

import (
	"reflect"
	"sort"
	"strings"
	"testing"
)

type kindCase struct {
	fn   string
	off  uint64
	want string
}

func checkKinds(t *testing.T, m *Module, cases []kindCase) {
	t.Helper()
	for _, c := range cases {
		k, ok := m.AccessKind(c.fn, c.off)
		f, so := m.FuncAt(c.fn, c.off)
		text := "?"
		if f != nil && f.InstAt(so) >= 0 {
			text = f.Insts[f.InstAt(so)].Text()
		}
		if !ok || k.String() != c.want {
			t.Errorf("%s+%#x %s: %v, want %s", c.fn, c.off, text, k, c.want)
		}
	}
}

// TestAccessKindsProbe checks the kinds against the source types of k.cu.
func TestAccessKindsProbe(t *testing.T) {
	m := mustParse(t, "probe/k.hex.txt")
	checkKinds(t, m, []kindCase{
		{"_Z3shmPi", 0xa0, "int32"},                   // t[...] = threadIdx.x
		{"_Z3shmPi", 0xd0, "unknown32 (fallback)"},    // loaded and only stored again
		{"_Z3shmPi", 0xf0, "unknown32 (fallback)"},    // out[...] = t[...]
		{"_Z4vec4PK6float4PS_iPs", 0xe0, "float32x4"}, // float4 v = a[i]
		{"_Z4vec4PK6float4PS_iPs", 0x170, "float32x4"},
		{"_Z4vec4PK6float4PS_iPs", 0x180, "int16"}, // s[i] = (short)i
		{"_Z4vec4PK6float4PS_iPs", 0x190, "int32"}, // atomicAdd((int*)...)
		{"_Z4fillPdi", 0xd0, "float64"},            // d[i] = 3.0
		{"_Z6reloadPKfPfii", 0x100, "float32"},     // b[i]
		{"_Z6reloadPKfPfii", 0x140, "float32"},     // a[0]
		{"_Z6reloadPKfPfii", 0x580, "float32"},     // b[i] = s
		{"_Z6reloadPKfPfii", 0x5e0, "float32"},     // a[i] in the noinline helper, kernel-relative offset
	})
	fb := 0
	for _, f := range m.Functions {
		for _, k := range f.AccessKinds() {
			if k.Fallback {
				fb++
			}
		}
	}
	if fb != 2 {
		t.Errorf("%d fallbacks, want 2", fb)
	}
	if _, ok := m.AccessKind("_Z3shmPi", 0x90); ok {
		t.Error("constant loads have no access kind")
	}
}

// TestAccessKindsArchs: the probe's kinds agree on sm_80, sm_90, sm_100 and
// sm_120 although the code differs (sm_120 stores 3.0 with MOV.64).
func TestAccessKindsArchs(t *testing.T) {
	summary := func(name string) map[string]string {
		m := mustParse(t, name)
		out := map[string]string{}
		for _, f := range m.Functions {
			var ks []string
			for i, k := range f.AccessKinds() {
				if k.Vec > 0 {
					ks = append(ks, f.Insts[i].Mem.Op.String()+":"+k.String())
				}
			}
			sort.Strings(ks)
			out[f.Name] = strings.Join(ks, ", ")
		}
		return out
	}
	want := summary("probe/k.hex.txt")
	for _, a := range []string{"sm80", "sm100", "sm120"} {
		if got := summary("probe/k." + a + ".hex.txt"); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", a, got, want)
		}
	}
}

func TestAccessKindsCflow(t *testing.T) {
	m := mustParse(t, "cflow/c.sm90.hex.txt")
	const ty = "_Z5typesPKhPKsPK6__halfPKdPfPiPxi"
	checkKinds(t, m, []kindCase{
		{ty, 0x130, "int8"},    // u8[i]
		{ty, 0x160, "float64"}, // d[i]
		{ty, 0x230, "float64"}, // sd[...] = d[i] * 2.0
		{ty, 0x240, "int8"},    // sc[...] = u8[i] + 1
		{ty, 0x260, "float16"}, // h[i]
		{ty, 0x290, "float64"}, // sd[...] read back
		{ty, 0x310, "float32"}, // f[i] = ...
		{ty, 0x320, "int16"},   // s16[i]
		{ty, 0x340, "int8"},    // sc[...]
		{ty, 0x390, "int32"},   // iout[i] = ...
		{ty, 0x3a0, "float32"}, // f[i] read back
		{ty, 0x480, "int64"},   // l[i] = (long long)...
		{ty, 0x490, "float32"}, // atomicAdd(&f[0], 1.0f)
		{ty, 0x4a0, "int32"},   // atomicCAS
		{ty, 0x440, "int32"},   // atomicAdd(&cnt, 1)
		{"_Z4nestPKdPdii", 0x180, "float64"},
		{"_Z4nestPKdPdii", 0x2d0, "float64"}, // halves selected with FSEL, zeroed with CS2R
		{"_Z3locPKiPf", 0x70, "int32"},       // idx[threadIdx.x]
		{"_Z3locPKiPf", 0x1090, "float32"},
		{"_Z2swPKiPfi", 0xd0, "int32"},
		{"_Z2swPKiPfi", 0x13e0, "float32"},
		{"_Z3irrPKiPii", 0x220, "int32"},
		{"_Z7genericPfi", 0x130, "float32"},
		{"_Z5asyncPK6float4PS_", 0x120, "unknown32x4 (fallback)"}, // LDGSTS: data never in registers
	})
	// @!PT placeholders never execute and get no kind
	if _, ok := m.AccessKind("_Z5asyncPK6float4PS_", 0xf0); ok {
		t.Error("@!PT LDS must have no access kind")
	}
}

func TestPlausibleConstants(t *testing.T) {
	if plausible64(0x4008000000000000) != TypeFloat || plausible64(12345) != TypeInt || plausible64(0) != TypeUnknown {
		t.Error("plausible64")
	}
	if plausible32(0x3f800000) != TypeFloat || plausible32(0xffffffff) != TypeInt || plausible32(0x7fffffff) != TypeUnknown {
		t.Error("plausible32")
	}
}

func TestDefUse(t *testing.T) {
	f := snippet(t,
		"MOV R1, 0x1",
		"@P0 MOV R1, 0x2",
		"IADD3 R2, R1, RZ, RZ",
		"MOV R1, 0x3",
		"IADD3 R3, R1, R2, RZ",
		".L_loop:",
		"IADD3 R4, R4, 0x1, RZ",
		"ISETP.NE.AND P1, PT, R4, R3, PT",
		"@P1 BRA `(.L_loop)",
		"LDG.E.128 R8, desc[UR4][R2.64]",
		"FADD R12, R11, R8",
		"EXIT",
	)
	du := f.DefUse()
	if got := du.Reaching(2, MakeReg(KindR, 1)); !reflect.DeepEqual(got, []int32{0, 1}) {
		t.Errorf("R1 at 2: %v, want a predicated definition not to kill [0 1]", got)
	}
	if got := du.Reaching(4, MakeReg(KindR, 1)); !reflect.DeepEqual(got, []int32{3}) {
		t.Errorf("R1 at 4: %v", got)
	}
	if got := du.Reaching(5, MakeReg(KindR, 4)); !reflect.DeepEqual(got, []int32{Entry, 5}) {
		t.Errorf("R4 at 5 (loop-carried): %v", got)
	}
	if got := du.Users(0, MakeReg(KindR, 1)); !reflect.DeepEqual(got, []int32{2}) {
		t.Errorf("users of R1@0: %v", got)
	}
	if got := regNames(du.Defs[8]); got != "R8 R9 R10 R11" {
		t.Errorf("LDG.E.128 defines %s", got)
	}
	if got := regNames(du.Uses[8]); got != "R2 R3 UR4 UR5" {
		t.Errorf("LDG.E.128 uses %s", got)
	}
	if got := du.Reaching(9, MakeReg(KindR, 11)); !reflect.DeepEqual(got, []int32{8}) {
		t.Errorf("R11 at 9: %v", got)
	}
	if got := du.Reaching(8, MakeReg(KindR, 3)); !reflect.DeepEqual(got, []int32{4}) {
		t.Errorf("R3 at 8: %v", got)
	}
	if got := regNames(du.Uses[7]); got != "P1" {
		t.Errorf("guarded BRA uses %s", got)
	}
}

func TestDefUseWidths(t *testing.T) {
	f := snippet(t,
		"IMAD.WIDE R6, R13, 0x10, R6",
		"DADD R4, R2, R4",
		"F2F.F32.F64 R0, R2",
		"I2F.F64.S64 R2, R4",
		"F2I.S64 R2, R0",
		"ISETP.GE.AND P0, PT, R5, UR4, PT",
		"IADD3 R6, P0, R0, UR4, RZ",
		"IADD3.X R7, RZ, UR5, RZ, P0, !PT",
		"SHFL.DOWN PT, R3, R0, 0x1, 0x1f",
		"ATOMG.E.CAS.STRONG.GPU PT, RZ, [R4], R2, R3",
		"ULDC.64 UR4, c[0x0][0x208]",
		"CS2R R2, SRZ",
		"P2R R0, PR, RZ, 0x7f",
		"HMMA.16816.F32 R4, R8, R12, R4",
		"STG.E.64 desc[UR4][R2.64], R8",
	)
	du := f.DefUse()
	want := []struct{ defs, uses string }{
		{"R6 R7", "R13 R6 R7"},
		{"R4 R5", "R2 R3 R4 R5"},
		{"R0", "R2 R3"},
		{"R2 R3", "R4 R5"},
		{"R2 R3", "R0"},
		{"P0", "R5 UR4"},
		{"R6 P0", "R0 UR4"},
		{"R7", "UR5 P0"},
		{"R3", "R0"},
		{"", "R4 R2 R3"},
		{"UR4 UR5", ""},
		{"R2 R3", ""},
		{"R0", "P0 P1 P2 P3 P4 P5 P6"},
		{"R4 R5 R6 R7", "R8 R9 R10 R11 R12 R13 R4 R5 R6 R7"},
		{"", "R2 R3 UR4 UR5 R8 R9"},
	}
	for i, w := range want {
		if d, u := regNames(du.Defs[i]), regNames(du.Uses[i]); d != w.defs || u != w.uses {
			t.Errorf("%s: defs %q uses %q, want %q %q", f.Insts[i].Text(), d, u, w.defs, w.uses)
		}
	}
}

// TestCallSummary: a CALL writes what the callee may write, so the value
// returned in R10 by the noinline helper reaches its use after the call.
func TestCallSummary(t *testing.T) {
	m := mustParse(t, "probe/k.sass.txt")
	f := m.Func("_Z6reloadPKfPfii")
	du := f.DefUse()
	call, use := f.InstAt(0x260), f.InstAt(0x270)
	got := du.Reaching(use, MakeReg(KindR, 10))
	found := false
	for _, d := range got {
		if int(d) == call {
			found = true
		}
	}
	if !found {
		t.Errorf("R10 at 0x270 reached by %v, want the CALL at index %d", got, call)
	}
}

// TestScoreboardProducers: with control bits, an instruction that waits on
// a scoreboard is linked to the variable-latency producers that set it.
func TestScoreboardProducers(t *testing.T) {
	m := mustParse(t, "probe/k.hex.txt")
	f := m.Func("_Z3shmPi")
	du := f.DefUse()
	for _, c := range []struct {
		consumer uint64
		want     []uint64
	}{
		{0x50, []uint64{0x10}}, // IMAD.SHL.U32 R0, R7 waits for S2R R7, SR_TID.X
		{0x40, []uint64{0x20}}, // ULEA waits for S2UR UR5
		{0xc0, []uint64{0x90}}, // IMAD.WIDE.U32 waits for LDC.64 R2 (the S2R was waited for before)
		{0xf0, []uint64{0xd0}}, // STG waits for LDS R5
		{0x60, nil},
	} {
		var got []uint64
		for _, p := range du.Producers(f.InstAt(c.consumer)) {
			got = append(got, f.Insts[p].Offset)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("producers of %#x: %#x, want %#x", c.consumer, got, c.want)
		}
	}
	// without encodings there are no scoreboards
	if p := mustParse(t, "probe/k.sass.txt").Func("_Z3shmPi").DefUse().Producers(5); len(p) != 0 {
		t.Errorf("producers without control bits: %v", p)
	}
}
