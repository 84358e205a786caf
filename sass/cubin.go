package sass

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
)

// emCUDA is the ELF machine number of NVIDIA cubins.
const emCUDA = 190

// stoCUDAEntry marks kernels in st_other.
const stoCUDAEntry = 0x10

// CubinFunction is a function symbol of a cubin.
type CubinFunction struct {
	Name    string
	Section string // e.g. ".text._Z3shmPi"
	Value   uint64 // offset of the symbol in its section (what nvdisasm prints)
	Size    uint64 // st_size
	End     uint64 // end of its code: the next function symbol or the section end
	Entry   bool   // a kernel
	Global  bool
	// Symbol is the function's index in the ELF symbol table, counting
	// the null symbol as 0: what nvdisasm's --cuda-function-index (-fun)
	// takes.
	Symbol int
	// FileOffset is where the function's code starts in the cubin file.
	FileOffset uint64
	// Code is the function's code, [Value, End) of its section.
	Code []byte
	// Attr is the function's resource usage from the .nv.info sections.
	Attr FuncAttr
}

// Cubin is what a cubin's ELF symbol table says about its code: enough to
// know a module's functions, their sizes and their control bits without
// nvdisasm.
type Cubin struct {
	Arch       string // "sm_90", from e_flags
	ABIVersion int
	Functions  []CubinFunction
}

// FormatError reports malformed binary input (a cubin or an encoded module).
type FormatError struct {
	Offset int64 // byte offset of the problem, -1 when unknown
	Msg    string
}

func (e *FormatError) Error() string {
	if e.Offset < 0 {
		return "sass: " + e.Msg
	}
	return fmt.Sprintf("sass: at byte %d: %s", e.Offset, e.Msg)
}

// ContentHash returns the hex SHA-256 of a cubin, the key under which its
// module is cached and shared.
func ContentHash(cubin []byte) string {
	h := sha256.Sum256(cubin)
	return hex.EncodeToString(h[:])
}

// ParseCubin reads the function symbols of a cubin with debug/elf.
func ParseCubin(data []byte) (c *Cubin, err error) {
	defer func() {
		// debug/elf is fuzzed upstream, but a malformed cubin must never
		// take the collector down.
		if r := recover(); r != nil {
			c, err = nil, &FormatError{Offset: -1, Msg: fmt.Sprintf("malformed ELF: %v", r)}
		}
	}()
	// Older cubins store the CUDA version in e_version (0x76 for 11.8,
	// say), which debug/elf rejects; it means nothing to us.
	if len(data) >= 24 && data[5] == 1 && binary.LittleEndian.Uint32(data[20:24]) != 1 {
		patched := append([]byte(nil), data...)
		binary.LittleEndian.PutUint32(patched[20:24], 1)
		data = patched
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, &FormatError{Offset: -1, Msg: "not an ELF file: " + err.Error()}
	}
	defer f.Close()
	if f.Machine != emCUDA {
		return nil, &FormatError{Offset: 18, Msg: fmt.Sprintf("ELF machine %v is not NVIDIA CUDA (190)", f.Machine)}
	}
	c = &Cubin{ABIVersion: int(f.ABIVersion)}
	var flags uint32
	if len(data) >= 52 {
		if f.Class == elf.ELFCLASS64 && len(data) >= 64 {
			flags = f.ByteOrder.Uint32(data[48:52])
		} else if f.Class == elf.ELFCLASS32 {
			flags = f.ByteOrder.Uint32(data[36:40])
		}
	}
	sm := flags & 0xff
	if f.ABIVersion >= 8 || f.OSABI == 0x41 {
		sm = flags >> 8 & 0xff
	}
	if sm != 0 {
		c.Arch = "sm_" + itoa(int(sm))
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, &FormatError{Offset: -1, Msg: "reading the symbol table: " + err.Error()}
	}
	bySec := map[int][]*CubinFunction{}
	for i, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		if sec.Type == elf.SHT_NOBITS || sec.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		cf := &CubinFunction{
			Name:    s.Name,
			Section: sec.Name,
			Value:   s.Value,
			Size:    s.Size,
			Entry:   s.Other&stoCUDAEntry != 0,
			Global:  elf.ST_BIND(s.Info) == elf.STB_GLOBAL,
			Symbol:  i + 1, // Symbols leaves out the null symbol
		}
		bySec[int(s.Section)] = append(bySec[int(s.Section)], cf)
	}
	secs := make([]int, 0, len(bySec))
	for si := range bySec {
		secs = append(secs, si)
	}
	sort.Ints(secs)
	for _, si := range secs {
		sec := f.Sections[si]
		if sec.Offset > uint64(len(data)) || sec.Size > uint64(len(data))-sec.Offset {
			return nil, &FormatError{Offset: -1, Msg: fmt.Sprintf("section %s [%#x+%#x) lies outside the file", sec.Name, sec.Offset, sec.Size)}
		}
		code := data[sec.Offset : sec.Offset+sec.Size]
		fs := bySec[si]
		sort.SliceStable(fs, func(i, j int) bool { return fs[i].Value < fs[j].Value })
		for i, cf := range fs {
			if cf.Value > sec.Size {
				return nil, &FormatError{Offset: -1, Msg: fmt.Sprintf("symbol %s at %#x lies outside section %s (size %#x)", cf.Name, cf.Value, sec.Name, sec.Size)}
			}
			cf.End = sec.Size
			if i+1 < len(fs) {
				cf.End = fs[i+1].Value
			}
			cf.FileOffset = sec.Offset + cf.Value
			cf.Code = code[cf.Value:cf.End]
			c.Functions = append(c.Functions, *cf)
		}
	}
	attrs := map[string]*FuncAttr{}
	for i := range c.Functions {
		attrs[c.Functions[i].Name] = &c.Functions[i].Attr
	}
	if err := readAttrs(f, data, syms, attrs); err != nil {
		return nil, err
	}
	return c, nil
}

