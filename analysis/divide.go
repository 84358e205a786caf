package analysis

import (
	"fmt"
	"slices"
	"strings"

	"gpuprof/sass"
)

// IEEE float division (issue 25, item 27). nvcc compiles x / y to an
// inlined fast path (a reciprocal, MUFU.RCP, refined by multiply-adds into
// the quotient), an FCHK that tests whether that quotient is exact, and a
// branch around a call of the accurate slow path
// (__cuda_sm3x_div_rn_*_slowpath). Fast math (__fdividef, -use_fast_math)
// keeps the reciprocal and one multiply; the refinement, the check, the
// branch and the call go. None of it comes from a math header, so the
// line table names the user's line and libraryCode did not see it: fast
// math advice on a division-heavy kernel counted only the slow path's own
// samples.

// divisions are a function's IEEE divisions: of[i] is the anchor of the
// division whose sequence holds instruction i (-1: none): the FCHK of a
// float division, the MUFU.RCP64H of a double one (f64[i]); rcp[i] says
// that i is a float division's reciprocal. shared[a] says that the
// division anchored at a divides by the value an earlier division of the
// function divides by (same register, same reaching definitions).
type divisions struct {
	of     []int32
	rcp    []bool
	f64    []bool
	shared []bool
	// grouped[a]: the division anchored at a divides by a value another
	// division of the function divides by too (shared or its first).
	grouped []bool
}

// removed says whether instruction i is code fast math removes: a float
// division's sequence less the reciprocal, which __fdividef keeps (fast
// math leaves double precision as it is).
func (d *divisions) removed(i int) bool { return d.of[i] >= 0 && !d.rcp[i] && !d.f64[i] }

// divisionSequences finds, per FCHK of f, the instructions of its
// division: the FCHK; the multiply-adds and moves of its block that the
// quotient (the block's last FFMA after the FCHK) is computed from, back
// to the dividend and the divisor (the values the FCHK checks, which are
// the user's) and through the reciprocal (MUFU.RCP, which fast math
// keeps); the guarded branch that ends the block; and the block of the
// slow path's call (the return address, the CALL, the result's move).
// The one multiply that __fdividef keeps is counted with the rest: fast
// math's estimate errs by one FFMA a division.
func divisionSequences(f *sass.Function) *divisions {
	d := &divisions{of: make([]int32, len(f.Insts)), rcp: make([]bool, len(f.Insts)),
		f64: make([]bool, len(f.Insts)), shared: make([]bool, len(f.Insts)), grouped: make([]bool, len(f.Insts))}
	for i := range d.of {
		d.of[i] = -1
	}
	out := make([]bool, len(f.Insts))
	var g *sass.CFG
	var du *sass.DefUse
	for i := range f.Insts {
		if f.Insts[i].Op != "FCHK" {
			continue
		}
		if g == nil {
			g, du = f.CFG(), f.DefUse()
		}
		b := g.BlockOf(i)
		if b < 0 {
			continue
		}
		blk := g.Blocks[b]
		out[i] = true
		// The operands' own definitions are the user's code.
		user := map[int32]bool{}
		for _, o := range f.Insts[i].Operands {
			if o.Kind == sass.OperandReg && o.Reg.Kind() == sass.KindR {
				for _, def := range du.Reaching(i, o.Reg) {
					user[def] = true
				}
			}
		}
		q := -1
		for j := i + 1; j < blk.End; j++ {
			if f.Insts[j].Op == "FFMA" {
				q = j
			}
		}
		if q >= 0 {
			markSlice(f, du, blk, q, user, out, d.rcp)
		}
		if last := blk.End - 1; last > i && f.Insts[last].Op == "BRA" && f.Insts[last].Guarded() {
			out[last] = true
		}
		for _, s := range blk.Succs {
			sb := g.Blocks[s]
			if !callsDivisionSlowPath(f, sb) {
				continue
			}
			for j := sb.Start; j < sb.End; j++ {
				if f.Insts[j].Op != "BSYNC" {
					out[j] = true
				}
			}
			// The slow path's result moved into the quotient's register,
			// in the block the call returns to.
			if j := sb.End; j < len(f.Insts) && isMove(&f.Insts[j]) {
				out[j] = true
			}
		}
		for j, m := range out {
			if m && d.of[j] < 0 {
				d.of[j] = int32(i)
			}
		}
	}
	if g == nil && slices.ContainsFunc(f.Insts, func(in sass.Instruction) bool { return isRcp64(&in) }) {
		g, du = f.CFG(), f.DefUse()
	}
	if g != nil {
		fp64DivisionSequences(f, g, du, d)
		sharedDivisors(f, du, d)
	}
	return d
}

