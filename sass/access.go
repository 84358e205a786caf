package sass

import (
	"math"
	"strconv"
)

// DataType is the arithmetic type of memory data.
type DataType uint8

// Data types.
const (
	TypeUnknown DataType = iota
	TypeInt
	TypeFloat
)

func (t DataType) String() string {
	switch t {
	case TypeInt:
		return "int"
	case TypeFloat:
		return "float"
	}
	return "unknown"
}

// AccessKind is GVProf's access kind of a memory instruction: Vec values of
// UnitBits bits each, of type Type. Fallback is set when slicing found no
// evidence and the kind is the instruction's width alone (units of
// min(width, 32) bits, as redshow's default) with type unknown.
type AccessKind struct {
	UnitBits int
	Vec      int
	Type     DataType
	Fallback bool
}

// Bits returns the access width.
func (k AccessKind) Bits() int { return k.UnitBits * k.Vec }

// String renders the kind as "float32x4", "int16" or "unknown32 (fallback)".
func (k AccessKind) String() string {
	if k.Vec == 0 {
		return "none"
	}
	s := k.Type.String() + strconv.Itoa(k.UnitBits)
	if k.Vec > 1 {
		s += "x" + strconv.Itoa(k.Vec)
	}
	if k.Fallback {
		s += " (fallback)"
	}
	return s
}

func fallbackKind(bits int) AccessKind {
	u := bits
	if u > 32 {
		u = 32
	}
	if u <= 0 {
		u, bits = 32, 32
	}
	return AccessKind{UnitBits: u, Vec: bits / u, Type: TypeUnknown, Fallback: true}
}

func makeKind(t DataType, unit, bits int) AccessKind {
	if unit <= 0 || unit > bits || bits%unit != 0 {
		unit = bits
		if unit > 64 {
			unit = 32
		}
	}
	return AccessKind{UnitBits: unit, Vec: bits / unit, Type: t}
}

// kindTarget reports whether access kinds are inferred for in: data
// accesses that the Sanitizer API can report (not constant, texture or
// surface loads).
func kindTarget(in *Instruction) bool {
	if in.Class != ClassMemory || in.Mem.Op == MemNone || in.Never() {
		return false
	}
	switch in.Mem.Space {
	case SpaceGlobal, SpaceShared, SpaceLocal, SpaceGeneric:
		return true
	}
	return false
}

// inferKinds runs GVProf's bidirectional slicing for every memory
// instruction: forward from a load to the consumers of the loaded
// registers, backward from a store to the producers of the stored
// registers, through moves, reversing direction at loads and stores (no
// tracking through memory). The nearest typed instruction decides; float
// evidence wins over integer evidence at the same distance (bit tricks on
// floats are common, float arithmetic on integers is not). Stores of
// constants are decided by the constant's plausibility as an integer or a
// float.
func inferKinds(f *Function, du *DefUse) []AccessKind {
	kinds := make([]AccessKind, len(f.Insts))
	for i := range f.Insts {
		in := &f.Insts[i]
		if !kindTarget(in) {
			continue
		}
		kinds[i] = inferKind(f, du, i)
	}
	return kinds
}

func inferKind(f *Function, du *DefUse, i int) AccessKind {
	in := &f.Insts[i]
	bits := in.Mem.Bits
	if in.Mem.Async || in.Never() {
		return fallbackKind(bits)
	}
	if in.Mem.Op == MemAtomic || in.Mem.Op == MemReduce {
		t, unit := atomicType(in.Mods)
		if unit == 0 {
			unit = bits
		}
		return makeKind(t, unit, bits)
	}
	s := slicer{f: f, du: du, seen: map[sliceItem]bool{}}
	if in.Mem.Op == MemLoad {
		for _, r := range dataDefs(in, du.Defs[i]) {
			s.push(sliceItem{i: i, r: r, fwd: true}, 0)
		}
	} else {
		for _, r := range storeRegs(in) {
			s.push(sliceItem{i: i, r: r, fwd: false}, 0)
		}
	}
	if t, unit, ok := s.run(); ok {
		return makeKind(t, unit, bits)
	}
	if in.Mem.Op == MemStore {
		if t, unit, ok := constKind(f, du, i, bits); ok {
			return makeKind(t, unit, bits)
		}
	}
	return fallbackKind(bits)
}

// dataDefs keeps the general and uniform registers of a definition list.
func dataDefs(in *Instruction, defs []Reg) []Reg {
	var out []Reg
	for _, r := range defs {
		if k := r.Kind(); k == KindR || k == KindUR {
			out = append(out, r)
		}
	}
	return out
}

