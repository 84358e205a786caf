package sass

import "strings"

// typeMods lists a conversion's or MMA's type modifiers in order.
func typeMods(mods []string) []string {
	var ts []string
	for _, m := range mods {
		switch m {
		case "F16", "F32", "F64", "BF16", "TF32", "E4M3", "E5M2", "E2M1",
			"S8", "U8", "S16", "U16", "S32", "U32", "S64", "U64", "S4", "U4":
			ts = append(ts, m)
		}
	}
	return ts
}

func typeBits(t string) int {
	switch t {
	case "F64", "S64", "U64":
		return 64
	case "F16", "BF16", "S16", "U16":
		return 16
	case "S8", "U8", "E4M3", "E5M2":
		return 8
	case "S4", "U4", "E2M1":
		return 4
	}
	return 32
}

func isFloatType(t string) bool {
	switch t {
	case "F16", "F32", "F64", "BF16", "TF32", "E4M3", "E5M2", "E2M1":
		return true
	}
	return false
}

// convTypes returns the destination and source types of a conversion.
// nvdisasm prints "dst.src" when both differ from the default (F32 for the
// float side, S32 for the integer side) and only the non-default one
// otherwise.
func convTypes(op string, mods []string) (dst, src string) {
	ts := typeMods(mods)
	switch op {
	case "F2I", "F2IP", "UF2I":
		dst, src = "S32", "F32"
	case "I2F", "I2FP", "UI2F", "UI2FP":
		dst, src = "F32", "S32"
	case "F2F", "UF2F", "F2FP", "UF2FP":
		dst, src = "F32", "F32"
	case "I2I", "I2IP":
		dst, src = "S32", "S32"
	}
	switch {
	case len(ts) >= 2:
		return ts[0], ts[1]
	case len(ts) == 1:
		t := ts[0]
		switch op {
		case "F2I", "F2IP", "UF2I":
			if isFloatType(t) {
				return dst, t
			}
			return t, src
		case "I2F", "I2FP", "UI2F", "UI2FP":
			if isFloatType(t) {
				return t, src
			}
			return dst, t
		default:
			return t, src
		}
	}
	return dst, src
}

// mmaShapes gives m, n, k for the MMA shape modifiers.
var mmaShapes = map[string][3]int{
	"1688": {16, 8, 8}, "16816": {16, 8, 16}, "16832": {16, 8, 32}, "884": {8, 8, 4},
	"8816": {8, 8, 16}, "8832": {8, 8, 32}, "168256": {16, 8, 256}, "16864": {16, 8, 64},
	"1684": {16, 8, 4},
}

// mmaRegs returns the register counts of the D, A, B and C operands of a
// warp-level MMA (HMMA, IMMA, DMMA), or ok=false when the shape is unknown.
func mmaRegs(op string, mods []string) (d, a, b, c int, ok bool) {
	var shape [3]int
	for _, m := range mods {
		if s, found := mmaShapes[m]; found {
			shape, ok = s, true
		}
	}
	if !ok {
		return 0, 0, 0, 0, false
	}
	ts := typeMods(mods)
	accum, in := 16, 16
	switch op {
	case "HMMA":
		if len(ts) > 0 {
			accum = typeBits(ts[0])
		}
		if len(ts) > 1 {
			in = typeBits(ts[1])
		}
	case "IMMA":
		accum, in = 32, 8
		if len(ts) > 0 {
			in = typeBits(ts[len(ts)-1])
		}
	case "DMMA":
		accum, in = 64, 64
	default:
		return 0, 0, 0, 0, false
	}
	regs := func(elems, bits int) int {
		n := (elems*bits + 1023) / 1024 // elements per thread * bits / 32, rounded up
		if n < 1 {
			n = 1
		}
		return n
	}
	m, n, k := shape[0], shape[1], shape[2]
	d = regs(m*n, accum)
	a = regs(m*k, in)
	b = regs(k*n, in)
	return d, a, b, d, true
}

// setpLike opcodes write two predicates.
var twoDest = set("ISETP", "FSETP", "DSETP", "HSETP2", "UISETP", "PSETP", "UPSETP", "PLOP3", "UPLOP3", "VOTE", "VOTEU", "SHFL", "FCHK")

// destCount returns how many leading operands are destinations.
func destCount(in *Instruction) int {
	ops := in.Operands
	if len(ops) == 0 || in.Flow != FlowNone {
		return 0
	}
	if in.Class == ClassMemory {
		switch in.Mem.Op {
		case MemStore, MemReduce:
			return 0
		}
		if in.Mem.Async {
			return 0
		}
		for i := range ops {
			if ops[i].Kind == OperandMem || ops[i].Kind == OperandConst {
				return i
			}
		}
		return 0
	}
	switch in.Op {
	case "BSSY", "BMOV":
		if ops[0].Kind == OperandReg {
			return 1
		}
		return 0
	case "FCHK":
		return 1
	}
	if in.Class == ClassSync {
		return 0
	}
	if ops[0].Kind != OperandReg {
		return 0
	}
	if twoDest[in.Op] {
		if len(ops) >= 2 && ops[1].Kind == OperandReg {
			return 2
		}
		return 1
	}
	if in.Op == "LOP3" || in.Op == "ULOP3" {
		// LOP3.LUT P0, RZ, R4, 0x3, RZ, 0xc0, !PT writes a predicate and a register
		if k := ops[0].Reg.Kind(); (k == KindP || k == KindUP) && len(ops) > 1 && ops[1].Kind == OperandReg {
			return 2
		}
		return 1
	}
	n := 1
	if k := ops[0].Reg.Kind(); k == KindR || k == KindUR {
		// carry-out predicates: IADD3 R6, P0, ..., LEA R0, P0, ...
		for n < len(ops) {
			o := &ops[n]
			if o.Kind != OperandReg || o.Not || o.Reg == PR || o.Reg == UPR {
				break
			}
			if k := o.Reg.Kind(); k != KindP && k != KindUP {
				break
			}
			n++
		}
		if n == len(ops) { // all "destinations": the predicates were sources after all
			n = 1
		}
	}
	return n
}