// fp64DivisionSequences adds f's double divisions to d (issue 25, item
// 40). nvcc compiles x / y in double precision to a reciprocal estimate
// (MUFU.RCP64H of the divisor's high word, beside a move of its low
// word), two Newton steps (DFMA), the quotient and one correction (DMUL,
// DFMA), a check of the result's and the dividend's range (FFMA, FSETP),
// and a branch around a call of __cuda_sm20_div_rn_f64_full: about a
// dozen dependent double-precision operations at the DFMA unit's latency,
// where a multiply by a known reciprocal is one. The sequence is the
// anchor's block from the reciprocal on: what is computed from the
// reciprocal, the range checks the branch reads, the moves of constants
// feeding them, the branch, and the slow path's call block with the moves
// of its result.
func fp64DivisionSequences(f *sass.Function, g *sass.CFG, du *sass.DefUse, d *divisions) {
	for i := range f.Insts {
		in := &f.Insts[i]
		if !isRcp64(in) || d.of[i] >= 0 {
			continue
		}
		b := g.BlockOf(i)
		if b < 0 {
			continue
		}
		blk := g.Blocks[b]
		last := blk.End - 1
		if last <= i || f.Insts[last].Op != "BRA" || !f.Insts[last].Guarded() {
			continue // not the division's layout: a reciprocal of its own
		}
		slow := -1
		for _, s := range blk.Succs {
			if callsF64Division(f, g.Blocks[s]) {
				slow = s
			}
		}
		if slow < 0 {
			continue
		}
		out := map[int]bool{i: true}
		// Forward from the reciprocal, within the block.
		for j := i + 1; j < blk.End; j++ {
			for _, r := range du.Uses[j] {
				for _, def := range du.Reaching(j, r) {
					if out[int(def)] {
						out[j] = true
					}
				}
			}
		}
		// The range checks the branch reads, and the constants' moves.
		for j := i + 1; j < blk.End; j++ {
			if !out[j] {
				continue
			}
			for _, r := range du.Uses[j] {
				for _, def := range du.Reaching(j, r) {
					k := int(def)
					if k < blk.Start || k >= blk.End || out[k] {
						continue
					}
					if isMove(&f.Insts[k]) || j == last && f.Insts[k].Op == "FSETP" {
						out[k] = true
					}
				}
			}
		}
		sb := g.Blocks[slow]
		for j := sb.Start; j < sb.End; j++ {
			if f.Insts[j].Op != "BSYNC" {
				out[j] = true
			}
		}
		for j := sb.End; j < len(f.Insts) && j < sb.End+2 && isMove(&f.Insts[j]); j++ {
			out[j] = true // the result's two words
		}
		for j := range out {
			if d.of[j] < 0 {
				d.of[j], d.f64[j] = int32(i), true
			}
		}
	}
}

// isRcp64 reports whether in is a double reciprocal's estimate.
func isRcp64(in *sass.Instruction) bool { return in.Op == "MUFU" && hasModifier(in, "RCP64H") }

// callsF64Division reports whether block b calls CUDA's double division
// (__cuda_sm20_div_rn_f64_full and its rounding variants).
func callsF64Division(f *sass.Function, b sass.Block) bool { return callsDivision(f, b, "_f64") }