// storeRegs returns the data registers a store or atomic writes to memory:
// the register operands after the memory operand.
func storeRegs(in *Instruction) []Reg {
	var out []Reg
	seenMem := false
	nd := destCount(in)
	for k := range in.Operands {
		o := &in.Operands[k]
		if o.Kind == OperandMem {
			seenMem = true
			continue
		}
		if seenMem && o.Kind == OperandReg && (o.Reg.Kind() == KindR || o.Reg.Kind() == KindUR) {
			out = appendRegs(out, o.Reg, regWidth(in, k, false, nd))
		}
	}
	return out
}

type sliceItem struct {
	i   int
	r   Reg
	fwd bool
}

type evidence struct {
	t     DataType
	unit  int
	depth int
}

type slicer struct {
	f     *Function
	du    *DefUse
	seen  map[sliceItem]bool
	queue []sliceItem
	depth []int
	found []evidence
}

const maxSliceSteps = 512

func (s *slicer) push(it sliceItem, d int) {
	if s.seen[it] {
		return
	}
	s.seen[it] = true
	s.queue = append(s.queue, it)
	s.depth = append(s.depth, d)
}

func (s *slicer) note(t DataType, unit, d int) {
	if t != TypeUnknown {
		s.found = append(s.found, evidence{t, unit, d})
	}
}

// run searches breadth first and returns the decision of the nearest
// evidence.
func (s *slicer) run() (DataType, int, bool) {
	best := -1
	for head := 0; head < len(s.queue) && head < maxSliceSteps; head++ {
		it, d := s.queue[head], s.depth[head]
		if best >= 0 && d > best {
			break
		}
		if it.fwd {
			for _, u := range s.du.Users(it.i, it.r) {
				s.visit(int(u), it.r, false, d+1)
			}
		} else {
			for _, p := range s.du.Reaching(it.i, it.r) {
				if p >= 0 {
					s.visit(int(p), it.r, true, d+1)
				}
			}
		}
		for _, e := range s.found {
			if best < 0 || e.depth < best {
				best = e.depth
			}
		}
	}
	if best < 0 {
		return TypeUnknown, 0, false
	}
	var pick *evidence
	for k := range s.found {
		e := &s.found[k]
		if e.depth != best {
			continue
		}
		// Float beats int at the same distance; between ints the wider
		// unit wins, since 64-bit evidence (a register pair used as one
		// integer) is specific while word-wise ops on a 64-bit value are not.
		if pick == nil || (pick.t != TypeFloat && e.t == TypeFloat) || (pick.t == TypeInt && e.t == TypeInt && e.unit > pick.unit) {
			pick = e
		}
	}
	return pick.t, pick.unit, true
}

// visit looks at instruction j, which reads r (asDef false) or writes r
// (asDef true), collects evidence and queues further steps.
func (s *slicer) visit(j int, r Reg, asDef bool, d int) {
	in := &s.f.Insts[j]
	role, opIdx := regRole(in, r, asDef)
	switch role {
	case roleAddr:
		w := 32
		if opIdx >= 0 && in.Operands[opIdx].Pair {
			w = 64
		}
		s.note(TypeInt, w, d)
		return
	case roleGuard, roleNone:
		return
	}
	switch in.Class {
	case ClassFloat, ClassInteger, ClassConvert:
		t, unit := typeOf(in, opIdx, asDef)
		if in.Class == ClassInteger && wideIntWord(s.f, s.du, j, r, asDef) {
			unit = 64
		}
		s.note(t, unit, d)
	case ClassMove:
		if asDef {
			for k := destCount(in); k < len(in.Operands); k++ {
				o := &in.Operands[k]
				if o.Kind == OperandReg && (o.Reg.Kind() == KindR || o.Reg.Kind() == KindUR) {
					for _, src := range appendRegs(nil, o.Reg, regWidth(in, k, false, destCount(in))) {
						s.push(sliceItem{i: j, r: src, fwd: false}, d)
					}
				}
			}
		} else {
			for _, dst := range dataDefs(in, s.du.Defs[j]) {
				s.push(sliceItem{i: j, r: dst, fwd: true}, d)
			}
		}
	case ClassMemory:
		if in.Mem.Op == MemAtomic || in.Mem.Op == MemReduce {
			if t, unit := atomicType(in.Mods); t == TypeFloat {
				s.note(t, unit, d)
				return
			}
		}
		if asDef && (in.Mem.Op == MemLoad || in.Mem.Op == MemAtomic) {
			// a value that came from memory: look at its other uses
			s.push(sliceItem{i: j, r: r, fwd: true}, d)
		} else if !asDef && (in.Mem.Op == MemStore || in.Mem.Op == MemAtomic || in.Mem.Op == MemReduce) {
			// a value stored again: look at its other producers
			s.push(sliceItem{i: j, r: r, fwd: false}, d)
		}
	}
}

