package sass

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// encMagic starts every encoded module; the last byte is the format version.
const encMagic = "GPSASS\x00\x01"

// Encode serialises a module so that it can be shared (through the message
// broker, keyed by the cubin's content hash) and decoded by other ranks
// instead of running nvdisasm again. Derived analyses (CFG, def-use, access
// kinds, structure) are not stored: Decode's module recomputes them, and
// they are deterministic.
//
// Layout: magic, then uvarint-prefixed sections: arch, files, a string
// table (opcodes, operand texts, names), locations, functions with their
// labels and instructions. Instruction offsets are delta-coded; operands
// are stored as their text and parsed again by Decode.
func (m *Module) Encode() []byte {
	e := &encoder{idx: map[string]uint64{}}
	// string table first pass
	for _, f := range m.Functions {
		e.add(f.Name)
		e.add(f.Section)
		for _, l := range f.Labels {
			e.add(l.Name)
		}
		for i := range f.Insts {
			in := &f.Insts[i]
			e.add(in.Opcode)
			for _, o := range in.Operands {
				e.add(o.Text)
			}
			for _, n := range in.Notes {
				e.add(n)
			}
			e.add(in.Callee)
		}
	}
	b := []byte(encMagic)
	b = putStr(b, m.Arch)
	b = binary.AppendUvarint(b, uint64(len(m.Files)))
	for _, f := range m.Files {
		b = putStr(b, f)
	}
	b = binary.AppendUvarint(b, uint64(len(e.strs)))
	for _, s := range e.strs {
		b = putStr(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Locations)))
	for _, l := range m.Locations {
		b = putPos(b, l.Pos)
		b = binary.AppendUvarint(b, uint64(len(l.Calls)))
		for _, c := range l.Calls {
			b = putPos(b, c)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(m.Functions)))
	for _, f := range m.Functions {
		b = e.function(b, f)
	}
	return b
}

// function appends one function: its extent, flags, labels and
// instructions.
func (e *encoder) function(b []byte, f *Function) []byte {
	b = binary.AppendUvarint(b, e.idx[f.Name])
	b = binary.AppendUvarint(b, e.idx[f.Section])
	b = binary.AppendUvarint(b, f.Start)
	b = binary.AppendUvarint(b, f.End-f.Start)
	b = binary.AppendUvarint(b, f.Size)
	var fl byte
	if f.Entry {
		fl |= 1
	}
	if f.Global {
		fl |= 2
	}
	b = append(b, fl)
	b = binary.AppendUvarint(b, uint64(len(f.Labels)))
	for _, l := range f.Labels {
		b = binary.AppendUvarint(b, e.idx[l.Name])
		b = binary.AppendUvarint(b, l.Offset)
	}
	b = binary.AppendUvarint(b, uint64(len(f.Insts)))
	prev := f.Start
	prevLine := 0
	for i := range f.Insts {
		in := &f.Insts[i]
		b = binary.AppendUvarint(b, in.Offset-prev)
		prev = in.Offset
		var fl byte
		if in.Guard != 0 {
			fl |= 1
		}
		if in.GuardNot {
			fl |= 2
		}
		if in.HasEnc {
			fl |= 4
		}
		if in.Callee != "" {
			fl |= 8
		}
		if len(in.Targets) > 0 {
			fl |= 16
		}
		if len(in.Notes) > 0 {
			fl |= 32
		}
		b = append(b, fl)
		if in.Guard != 0 {
			b = binary.LittleEndian.AppendUint16(b, uint16(in.Guard))
		}
		b = binary.AppendUvarint(b, e.idx[in.Opcode])
		b = binary.AppendUvarint(b, uint64(len(in.Operands)))
		for _, o := range in.Operands {
			b = binary.AppendUvarint(b, e.idx[o.Text])
		}
		if len(in.Notes) > 0 {
			b = binary.AppendUvarint(b, uint64(len(in.Notes)))
			for _, n := range in.Notes {
				b = binary.AppendUvarint(b, e.idx[n])
			}
		}
		if len(in.Targets) > 0 {
			b = binary.AppendUvarint(b, uint64(len(in.Targets)))
			for _, t := range in.Targets {
				b = binary.AppendUvarint(b, t)
			}
		}
		if in.Callee != "" {
			b = binary.AppendUvarint(b, e.idx[in.Callee])
		}
		b = binary.AppendVarint(b, int64(in.Loc))
		b = binary.AppendVarint(b, int64(in.Line-prevLine))
		prevLine = in.Line
		if in.HasEnc {
			b = binary.LittleEndian.AppendUint64(b, in.Enc[0])
			b = binary.LittleEndian.AppendUint64(b, in.Enc[1])
		}
	}
	return b
}