// Func returns the function named name (nil if none).
func (c *Cubin) Func(name string) *CubinFunction {
	for i := range c.Functions {
		if c.Functions[i].Name == name {
			return &c.Functions[i]
		}
	}
	return nil
}

// Module returns a module built from the cubin alone: functions with their
// extents, and one instruction per 16 bytes carrying its encoding and
// control bits but no opcode (nvdisasm's text supplies those). Lookups,
// the structure tree (without lines and loops) and the encoding all work
// on it.
func (c *Cubin) Module() *Module {
	m := &Module{Arch: c.Arch}
	for _, cf := range c.Functions {
		f := &Function{Name: cf.Name, Section: cf.Section, Start: cf.Value, End: cf.End, Size: cf.Size, Entry: cf.Entry, Global: cf.Global}
		for off := uint64(0); off+16 <= uint64(len(cf.Code)); off += 16 {
			f.Insts = append(f.Insts, Instruction{
				Offset: cf.Value + off,
				Loc:    -1,
				Enc:    [2]uint64{binary.LittleEndian.Uint64(cf.Code[off:]), binary.LittleEndian.Uint64(cf.Code[off+8:])},
				HasEnc: true,
			})
		}
		m.Functions = append(m.Functions, f)
	}
	m.index()
	return m
}

// AttachCubin fills in the encodings (and so the control bits) of a module
// parsed from nvdisasm text without -hex, from the cubin it came from. It
// fails if a function is missing or an encoding already known differs:
// the text and the cubin do not belong together.
func (m *Module) AttachCubin(c *Cubin) error {
	byName := map[string]*CubinFunction{}
	for i := range c.Functions {
		byName[c.Functions[i].Section+"\x00"+c.Functions[i].Name] = &c.Functions[i]
	}
	for _, f := range m.Functions {
		if f.du != nil {
			// the def-use chains would miss the scoreboards
			return &FormatError{Offset: -1, Msg: "AttachCubin must be called before the module is analysed"}
		}
		cf := byName[f.Section+"\x00"+f.Name]
		if cf == nil {
			return &FormatError{Offset: -1, Msg: fmt.Sprintf("function %s (section %s) is not in the cubin", f.Name, f.Section)}
		}
		for i := range f.Insts {
			in := &f.Insts[i]
			if in.Offset < cf.Value || in.Offset-cf.Value+16 > uint64(len(cf.Code)) {
				return &FormatError{Offset: -1, Msg: fmt.Sprintf("%s: instruction at %#x lies outside the function's code in the cubin", f.Name, in.Offset)}
			}
			b := cf.Code[in.Offset-cf.Value:]
			enc := [2]uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
			if in.HasEnc && in.Enc != enc {
				return &FormatError{Offset: int64(cf.FileOffset + in.Offset - cf.Value), Msg: fmt.Sprintf("%s+%#x: encoding %#x %#x in the text, %#x %#x in the cubin", f.Name, in.Offset, in.Enc[0], in.Enc[1], enc[0], enc[1])}
			}
			in.Enc, in.HasEnc = enc, true
		}
	}
	return nil
}

// Load returns the module of data, which is either a cubin (ELF; see
// Cubin.Module) or nvdisasm text (see Parse).
func Load(data []byte) (*Module, error) {
	if len(data) >= 4 && string(data[:4]) == "\x7fELF" {
		c, err := ParseCubin(data)
		if err != nil {
			return nil, err
		}
		return c.Module(), nil
	}
	return Parse(data)
}