// wideIntWord reports whether integer instruction j treats r, which it
// reads (asDef false) or writes, as one word of a 64-bit integer made of the
// pair (lo, lo+1). SASS does 64-bit integer arithmetic word by word, so the
// evidence is in how the words are tied together:
//   - a funnel shift reads both words as one value: SHF.L.U64.HI R8, R2,
//     0x2, R3; LEA.HI.X R3, R4, UR9, R5, 0x2, P1;
//   - the high word is the sign extension of the low word:
//     SHF.R.S32.HI R7, RZ, 0x1f, R6;
//   - a carry chain: the low-word instruction's carry (or compare) predicate
//     feeds a .X/.EX instruction that handles the next register in the same
//     role (IADD3 R6, P0, P1, ... with IADD3.X R7, ..., P0, P1; LEA R2, P1,
//     R4, ... with LEA.HI.X ..., R5, ..., P1; ISETP.U32 P0, R2 with
//     ISETP.EX P0, R3, ..., P0).
//
// A pair of unrelated 32-bit values (int2) meets none of these.
func wideIntWord(f *Function, du *DefUse, j int, r Reg, asDef bool) bool {
	if k := r.Kind(); k != KindR && k != KindUR {
		return false
	}
	in := &f.Insts[j]
	lo, hi := pairOf(r, -1), pairOf(r, +1)
	nd := destCount(in)
	ops := in.Operands
	funnel := (in.Op == "SHF" || in.Op == "USHF") && (hasMod(in.Mods, "U64") || hasMod(in.Mods, "S64")) ||
		(in.Op == "LEA" || in.Op == "ULEA") && hasMod(in.Mods, "HI")
	if funnel && !asDef && len(ops) > nd+2 && ops[nd].Kind == OperandReg && ops[nd+2].Kind == OperandReg {
		// SHF and LEA.HI shift the pair {c:a}, their first and third sources
		a, c := ops[nd].Reg, ops[nd+2].Reg
		if a.Tracked() && c == pairOf(a, +1) && (r == a || r == c) {
			return true
		}
	}
	if asDef && (in.Op == "SHF" || in.Op == "USHF") && hasMod(in.Mods, "S32") && hasMod(in.Mods, "HI") &&
		len(ops) == 4 && ops[0].Kind == OperandReg && ops[0].Reg == r && ops[2].Kind == OperandImm && ops[2].Imm == 31 &&
		ops[3].Kind == OperandReg && lo.Tracked() && ops[3].Reg == lo {
		return true
	}
	if hasMod(in.Mods, "X") || hasMod(in.Mods, "EX") {
		// the high-word end: the low word is at the producer of a carry-in
		if !lo.Tracked() {
			return false
		}
		for k := nd; k < len(in.Operands); k++ {
			o := &in.Operands[k]
			if o.Kind != OperandReg || !isPred(o.Reg) {
				continue
			}
			for _, p := range du.Reaching(j, o.Reg) {
				if p < 0 || !writesPred(&f.Insts[p], o.Reg) {
					continue
				}
				if sameRole(&f.Insts[p], lo, asDef) {
					return true
				}
			}
		}
		return false
	}
	// the low-word end: a predicate it writes is read by a .X/.EX
	// instruction that handles the high word
	if !hi.Tracked() {
		return false
	}
	for k := 0; k < nd; k++ {
		o := &in.Operands[k]
		if o.Kind != OperandReg || !isPred(o.Reg) || !o.Reg.Tracked() {
			continue
		}
		for _, u := range du.Users(j, o.Reg) {
			h := &f.Insts[u]
			if (hasMod(h.Mods, "X") || hasMod(h.Mods, "EX")) && sameRole(h, hi, asDef) {
				return true
			}
		}
	}
	return false
}

// pairOf returns the register delta away from r, or RZ where there is none.
func pairOf(r Reg, delta int) Reg {
	i := r.Index() + delta
	if !r.Tracked() || i < 0 || i >= zeroIndex {
		return RZ
	}
	return MakeReg(r.Kind(), i)
}

func isPred(r Reg) bool { k := r.Kind(); return k == KindP || k == KindUP }