type encoder struct {
	idx  map[string]uint64
	strs []string
}

func (e *encoder) add(s string) {
	if _, ok := e.idx[s]; !ok {
		e.idx[s] = uint64(len(e.strs))
		e.strs = append(e.strs, s)
	}
}

func putStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func putPos(b []byte, p Pos) []byte {
	b = binary.AppendVarint(b, int64(p.File))
	return binary.AppendUvarint(b, uint64(uint32(p.Line)))
}

// decoder reads the encoding with bounds checks; the first error sticks.
type decoder struct {
	b   []byte
	off int
	err error
	// strs is the string table; ops the operands parsed so far, by text
	// (operand texts repeat: each is parsed once).
	strs []string
	ops  map[string]Operand
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &FormatError{Offset: int64(d.off), Msg: fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad unsigned varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad signed varint")
		return 0
	}
	d.off += n
	return v
}

// count reads a length that must not exceed what the rest of the input
// could hold at min bytes per element (so that garbage cannot make Decode
// allocate gigabytes).
func (d *decoder) count(what string, min int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)-d.off)/uint64(min) {
		d.fail("%s count %d exceeds the remaining %d bytes", what, v, len(d.b)-d.off)
		return 0
	}
	return int(v)
}

func (d *decoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("unexpected end of input")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b)-d.off < n {
		d.fail("unexpected end of input")
		return nil
	}
	s := d.b[d.off : d.off+n]
	d.off += n
	return s
}

func (d *decoder) str() string {
	n := d.count("string length", 1)
	return string(d.fixed(n))
}

func (d *decoder) pos(nfiles int) Pos {
	f := d.varint()
	l := d.uvarint()
	if f < -1 || f >= int64(nfiles) {
		d.fail("file index %d out of range (%d files)", f, nfiles)
	}
	if l > math.MaxInt32 {
		d.fail("line %d out of range", l)
	}
	return Pos{File: int32(f), Line: int32(l)}
}

