package analysis

import (
	"fmt"
	"slices"

	"gpuprof/sass"
)

// Loops the compiler already unrolled.
//
// nvcc unrolls an inner loop of unknown trip count 4 times by default: the
// body then holds 4 iterations of each unit-stride walk, loads of one
// width from one base at consecutive offsets, and the base advances by
// their whole span once per pass (a pointer increment, or an index
// advanced by 4 that the address is computed from). Asking for
// `#pragma unroll` again brings no independent work the schedule does not
// already have: the iterations' loads are issued together, and what still
// waits is a chain through the iterations (an accumulator), which
// unrolling does not break. Loop-unrolling advice on such a loop keeps its
// evidence but gives no speedup (docs/validation.md, "Loops the compiler
// unrolled").

// minCompilerUnroll is the unroll factor from which a loop counts as
// unrolled: nvcc's default. A walk of two consecutive elements per
// iteration is as likely the source's own pairing.
const minCompilerUnroll = 4

// compilerUnroll returns how many iterations of a unit-stride walk the
// body of innermost loop li holds, 1 when it shows none.
func (c *code) compilerUnroll(li int) int {
	g := c.F.CFG()
	if li < 0 || li >= len(g.Loops) || len(g.Loops[li].Children) > 0 {
		return 1
	}
	type group struct {
		first int // a load of the group, for its base's definitions
		base  sass.Reg
		bits  int
		offs  []int64
	}
	groups := map[string]*group{}
	var keys []string
	for _, bi := range g.Loops[li].Blocks {
		bl := g.Blocks[bi]
		for i := bl.Start; i < bl.End; i++ {
			in := &c.F.Insts[i]
			if !isGlobalLoad(in) || in.Mem.Async {
				continue
			}
			o, ok := memOperand(in)
			if !ok || !o.Base.Tracked() || o.UBase.Tracked() {
				continue
			}
			k := fmt.Sprintf("%s|%d", addrKey(c.F, i, o), in.Mem.Bits)
			gr := groups[k]
			if gr == nil {
				gr = &group{first: i, base: o.Base, bits: in.Mem.Bits}
				groups[k] = gr
				keys = append(keys, k)
			}
			if !slices.Contains(gr.offs, o.Offset) {
				gr.offs = append(gr.offs, o.Offset)
			}
		}
	}
	best := 1
	for _, k := range keys {
		gr := groups[k]
		u := len(gr.offs)
		if u < 2 || u <= best {
			continue
		}
		w := int64(gr.bits / 8)
		slices.Sort(gr.offs)
		consecutive := w > 0
		for j := 1; j < u && consecutive; j++ {
			consecutive = gr.offs[j]-gr.offs[j-1] == w
		}
		if consecutive && c.baseAdvance(gr.first, gr.base, li, w) == int64(u)*w {
			best = u
		}
	}
	return best
}

// baseAdvance is how many bytes base register b (read at instruction i)
// advances per pass of loop li, from its definition inside the loop: an
// add of a constant to itself (IADD3 b, P, b, c), or an address computed
// from an index the loop advances by a constant (IMAD.WIDE b, k, w, base
// with IADD3 k, k, n: n·w). 0 when it is neither.
func (c *code) baseAdvance(i int, b sass.Reg, li int, w int64) int64 {
	def := c.loopDef(i, b, li)
	if def < 0 {
		return 0
	}
	in := &c.F.Insts[def]
	switch in.Opcode {
	case "IADD3":
		if step, ok := selfAdd(in, b); ok {
			return step
		}
	case "IMAD.WIDE", "IMAD.WIDE.U32":
		// IMAD.WIDE b, k, stride, base: the address of element k.
		ops := in.Operands
		if len(ops) == 4 && ops[1].Kind == sass.OperandReg && ops[2].Kind == sass.OperandImm && ops[2].Imm == w {
			k := ops[1].Reg
			if d := c.loopDef(def, k, li); d >= 0 && c.F.Insts[d].Opcode == "IADD3" {
				if n, ok := selfAdd(&c.F.Insts[d], k); ok {
					return n * w
				}
			}
		}
	}
	return 0
}

// loopDef is the one definition inside loop li of register r read at
// instruction i, -1 when there is none or several.
func (c *code) loopDef(i int, r sass.Reg, li int) int {
	def := -1
	for _, d := range c.F.DefUse().Reaching(i, r) {
		if d >= 0 && c.inLoop(int(d), li) {
			if def >= 0 {
				return -1
			}
			def = int(d)
		}
	}
	return def
}

// selfAdd reads "IADD3 r, [P,] r, imm, RZ" (r += imm): the constant added.
func selfAdd(in *sass.Instruction, r sass.Reg) (int64, bool) {
	ops := in.Operands
	if len(ops) < 4 || ops[0].Kind != sass.OperandReg || ops[0].Reg != r {
		return 0, false
	}
	var imm int64
	var self, hasImm bool
	for _, o := range ops[1:] {
		switch {
		case o.Kind == sass.OperandReg && o.Reg == r && !o.Neg:
			self = true
		case o.Kind == sass.OperandImm:
			imm, hasImm = o.Imm, true
		case o.Kind == sass.OperandReg && (o.Reg == sass.RZ || o.Reg.Kind() == sass.KindP):
		default:
			return 0, false
		}
	}
	return imm, self && hasImm
}