// regWidth returns how many consecutive registers operand i names.
func regWidth(in *Instruction, i int, dest bool, ndest int) int {
	o := &in.Operands[i]
	if o.Kind != OperandReg {
		return 1
	}
	k := o.Reg.Kind()
	if k != KindR && k != KindUR {
		return 1
	}
	if o.Pair {
		return 2
	}
	words := func(bits int) int {
		if bits <= 32 {
			return 1
		}
		return bits / 32
	}
	switch in.Op {
	case "DADD", "DMUL", "DFMA", "DMNMX", "DSETP", "DSET", "DSEL":
		return 2
	case "F2F", "F2I", "I2F", "I2I", "F2IP", "I2FP", "UF2F", "UF2I", "UI2F", "I2IP":
		dt, st := convTypes(in.Op, in.Mods)
		if dest {
			return words(typeBits(dt))
		}
		return words(typeBits(st))
	case "IMAD", "UIMAD":
		if hasMod(in.Mods, "WIDE") && (dest || i == ndest+2) {
			return 2
		}
		return 1
	case "CS2R":
		if dest && !hasMod(in.Mods, "32") {
			return 2
		}
		return 1
	case "HMMA", "IMMA", "DMMA":
		if d, a, b, c, ok := mmaRegs(in.Op, in.Mods); ok {
			switch i - ndest {
			case -1:
				return d
			case 0:
				return a
			case 1:
				return b
			case 2:
				return c
			}
		}
		return 1
	}
	if in.Class == ClassMemory {
		return words(in.Mem.Bits)
	}
	if in.Class == ClassInteger && hasMod(in.Mods, "64") {
		return 2
	}
	if in.Class == ClassMove && hasMod(in.Mods, "64") {
		return 2
	}
	return 1
}

// appendRegs appends r and the width-1 registers after it, skipping RZ/PT.
func appendRegs(dst []Reg, r Reg, width int) []Reg {
	if !r.Tracked() {
		return dst
	}
	if r == PR || r == UPR {
		k := r.Kind()
		for i := 0; i < 7; i++ {
			dst = append(dst, MakeReg(k, i))
		}
		return dst
	}
	for w := 0; w < width; w++ {
		idx := r.Index() + w
		if idx >= zeroIndex-1 {
			break
		}
		dst = append(dst, MakeReg(r.Kind(), idx))
	}
	return dst
}

// instRegs returns the registers an instruction writes and reads, without
// call summaries and scoreboards. Each dest operand's registers are grouped
// so that destRegs[k] are the registers of destination operand k.
func instRegs(in *Instruction) (defs, uses []Reg) {
	if in.Never() {
		return nil, nil
	}
	nd := destCount(in)
	for i := range in.Operands {
		o := &in.Operands[i]
		switch o.Kind {
		case OperandReg:
			w := regWidth(in, i, i < nd, nd)
			if i < nd {
				defs = appendRegs(defs, o.Reg, w)
			} else {
				uses = appendRegs(uses, o.Reg, w)
			}
		case OperandMem, OperandConst:
			uses = o.addrRegs(uses)
		}
	}
	if in.Op == "BREAK" {
		defs = append(defs, uses...)
	}
	if in.Guard.Tracked() {
		uses = append(uses, in.Guard)
	}
	return defs, uses
}

// regSummary is what a function may write and read, callees included.
type regSummary struct {
	defs map[Reg]bool
	uses map[Reg]bool
}

// summaries computes, for every function, the registers it and its callees
// may write and read (a fixed point over the call graph, so recursion is
// fine).
func (m *Module) summaries() map[*Function]*regSummary {
	m.summOnce.Do(func() {
		s := make(map[*Function]*regSummary, len(m.Functions))
		for _, f := range m.Functions {
			rs := &regSummary{defs: map[Reg]bool{}, uses: map[Reg]bool{}}
			for i := range f.Insts {
				d, u := instRegs(&f.Insts[i])
				for _, r := range d {
					rs.defs[r] = true
				}
				for _, r := range u {
					rs.uses[r] = true
				}
			}
			s[f] = rs
		}
		for changed := true; changed; {
			changed = false
			for _, f := range m.Functions {
				rs := s[f]
				for i := range f.Insts {
					in := &f.Insts[i]
					if in.Flow != FlowCall || in.Callee == "" {
						continue
					}
					c := m.byName[in.Callee]
					if c == nil || c == f {
						continue
					}
					for r := range s[c].defs {
						if !rs.defs[r] {
							rs.defs[r] = true
							changed = true
						}
					}
					for r := range s[c].uses {
						if !rs.uses[r] {
							rs.uses[r] = true
							changed = true
						}
					}
				}
			}
		}
		m.summ = s
	})
	return m.summ
}

// regNames renders a register list (tests and debugging).
func regNames(rs []Reg) string {
	var sb strings.Builder
	for i, r := range rs {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(r.String())
	}
	return sb.String()
}
