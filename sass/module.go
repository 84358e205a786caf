package sass

import (
	"sort"
	"strings"
	"sync"
)

// Pos is a source position.
type Pos struct {
	File int32 // index into Module.Files; -1 when unknown
	Line int32
}

// NoPos is the position of code without line information.
var NoPos = Pos{File: -1}

// Location is the line-map entry of an instruction: its innermost source
// position and the call sites of the inlined frames that led there.
//
// For code of the function itself Calls is empty. For code inlined from g
// into f at f.cu:10, Pos is in g and Calls is [f.cu:10]; deeper inlining
// appends further call sites (outermost first).
type Location struct {
	Pos
	Calls []Pos
}

// Instruction is one parsed SASS instruction.
type Instruction struct {
	Offset   uint64   // byte offset in the section, as nvdisasm prints it
	Guard    Reg      // guard predicate; 0 when unguarded
	GuardNot bool     // the guard is negated (@!P0)
	Opcode   string   // opcode with modifiers, e.g. "LDG.E.128"
	Op       string   // base opcode, e.g. "LDG"
	Mods     []string // modifiers, e.g. ["E", "128"]; shared between instructions, do not modify
	Operands []Operand
	Notes    []string // nvdisasm's (*"..."*) annotations

	Targets []uint64 // branch targets (section offsets): BRA/JMP label, BRX BRANCH_TARGETS
	Callee  string   // CALL target function; "" for indirect calls

	Loc  int32     // index into Module.Locations; -1 when unknown
	Enc  [2]uint64 // the 128-bit encoding, low word first, when HasEnc
	Line int       // line of the nvdisasm text this came from; 0 if not parsed from text

	HasEnc bool
	Class  Class   // derived from the opcode
	Flow   Flow    // derived from the opcode
	Mem    MemInfo // derived from the opcode
}

// Control returns the decoded control bits; ok is false when the encoding
// is unknown.
func (in *Instruction) Control() (c Control, ok bool) {
	if !in.HasEnc {
		return Control{WriteBarrier: -1, ReadBarrier: -1}, false
	}
	return DecodeControl(in.Enc[1]), true
}

// Guarded reports whether the instruction executes conditionally. A guard
// of PT is no condition; @!PT never executes and counts as guarded.
func (in *Instruction) Guarded() bool {
	if in.Guard == 0 {
		return false
	}
	return !(in.Guard.Constant() && !in.GuardNot)
}

// Never reports whether the guard is @!PT or @!UPT (the instruction is a
// placeholder that never executes).
func (in *Instruction) Never() bool { return in.Guard.Constant() && in.GuardNot }

// conditional reports whether a branch may fall through: it is guarded,
// names a predicate operand, or is BRA.DIV/BRA.CONV style.
func (in *Instruction) conditional() bool {
	if in.Guarded() {
		return true
	}
	for _, m := range in.Mods {
		switch m {
		case "DIV", "CONV", "ANY", "ALL":
			return true
		}
	}
	for i := range in.Operands {
		o := &in.Operands[i]
		if o.Kind == OperandReg && (o.Reg.Kind() == KindP || o.Reg.Kind() == KindUP) && o.Reg.Tracked() {
			return true
		}
	}
	return false
}

// indirectCall reports whether a CALL takes its target from a register.
func (in *Instruction) indirectCall() bool {
	for i := range in.Operands {
		if o := &in.Operands[i]; o.Kind == OperandReg && (o.Reg.Kind() == KindR || o.Reg.Kind() == KindUR) {
			return true
		}
	}
	return false
}

