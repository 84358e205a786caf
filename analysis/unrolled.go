package analysis

import (
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

// compilerUnroll returns how many iterations of a walk the body of
// innermost loop li holds, 1 when it shows none. A walk is the loads from
// one base: U iterations of it are U copies of one iteration's loads (an
// element, or a structure's fields) shifted by the element's stride S,
// with the base advancing by U·S per pass (docs/validation.md, items 21
// and 30).
func (c *code) compilerUnroll(li int) int {
	g := c.F.CFG()
	if li < 0 || li >= len(g.Loops) || len(g.Loops[li].Children) > 0 {
		return 1
	}
	type access struct {
		off  int64
		bits int
	}
	type group struct {
		first int // a load of the group, for its base's definitions
		base  sass.Reg
		acc   []access
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
			k := addrKey(c.F, i, o)
			gr := groups[k]
			if gr == nil {
				gr = &group{first: i, base: o.Base}
				groups[k] = gr
				keys = append(keys, k)
			}
			if a := (access{o.Offset, in.Mem.Bits}); !slices.Contains(gr.acc, a) {
				gr.acc = append(gr.acc, a)
			}
		}
	}
	best := 1
	for _, k := range keys {
		gr := groups[k]
		if len(gr.acc) < 2 || len(gr.acc) <= best {
			continue
		}
		adv := c.baseAdvance(gr.first, gr.base, li)
		if adv <= 0 {
			continue
		}
		for u := len(gr.acc); u > best; u-- {
			if adv%int64(u) == 0 && copiesOf(gr.acc, u, adv/int64(u), func(a access) int64 { return a.off }, func(a access, d int64) access { return access{a.off + d, a.bits} }) {
				best = u
				break
			}
		}
	}
	return best
}

// copiesOf reports whether the accesses as are u copies of the ones in
// the first stride (from the lowest offset), each shifted by stride from
// the one before.
func copiesOf[A comparable](as []A, u int, stride int64, off func(A) int64, shift func(A, int64) A) bool {
	if stride <= 0 || len(as)%u != 0 {
		return false
	}
	lo := off(as[0])
	for _, a := range as {
		lo = min(lo, off(a))
	}
	n := 0
	for _, a := range as {
		if off(a)-lo >= stride {
			continue
		}
		n++
		for k := 1; k < u; k++ {
			if !slices.Contains(as, shift(a, int64(k)*stride)) {
				return false
			}
		}
	}
	return n*u == len(as)
}

// baseAdvance is how many bytes base register b (read at instruction i)
// advances per pass of loop li, from its definition inside the loop: an
// add of a constant to itself (IADD3 b, P, b, c), or an address computed
// from an index the loop advances by a constant (IMAD.WIDE b, k, s, base
// with IADD3 k, k, n: n·s). 0 when it is neither.
func (c *code) baseAdvance(i int, b sass.Reg, li int) int64 {
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
		if len(ops) == 4 && ops[1].Kind == sass.OperandReg && ops[2].Kind == sass.OperandImm && ops[2].Imm > 0 {
			k := ops[1].Reg
			if d := c.loopDef(def, k, li); d >= 0 && c.F.Insts[d].Opcode == "IADD3" {
				if n, ok := selfAdd(&c.F.Insts[d], k); ok {
					return n * ops[2].Imm
				}
			}
		}
	}
	return 0
}

// remainderOf returns, for innermost loop li, the unroll factor of a
// loop the compiler unrolled from the same source loop, when li is what
// is left of it: nvcc follows a loop it unrolled 4 times with a loop of
// one iteration per pass for the trip count's remainder, and both carry
// the source loop's line. The other loop is seen unrolled by its walk
// (compilerUnroll) or by holding u times li's loads and steps (loadRatio,
// item 52). 1 when li is no such loop.
func (c *code) remainderOf(li int) int {
	best := 1
	for _, lj := range c.sameLineLoops(li) {
		best = max(best, c.compilerUnroll(lj))
		if u := c.loadRatio(lj, li); u >= minCompilerUnroll {
			best = max(best, u)
		}
	}
	return best
}

// unrolledBesideRemainder returns, for innermost loop li, how many
// iterations of the source loop its body holds when a remainder loop at
// the same line is beside it: li's global loads are u times the other
// loop's, and it steps u times as far (item 52). The remainder runs one
// iteration per pass, so the ratio counts the copies whatever registers
// the compiler computed their addresses in, where compilerUnroll needs
// one walk from one base (nvcc unrolling 16 times spreads a walk over
// several address registers, each from its own copy of the index). 1 when
// there is no such loop.
func (c *code) unrolledBesideRemainder(li int) int {
	best := 1
	for _, lj := range c.sameLineLoops(li) {
		if u := c.loadRatio(li, lj); u >= minCompilerUnroll {
			best = max(best, u)
		}
	}
	return best
}

// sameLineLoops lists the innermost loops other than innermost loop li
// that carry its line, neither inside the other: the copies the compiler
// made of one source loop.
func (c *code) sameLineLoops(li int) []int {
	g := c.F.CFG()
	if len(g.Loops[li].Children) > 0 {
		return nil
	}
	line := c.loopLine(li)
	var out []int
	for lj := range g.Loops {
		if lj == li || len(g.Loops[lj].Children) > 0 || c.loopLine(lj) != line || g.Loops[lj].Contains(g.Loops[li].Header) || g.Loops[li].Contains(g.Loops[lj].Header) {
			continue
		}
		out = append(out, lj)
	}
	return out
}

// loadRatio is u when loop a's body holds u times the global loads of
// loop b's (both non-zero) and advances a pointer or an index by u times
// a constant step of b's, 0 otherwise: u passes of b in one of a. A loop
// that advances by a pitch in a register shows no such step.
func (c *code) loadRatio(a, b int) int {
	na, nb := c.globalLoadsIn(a), c.globalLoadsIn(b)
	if na == 0 || nb == 0 || na%nb != 0 {
		return 0
	}
	u := int64(na / nb)
	for _, x := range c.constantSteps(a) {
		for _, y := range c.constantSteps(b) {
			if x == u*y {
				return int(u)
			}
		}
	}
	return 0
}

// constantSteps lists the constants loop li adds to a register of its own
// each pass (IADD3 r, r, imm), as magnitudes.
func (c *code) constantSteps(li int) []int64 {
	var out []int64
	for _, i := range c.loopInsts(li) {
		in := &c.F.Insts[i]
		if in.Opcode != "IADD3" || len(in.Operands) == 0 || in.Operands[0].Kind != sass.OperandReg {
			continue
		}
		if n, ok := selfAdd(in, in.Operands[0].Reg); ok && n != 0 {
			out = append(out, max(n, -n))
		}
	}
	return out
}

// globalLoadsIn counts the global loads in loop li's blocks.
func (c *code) globalLoadsIn(li int) int {
	n := 0
	for _, i := range c.loopInsts(li) {
		if isGlobalLoad(&c.F.Insts[i]) {
			n++
		}
	}
	return n
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