// Decode reads a module written by Encode. It validates every index,
// count and offset and returns a *FormatError (with the byte offset) for
// malformed input; it never panics.
func Decode(b []byte) (*Module, error) {
	if len(b) < len(encMagic) || string(b[:len(encMagic)-1]) != encMagic[:len(encMagic)-1] {
		return nil, &FormatError{Offset: 0, Msg: "not an encoded sass module (bad magic)"}
	}
	if b[len(encMagic)-1] != encMagic[len(encMagic)-1] {
		return nil, &FormatError{Offset: int64(len(encMagic) - 1), Msg: fmt.Sprintf("unsupported encoding version %d", b[len(encMagic)-1])}
	}
	d := &decoder{b: b, off: len(encMagic)}
	m := &Module{}
	m.Arch = d.str()
	nf := d.count("file", 1)
	for i := 0; i < nf && d.err == nil; i++ {
		m.Files = append(m.Files, d.str())
	}
	ns := d.count("string", 1)
	d.strs = make([]string, 0, ns)
	for i := 0; i < ns && d.err == nil; i++ {
		d.strs = append(d.strs, d.str())
	}
	nl := d.count("location", 2)
	for i := 0; i < nl && d.err == nil; i++ {
		l := Location{Pos: d.pos(len(m.Files))}
		nc := d.count("call", 2)
		for k := 0; k < nc && d.err == nil; k++ {
			l.Calls = append(l.Calls, d.pos(len(m.Files)))
		}
		m.Locations = append(m.Locations, l)
	}
	d.ops = map[string]Operand{}
	nfn := d.count("function", 6)
	for fi := 0; fi < nfn && d.err == nil; fi++ {
		m.Functions = append(m.Functions, d.function(len(m.Locations)))
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d bytes of trailing data", len(d.b)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	m.index()
	return m, nil
}

// strRef reads an index into the string table.
func (d *decoder) strRef() string {
	i := d.uvarint()
	if d.err == nil && i >= uint64(len(d.strs)) {
		d.fail("string index %d out of range (%d strings)", i, len(d.strs))
	}
	if d.err != nil {
		return ""
	}
	return d.strs[i]
}

// function reads one function: its extent, flags, labels and instructions
// (nloc: the module's number of locations).
func (d *decoder) function(nloc int) *Function {
	f := &Function{}
	f.Name = d.strRef()
	f.Section = d.strRef()
	f.Start = d.uvarint()
	ext := d.uvarint()
	if f.Start+ext < f.Start {
		d.fail("function extent overflows")
	}
	f.End = f.Start + ext
	f.Size = d.uvarint()
	fl := d.byte1()
	f.Entry, f.Global = fl&1 != 0, fl&2 != 0
	nlab := d.count("label", 2)
	for k := 0; k < nlab && d.err == nil; k++ {
		f.Labels = append(f.Labels, Label{Name: d.strRef(), Offset: d.uvarint()})
	}
	ni := d.count("instruction", 5)
	if ni > 0 {
		f.Insts = make([]Instruction, 0, ni)
	}
	// Offsets and lines are delta-coded from the previous instruction's.
	prev := f.Start
	prevLine := int64(0)
	for i := 0; i < ni && d.err == nil; i++ {
		in, line := d.instruction(i, prev, prevLine, nloc)
		prev, prevLine = in.Offset, line
		f.Insts = append(f.Insts, in)
	}
	if d.err == nil && len(f.Insts) > 0 && f.Insts[len(f.Insts)-1].Offset >= f.End {
		d.fail("function %s: instruction at %#x beyond its end %#x", f.Name, f.Insts[len(f.Insts)-1].Offset, f.End)
	}
	return f
}

// instruction reads instruction i of a function, the previous one at
// offset prev and source line prevLine; it returns the instruction and its
// source line.
func (d *decoder) instruction(i int, prev uint64, prevLine int64, nloc int) (Instruction, int64) {
	in := Instruction{}
	delta := d.uvarint()
	if i > 0 && delta == 0 {
		d.fail("instruction offsets must increase")
	}
	if prev+delta < prev {
		d.fail("instruction offset overflows")
	}
	in.Offset = prev + delta
	fl := d.byte1()
	if fl&^63 != 0 {
		d.fail("unknown instruction flags %#x", fl)
	}
	if fl&1 != 0 {
		g := d.fixed(2)
		if g != nil {
			in.Guard = Reg(binary.LittleEndian.Uint16(g))
			if k := in.Guard.Kind(); k != KindP && k != KindUP {
				d.fail("guard %v is not a predicate", in.Guard)
			}
		}
	}
	in.GuardNot = fl&2 != 0
	in.Opcode = d.strRef()
	if d.err == nil && in.Opcode != "" {
		parts := strings.Split(in.Opcode, ".")
		in.Op = parts[0]
		if len(parts) > 1 {
			in.Mods = parts[1:]
		}
	}
	no := d.count("operand", 1)
	if no > 0 {
		in.Operands = make([]Operand, 0, no)
	}
	for k := 0; k < no && d.err == nil; k++ {
		t := d.strRef()
		o, ok := d.ops[t]
		if !ok {
			var err error
			o, err = ParseOperand(t)
			if err != nil {
				d.fail("operand %q: %v", t, err)
			}
			d.ops[t] = o
		}
		in.Operands = append(in.Operands, o)
	}
	if fl&32 != 0 {
		nn := d.count("note", 1)
		for k := 0; k < nn && d.err == nil; k++ {
			in.Notes = append(in.Notes, d.strRef())
		}
	}
	if fl&16 != 0 {
		nt := d.count("target", 1)
		for k := 0; k < nt && d.err == nil; k++ {
			in.Targets = append(in.Targets, d.uvarint())
		}
	}
	if fl&8 != 0 {
		in.Callee = d.strRef()
	}
	loc := d.varint()
	if loc < -1 || loc >= int64(nloc) {
		d.fail("location index %d out of range (%d locations)", loc, nloc)
	}
	in.Loc = int32(loc)
	dl := d.varint()
	line := prevLine + dl
	if line < 0 || line > math.MaxInt32 {
		d.fail("source line %d out of range", line)
	}
	in.Line = int(line)
	if fl&4 != 0 {
		w := d.fixed(16)
		if w != nil {
			in.Enc = [2]uint64{binary.LittleEndian.Uint64(w), binary.LittleEndian.Uint64(w[8:])}
			in.HasEnc = true
		}
	}
	in.Class, in.Flow, in.Mem = classify(in.Op, in.Mods, in.Operands)
	return in, line
}
