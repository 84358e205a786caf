package analysis

import (
	"testing"

	"gpuprof/sass"
)

// A dot product's inner loop as nvcc unrolls it 4 times, with the pointer
// advanced by the span of its four loads (a), or the address computed from
// an index advanced by 4 (b); a 5-point stencil walking rows (c) reads
// consecutive words too, but advances by a pitch in a register: no unroll.
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