// sharedDivisors marks the divisions that divide by a value an earlier
// division of the function divides by: the same register with the same
// reaching definitions (none live on entry). Computing the reciprocal
// once and multiplying by it turns each of them into a multiply (issue 25,
// item 40: RSBench's complex division divides both parts by one
// denominator).
func sharedDivisors(f *sass.Function, du *sass.DefUse, d *divisions) {
	seen := map[string]bool{}
	first := map[string]int{}
	for a := range f.Insts {
		if int(d.of[a]) != a {
			continue // not an anchor
		}
		ops := f.Insts[a].Operands
		if len(ops) == 0 || ops[len(ops)-1].Kind != sass.OperandReg {
			continue
		}
		r := ops[len(ops)-1].Reg
		defs := du.Reaching(a, r)
		if len(defs) == 0 || slices.Contains(defs, sass.Entry) {
			continue
		}
		k := fmt.Sprint(r, defs)
		d.shared[a] = seen[k]
		if seen[k] {
			d.grouped[a], d.grouped[first[k]] = true, true
		} else {
			first[k] = a
		}
		seen[k] = true
	}
}

// markSlice marks the instructions of block blk, from q back, that q's
// value is computed from by multiply-adds and moves, leaving out those in
// user; the reciprocal is marked in out and rcp, and not followed.
func markSlice(f *sass.Function, du *sass.DefUse, blk sass.Block, q int, user map[int32]bool, out, rcp []bool) {
	seen := map[int]bool{}
	work := []int{q}
	for len(work) > 0 {
		j := work[len(work)-1]
		work = work[:len(work)-1]
		if seen[j] || user[int32(j)] || j < blk.Start || j >= blk.End {
			continue
		}
		seen[j] = true
		in := &f.Insts[j]
		switch {
		case in.Op == "FFMA" || in.Op == "FMUL" || isMove(in):
			out[j] = true
		case in.Op == "MUFU" && hasModifier(in, "RCP"):
			out[j], rcp[j] = true, true // fast math keeps it; its source is the divisor
			continue
		default:
			continue // anything else is not the division's
		}
		for _, r := range du.Uses[j] {
			if r.Kind() != sass.KindR {
				continue
			}
			for _, d := range du.Reaching(j, r) {
				work = append(work, int(d))
			}
		}
	}
}

// isMove reports whether in copies a register or a constant (MOV, or
// IMAD.MOV as ptxas writes one).
func isMove(in *sass.Instruction) bool {
	return in.Op == "MOV" || in.Op == "IMAD" && hasModifier(in, "MOV")
}

// callsDivisionSlowPath reports whether block b calls the accurate
// division's slow path.
func callsDivisionSlowPath(f *sass.Function, b sass.Block) bool {
	return callsDivision(f, b, "slowpath")
}

// callsDivision reports whether block b calls one of CUDA's division
// routines whose name holds kind.
func callsDivision(f *sass.Function, b sass.Block, kind string) bool {
	for j := b.Start; j < b.End; j++ {
		c := f.Insts[j].Callee
		if f.Insts[j].Op == "CALL" && strings.Contains(c, "_div_") && strings.Contains(c, kind) {
			return true
		}
	}
	return false
}

// divisorInvariant reports whether the divisor of the division checked by
// FCHK i is the same in every iteration of the innermost loop holding it
// (a constant or a kernel parameter, or a register defined outside the
// loop): then the reciprocal can be computed once before the loop and the
// division becomes a multiply.
func divisorInvariant(c *code, i int) bool {
	li := c.Loop[i]
	ops := c.F.Insts[i].Operands
	if li < 0 || len(ops) == 0 {
		return false
	}
	o := ops[len(ops)-1]
	switch o.Kind {
	case sass.OperandImm, sass.OperandFloat:
		return true
	case sass.OperandConst: // a kernel parameter; not one indexed by a register
		return o.Base == 0 && o.BankReg == 0
	case sass.OperandReg:
	default:
		return false
	}
	defs := c.F.DefUse().Reaching(i, o.Reg)
	if len(defs) == 0 {
		return false // a parameter in a register, or unknown: not claimed
	}
	for _, d := range defs {
		if c.inLoop(int(d), li) {
			return false
		}
	}
	return true
}
