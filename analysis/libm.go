package analysis

import "gpuprof/sass"

// The CUDA math library's single-precision functions (sinf, cosf, tanf,
// sincosf, logf and their kin) come from libdevice, which carries no line
// information: once inlined, their code is attributed to the caller's line
// and no "inlined at" frame names the library. Their range reduction is
// recognisable by its constants, and it is where they convert: the
// quotient by π/2 is x·2/π truncated to an integer and back (FMUL by 2/π,
// F2I, I2FP), and the Payne-Hanek path for large arguments scales a 64-bit
// integer by π/2^64 in double precision (I2F.F64.S64, DMUL by
// 0x3BF921FB54442D19, F2F.F32.F64). logf reduces its argument to
// [2/3, 4/3) by subtracting the bits of 2/3 (0x3f2aaaab, added as
// 0xc0d55555) and converts the exponent it took off to float.
const (
	twoOverPi32    = float32(0.63661975)
	piOver2p64High = 0x3bf921fb // high word of π/2^64 as a double
	minusTwoThirds = 0xc0d55555 // -(bits of 2/3) as a 32-bit addend
)

// libmConversions marks the conversions of f that sit in a basic block
// holding one of these constants.
func libmConversions(f *sass.Function) []bool {
	g := f.CFG()
	marked := make([]bool, len(g.Blocks))
	any := false
	for i := range f.Insts {
		for _, o := range f.Insts[i].Operands {
			if o.Kind == sass.OperandFloat && float32(o.Float) == twoOverPi32 ||
				o.Kind == sass.OperandImm && (o.Imm == piOver2p64High || uint32(o.Imm) == minusTwoThirds) {
				if b := g.BlockOf(i); b >= 0 {
					marked[b], any = true, true
				}
			}
		}
	}
	out := make([]bool, len(f.Insts))
	if !any {
		return out
	}
	for i := range f.Insts {
		if b := g.BlockOf(i); b >= 0 && marked[b] && f.Insts[i].Class == sass.ClassConvert {
			out[i] = true
		}
	}
	return out
}