// sameRole reports whether in writes r (asDef) or reads it as data.
func sameRole(in *Instruction, r Reg, asDef bool) bool {
	role, _ := regRole(in, r, asDef)
	return role == roleData
}

func writesPred(in *Instruction, p Reg) bool {
	nd := destCount(in)
	for k := 0; k < nd && k < len(in.Operands); k++ {
		if o := &in.Operands[k]; o.Kind == OperandReg && o.Reg == p {
			return true
		}
	}
	return false
}

type regRoleKind uint8

const (
	roleNone regRoleKind = iota
	roleData
	roleAddr
	roleGuard
)

// regRole finds the operand of in that names r as a destination (asDef) or
// as a source, and says whether r is data, part of an address or the guard.
func regRole(in *Instruction, r Reg, asDef bool) (regRoleKind, int) {
	nd := destCount(in)
	for k := range in.Operands {
		o := &in.Operands[k]
		switch o.Kind {
		case OperandReg:
			if (k < nd) != asDef {
				continue
			}
			for _, q := range appendRegs(nil, o.Reg, regWidth(in, k, k < nd, nd)) {
				if q == r {
					return roleData, k
				}
			}
		case OperandMem, OperandConst:
			if asDef {
				continue
			}
			for _, q := range o.addrRegs(nil) {
				if q == r {
					return roleAddr, k
				}
			}
		}
	}
	if !asDef && in.Guard == r {
		return roleGuard, -1
	}
	return roleNone, -1
}

// typeOf returns the type and unit size that a typed instruction gives the
// operand opIdx.
func typeOf(in *Instruction, opIdx int, asDef bool) (DataType, int) {
	nd := destCount(in)
	width := 32
	if opIdx >= 0 {
		width = 32 * regWidth(in, opIdx, asDef, nd)
	}
	switch in.Class {
	case ClassConvert:
		dt, st := convTypes(in.Op, in.Mods)
		t := st
		if asDef {
			t = dt
		}
		if in.Op == "F2FP" || in.Op == "UF2FP" {
			return TypeFloat, 16
		}
		if isFloatType(t) {
			return TypeFloat, typeBits(t)
		}
		return TypeInt, typeBits(t)
	case ClassFloat:
		switch in.Op[0] {
		case 'D':
			return TypeFloat, 64
		case 'H':
			if in.Op == "HMMA" || in.Op == "HGMMA" {
				ts := typeMods(in.Mods)
				if asDef && len(ts) > 0 {
					return TypeFloat, typeBits(ts[0])
				}
				if len(ts) > 1 {
					return TypeFloat, typeBits(ts[1])
				}
			}
			if hasMod(in.Mods, "F32") && asDef {
				return TypeFloat, 32
			}
			return TypeFloat, 16
		}
		if in.Op == "MUFU" && (hasMod(in.Mods, "RCP64H") || hasMod(in.Mods, "RSQ64H")) {
			return TypeFloat, 64
		}
		return TypeFloat, width
	case ClassInteger:
		if in.Op == "IMMA" || in.Op == "IGMMA" {
			if asDef {
				return TypeInt, 32
			}
			return TypeInt, 8
		}
		return TypeInt, width
	}
	return TypeUnknown, 0
}

// constKind decides a store whose data registers all hold constants
// materialised by moves (MOV R5, 0x40080000; HFMA2.MMA R4, -RZ, RZ, 0, 0)
// by whether the combined value is plausible as an integer or as a float.
func constKind(f *Function, du *DefUse, i, bits int) (DataType, int, bool) {
	in := &f.Insts[i]
	regs := storeRegs(in)
	if len(regs) == 0 {
		return TypeUnknown, 0, false
	}
	vals := make([]uint32, len(regs))
	for k, r := range regs {
		v, ok := constValue(f, du, i, r, 0)
		if !ok {
			return TypeUnknown, 0, false
		}
		vals[k] = v
	}
	unit := 32
	if bits >= 64 && len(vals)%2 == 0 {
		unit = 64
	}
	if bits < 32 {
		unit = bits
	}
	var t DataType
	for k := 0; k < len(vals); k += unit / 32 {
		var v uint64
		var ut DataType
		switch unit {
		case 64:
			v = uint64(vals[k+1])<<32 | uint64(vals[k])
			ut = plausible64(v)
		case 32:
			ut = plausible32(vals[k])
		default:
			return TypeUnknown, 0, false
		}
		if ut == TypeUnknown {
			continue
		}
		if t != TypeUnknown && t != ut {
			return TypeUnknown, 0, false
		}
		t = ut
	}
	if t == TypeUnknown {
		return TypeUnknown, 0, false
	}
	if unit == 64 && t == TypeInt {
		// a pair of small integers is more likely two 32-bit values
		hiSmall := true
		for k := 1; k < len(vals); k += 2 {
			if vals[k] != 0 && vals[k] != 0xffffffff {
				hiSmall = false
			}
		}
		if !hiSmall {
			unit = 32
		}
	}
	return t, unit, true
}