// Text renders the instruction in nvdisasm's syntax (without offset and
// encoding).
func (in *Instruction) Text() string {
	var sb strings.Builder
	if in.Guard != 0 {
		sb.WriteByte('@')
		if in.GuardNot {
			sb.WriteByte('!')
		}
		sb.WriteString(in.Guard.String())
		sb.WriteByte(' ')
	}
	sb.WriteString(in.Opcode)
	for i, o := range in.Operands {
		if i == 0 {
			sb.WriteByte(' ')
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(o.Text)
	}
	for _, n := range in.Notes {
		sb.WriteString(" (*\"")
		sb.WriteString(n)
		sb.WriteString("\"*)")
	}
	sb.WriteString(" ;")
	return sb.String()
}

// Function is a function symbol of the module: a kernel or a subroutine.
// Subroutines that ptxas places in a kernel's section (such as
// $kernel$helper) are functions of their own.
type Function struct {
	Name    string // symbol name (mangled)
	Section string // section name, e.g. ".text._Z3shmPi"
	Start   uint64 // offset of the symbol in its section
	End     uint64 // end of its code: the next function symbol or the section's end
	Size    uint64 // the symbol's size, which may cover following subroutines
	Entry   bool   // a kernel (STO_CUDA_ENTRY)
	Global  bool   // global binding
	Insts   []Instruction
	Labels  []Label // code labels (.L_x_N) inside the function, by offset

	mod     *Module
	cfgOnce sync.Once
	cfg     *CFG
	duOnce  sync.Once
	du      *DefUse
	kinds   []AccessKind
}

// Label is a code label of nvdisasm's output.
type Label struct {
	Name   string
	Offset uint64 // section offset of the instruction that follows it
}

// Module returns the module that contains f.
func (f *Function) Module() *Module { return f.mod }

// InstAt returns the index of the instruction at section offset off, or -1.
func (f *Function) InstAt(off uint64) int {
	i := sort.Search(len(f.Insts), func(i int) bool { return f.Insts[i].Offset >= off })
	if i < len(f.Insts) && f.Insts[i].Offset == off {
		return i
	}
	return -1
}

// Module is the parsed SASS of one cubin.
type Module struct {
	Arch      string // e.g. "sm_90"; "" when the text did not say
	Files     []string
	Locations []Location
	Functions []*Function

	byName     map[string]*Function
	bySection  map[string][]*Function
	structOnce sync.Once
	structure  *Structure
	summOnce   sync.Once
	summ       map[*Function]*regSummary
}

// Func returns the function named name, or nil.
func (m *Module) Func(name string) *Function { return m.byName[name] }

// FuncAt returns the function that contains offset off of the section in
// which the function or kernel name lies, with off counted from name's
// start. This is how PCs reported relative to a kernel (CUPTI's pcOffset,
// Sanitizer PC minus the function's address) find subroutines that ptxas
// placed after the kernel in its section. It returns the function and the
// section offset.
func (m *Module) FuncAt(name string, off uint64) (*Function, uint64) {
	f := m.byName[name]
	if f == nil {
		return nil, 0
	}
	so := f.Start + off
	fs := m.bySection[f.Section]
	i := sort.Search(len(fs), func(i int) bool { return fs[i].End > so })
	if i < len(fs) && fs[i].Start <= so && so < fs[i].End {
		return fs[i], so
	}
	return nil, so
}

// Location returns the location with index i, or the zero location (with
// NoPos) when i is out of range.
func (m *Module) Location(i int32) Location {
	if i < 0 || int(i) >= len(m.Locations) {
		return Location{Pos: NoPos}
	}
	return m.Locations[i]
}

// File returns the name of file index i, or "" when unknown.
func (m *Module) File(i int32) string {
	if i < 0 || int(i) >= len(m.Files) {
		return ""
	}
	return m.Files[i]
}

// PosString renders p as file:line ("?" for unknown).
func (m *Module) PosString(p Pos) string {
	if p.File < 0 {
		return "?"
	}
	return m.File(p.File) + ":" + itoa(int(p.Line))
}

// LineAt returns the line-map entry for offset off of function name
// (counted as in FuncAt).
func (m *Module) LineAt(name string, off uint64) (Location, bool) {
	f, so := m.FuncAt(name, off)
	if f == nil {
		return Location{Pos: NoPos}, false
	}
	i := f.InstAt(so)
	if i < 0 {
		return Location{Pos: NoPos}, false
	}
	l := m.Location(f.Insts[i].Loc)
	return l, l.File >= 0
}

// FuncIn returns the function named name in section sec, or nil. A
// subroutine the compiler copies into the section of each kernel that
// calls it (CUDA's internal division and square-root routines) has one
// name in several sections, and Func returns only the first.
func (m *Module) FuncIn(sec, name string) *Function {
	for _, f := range m.bySection[sec] {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// index rebuilds the lookup tables; called after parsing and decoding.
func (m *Module) index() {
	m.byName = make(map[string]*Function, len(m.Functions))
	m.bySection = make(map[string][]*Function)
	for _, f := range m.Functions {
		f.mod = m
		if _, dup := m.byName[f.Name]; !dup {
			m.byName[f.Name] = f
		}
		m.bySection[f.Section] = append(m.bySection[f.Section], f)
	}
	for _, fs := range m.bySection {
		sort.SliceStable(fs, func(i, j int) bool { return fs[i].Start < fs[j].Start })
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