// constValue follows single reaching definitions of r at instruction i
// through moves to a constant.
func constValue(f *Function, du *DefUse, i int, r Reg, depth int) (uint32, bool) {
	if depth > 8 {
		return 0, false
	}
	defs := du.Reaching(i, r)
	if len(defs) != 1 || defs[0] < 0 {
		return 0, false
	}
	j := int(defs[0])
	in := &f.Insts[j]
	if in.Class != ClassMove || in.Guarded() {
		return 0, false
	}
	nd := destCount(in)
	ops := in.Operands
	switch {
	case in.Op == "HFMA2" && len(ops) == 5:
		hi, ok1 := halfBits(ops[3])
		lo, ok2 := halfBits(ops[4])
		return uint32(hi)<<16 | uint32(lo), ok1 && ok2
	case in.Op == "CS2R" && len(ops) == 2 && ops[1].Kind == OperandSpecial && ops[1].Name == "SRZ":
		return 0, true
	}
	if len(ops) == 0 {
		return 0, false
	}
	src := ops[len(ops)-1]
	if len(ops)-1 < nd {
		return 0, false
	}
	switch src.Kind {
	case OperandImm:
		// MOV.64 R4, 0x4008000000000000 sets R4 to the low and R5 to the high word
		word := uint(0)
		if nd > 0 && ops[0].Kind == OperandReg && r.Index() > ops[0].Reg.Index() {
			word = uint(r.Index() - ops[0].Reg.Index())
		}
		if word > 1 {
			return 0, false
		}
		return uint32(uint64(src.Imm) >> (32 * word)), true
	case OperandReg:
		if src.Reg == RZ || src.Reg == URZ {
			return 0, true
		}
		return constValue(f, du, j, src.Reg, depth+1)
	}
	return 0, false
}

// halfBits converts an HFMA2 immediate (printed as a decimal float) to its
// IEEE binary16 bits.
func halfBits(o Operand) (uint16, bool) {
	switch o.Kind {
	case OperandImm:
		return uint16(o.Imm), true
	case OperandFloat:
		return float16bits(o.Float)
	}
	return 0, false
}

// float16bits returns the binary16 encoding of v when v is exactly
// representable.
func float16bits(v float64) (uint16, bool) {
	if v == 0 {
		if math.Signbit(v) {
			return 0x8000, true
		}
		return 0, true
	}
	if math.IsInf(v, 0) {
		if v < 0 {
			return 0xfc00, true
		}
		return 0x7c00, true
	}
	if math.IsNaN(v) {
		return 0x7e00, true
	}
	var sign uint16
	if v < 0 {
		sign = 0x8000
		v = -v
	}
	frac, exp := math.Frexp(v) // v = frac * 2^exp, frac in [0.5, 1)
	e := exp - 1               // v = 1.x * 2^e
	if e >= -14 && e <= 15 {
		m := (frac*2 - 1) * 1024
		if m != math.Trunc(m) {
			return 0, false
		}
		return sign | uint16(e+15)<<10 | uint16(m), true
	}
	// subnormal: v = m * 2^-24
	m := v * (1 << 24)
	if m != math.Trunc(m) || m >= 1024 || m < 1 {
		return 0, false
	}
	return sign | uint16(m), true
}

// plausible32 says whether a 32-bit constant looks like an integer (small
// magnitude) or a float (moderate magnitude when read as binary32).
func plausible32(v uint32) DataType {
	if v == 0 {
		return TypeUnknown
	}
	if s := int32(v); s > -1<<24 && s < 1<<24 {
		return TypeInt
	}
	f := math.Float32frombits(v)
	if a := math.Abs(float64(f)); a > 1e-30 && a < 1e30 {
		return TypeFloat
	}
	return TypeUnknown
}

func plausible64(v uint64) DataType {
	if v == 0 {
		return TypeUnknown
	}
	if s := int64(v); s > -1<<40 && s < 1<<40 {
		return TypeInt
	}
	f := math.Float64frombits(v)
	if a := math.Abs(f); a > 1e-100 && a < 1e100 {
		return TypeFloat
	}
	return TypeUnknown
}
