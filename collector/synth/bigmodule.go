package synth

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"gpuprof/collector/rawstream"
)

// BigModule is a framework-sized GPU module made up for tests: a cubin (an
// ELF file as ptxas writes them, with a section symbol and a kernel symbol
// per .text section) of thousands of kernels and more than a frame's
// bytes, and the nvdisasm listing of any of its kernels, generated in
// nvdisasm's format (with line information and encodings). The code bytes
// are filler: what is exercised is the size of the module and the number
// of its functions, not the disassembly of real code.
type BigModule struct {
	Cubin []byte
	// Names are the kernels, in symbol order; Sizes their code bytes.
	Names []string
	Sizes []uint64
	// Symbol is each kernel's ELF symbol index (what nvdisasm -fun takes).
	Symbol []int
	// PyFile, when set, is the source file of kernel 0's line information
	// (a Triton kernel's lines point at Python code).
	PyFile string
}

// BigModuleName is the name of kernel i of a BigModule.
func BigModuleName(i int) string {
	return fmt.Sprintf("_ZN5libfw6kernelILi%dEEEvPfPKfi", i)
}

// NewBigModule makes a module of n kernels whose code totals about size
// bytes (at least 16 bytes of code each).
func NewBigModule(n int, size int64) *BigModule {
	if n < 1 {
		n = 1
	}
	per := size / int64(n) / 16 * 16
	if per < 64 {
		per = 64
	}
	m := &BigModule{}
	for i := 0; i < n; i++ {
		m.Names = append(m.Names, BigModuleName(i))
		m.Sizes = append(m.Sizes, uint64(per))
	}
	m.Cubin = m.elf()
	return m
}

// ELF constants of cubins.
const (
	elfMachineCUDA = 190
	elfOSABICUDA   = 0x33
	stoCUDAEntry   = 0x10
)

// elf writes the cubin: the ELF header, the code of every kernel, the
// string and symbol tables, then the section headers.
func (m *BigModule) elf() []byte {
	n := len(m.Names)
	// Section indices: 0 null, 1 .shstrtab, 2 .strtab, 3 .symtab, then one
	// .text.NAME per kernel.
	var shstr, str strings.Builder
	shstr.WriteByte(0)
	str.WriteByte(0)
	name := func(b *strings.Builder, s string) uint32 {
		off := uint32(b.Len())
		b.WriteString(s)
		b.WriteByte(0)
		return off
	}
	shName := []uint32{0, name(&shstr, ".shstrtab"), name(&shstr, ".strtab"), name(&shstr, ".symtab")}
	symName := make([]uint32, n)
	for i, k := range m.Names {
		shName = append(shName, name(&shstr, ".text."+k))
		symName[i] = name(&str, k)
	}
	var total uint64
	for _, s := range m.Sizes {
		total += s
	}
	// Symbols: null, the section symbols (local, first as ELF wants),
	// then the kernels (global).
	nsym := 1 + 2*n
	const ehsize, shentsize, symsize = 64, 64, 24
	codeOff := uint64(ehsize+127) &^ 127
	strOff := codeOff + total
	shstrOff := strOff + uint64(str.Len())
	symOff := (shstrOff + uint64(shstr.Len()) + 7) &^ 7
	shOff := symOff + uint64(nsym*symsize)
	nsec := 4 + n
	out := make([]byte, shOff+uint64(nsec*shentsize))
	le := binary.LittleEndian

	// ELF header.
	copy(out, "\x7fELF")
	out[4], out[5], out[6], out[7], out[8] = 2, 1, 1, elfOSABICUDA, 7 // 64-bit, little-endian, version 1, CUDA ABI 7
	le.PutUint16(out[16:], 2)                                         // ET_EXEC
	le.PutUint16(out[18:], elfMachineCUDA)
	le.PutUint32(out[20:], 1)
	le.PutUint64(out[40:], shOff)
	le.PutUint32(out[48:], 0x5a055a) // sm_90 in the low byte
	le.PutUint16(out[52:], ehsize)
	le.PutUint16(out[54:], 56)
	le.PutUint16(out[58:], shentsize)
	le.PutUint16(out[60:], uint16(nsec))
	le.PutUint16(out[62:], 1)

	// Code: a filler instruction (NOP with a stall count) repeated.
	ins := make([]byte, 16)
	le.PutUint64(ins, 0x0000000000007918)
	le.PutUint64(ins[8:], 0x000fc00000000000)
	code := out[codeOff : codeOff+total]
	if len(code) >= 16 {
		copy(code, ins)
		for filled := 16; filled < len(code); filled *= 2 {
			copy(code[filled:], code[:filled])
		}
	}
	copy(out[strOff:], str.String())
	copy(out[shstrOff:], shstr.String())

	sym := func(i int, nm uint32, info, other uint8, shndx uint16, size uint64) {
		e := out[symOff+uint64(i*symsize):]
		le.PutUint32(e, nm)
		e[4], e[5] = info, other
		le.PutUint16(e[6:], shndx)
		le.PutUint64(e[16:], size)
	}
	for i := 0; i < n; i++ {
		sym(1+i, 0, 3, 0, uint16(4+i), 0) // STB_LOCAL, STT_SECTION
		m.Symbol = append(m.Symbol, 1+n+i)
		sym(1+n+i, symName[i], 1<<4|2, stoCUDAEntry, uint16(4+i), m.Sizes[i]) // STB_GLOBAL, STT_FUNC
	}

	sec := func(i int, typ uint32, flags, off, size uint64, link, info uint32, align, entsize uint64) {
		e := out[shOff+uint64(i*shentsize):]
		le.PutUint32(e, shName[i])
		le.PutUint32(e[4:], typ)
		le.PutUint64(e[8:], flags)
		le.PutUint64(e[24:], off)
		le.PutUint64(e[32:], size)
		le.PutUint32(e[40:], link)
		le.PutUint32(e[44:], info)
		le.PutUint64(e[48:], align)
		le.PutUint64(e[56:], entsize)
	}
	sec(1, 3, 0, shstrOff, uint64(shstr.Len()), 0, 0, 1, 0) // SHT_STRTAB
	sec(2, 3, 0, strOff, uint64(str.Len()), 0, 0, 1, 0)
	sec(3, 2, 0, symOff, uint64(nsym*symsize), 2, uint32(1+n), 8, symsize) // SHT_SYMTAB; first global
	off := codeOff
	for i := 0; i < n; i++ {
		sec(4+i, 1, 6, off, m.Sizes[i], 0, 0, 128, 0) // SHT_PROGBITS, SHF_ALLOC|SHF_EXECINSTR
		off += m.Sizes[i]
	}
	// The symbols' sections must be whole: sizes are multiples of 16.
	return out
}

// Listing returns nvdisasm's listing (-c -g -gi -hex) of the named
// kernels' sections, as the real tool prints a selection of functions.
func (m *BigModule) Listing(names ...string) []byte {
	var b strings.Builder
	b.WriteString("\t.headerflags\t@\"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)\"\n")
	b.WriteString("\t.elftype\t@\"ET_EXEC\"\n\n\n")
	idx := map[string]int{}
	for i, n := range m.Names {
		idx[n] = i
	}
	for _, n := range names {
		i, ok := idx[n]
		if !ok {
			continue
		}
		m.kernelListing(&b, i)
	}
	return []byte(b.String())
}

// kernelListing writes kernel i's section: a prologue, a loop of a load,
// an add and a compare-and-branch, an exit, and a closing branch to itself
// padded with NOPs to the kernel's size, with lines of a made-up source.
func (m *BigModule) kernelListing(b *strings.Builder, i int) {
	k := m.Names[i]
	file := fmt.Sprintf("/src/libfw/kernels/k%d.cu", i)
	if i == 0 && m.PyFile != "" {
		file = m.PyFile
	}
	fmt.Fprintf(b, "//--------------------- .text.%s --------------------------\n", k)
	fmt.Fprintf(b, "\t.section\t.text.%s,\"ax\",@progbits\n\t.align\t128\n", k)
	fmt.Fprintf(b, "        .global         %s\n        .type           %s,@function\n", k, k)
	fmt.Fprintf(b, "        .size           %s,(.L_x_end - %s)\n", k, k)
	fmt.Fprintf(b, "        .other          %s,@\"STO_CUDA_ENTRY STV_DEFAULT\"\n%s:\n.text.%s:\n", k, k, k)
	n := int(m.Sizes[i] / 16)
	inst := func(off int, text string) {
		fmt.Fprintf(b, "        /*%04x*/                   %-42s /* 0x000000000000%04x */\n", off*16, text+" ;", off)
		fmt.Fprintf(b, "                                                                              /* 0x000fc00000000000 */\n")
	}
	line := func(l int) { fmt.Fprintf(b, "\t//## File \"%s\", line %d\n", file, l) }
	body := []string{
		"LDC R1, c[0x0][0x28]",
		"S2R R0, SR_TID.X",
		"MOV R3, RZ",
		"LDC.64 R4, c[0x0][0x210]",
	}
	pos := 0
	line(10)
	for _, t := range body {
		if pos < n-5 {
			inst(pos, t)
			pos++
		}
	}
	if pos+5 <= n {
		b.WriteString(".L_x_0:\n")
		line(12)
		inst(pos, "LDG.E R2, desc[UR4][R4.64]")
		inst(pos+1, "FADD R3, R2, R3")
		line(11)
		inst(pos+2, "ISETP.GE.AND P0, PT, R0, 0x10, PT")
		inst(pos+3, "@!P0 BRA `(.L_x_0)")
		line(14)
		inst(pos+4, "EXIT")
		pos += 5
	}
	if pos < n {
		b.WriteString(".L_x_1:\n")
		inst(pos, "BRA `(.L_x_1)")
		pos++
	}
	for ; pos < n; pos++ {
		inst(pos, "NOP")
	}
	b.WriteString(".L_x_end:\n\n")
}

// BigStreamOptions shape WriteBigStream's stream.
type BigStreamOptions struct {
	Launched []int // kernels launched (indices into Names)
	Launches int   // launches of each (default 2)
	Samples  int   // PCs sampled per launch (default 8)
}

// WriteBigStream writes a PC-sampling stream (version 3) of a process that
// loads m (its bytes in MODULE_DATA chunks), reports every one of its
// kernels, as the injection library does, and launches and samples a few.
func WriteBigStream(w io.Writer, m *BigModule, o BigStreamOptions) error {
	if o.Launches <= 0 {
		o.Launches = 2
	}
	if o.Samples <= 0 {
		o.Samples = 8
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	wr := rawstream.NewWriter(bw)
	put := func(f rawstream.Frame) error { return wr.Write(f) }
	frames := []rawstream.Frame{
		&rawstream.Hello{Version: 3, Flags: rawstream.HelloSynthetic, Rank: -1, Mode: rawstream.ModePCSampling, BlockSampling: 1, KernelSampling: 1,
			Host: "synth", GPU: "synthetic GPU", Driver: "0", CUDA: "0", SM: 90},
		&rawstream.StallReasons{Reasons: []rawstream.StallReason{{Index: 1, Name: "smsp__pcsamp_warps_issue_stalled_long_scoreboard"}, {Index: 2, Name: "smsp__pcsamp_warps_issue_stalled_selected"}}},
		&rawstream.Module{ModuleID: 1, ContentKey: fnv1a(m.Cubin), Size: uint32(len(m.Cubin)), HasBytes: true, Bytes: m.Cubin},
	}
	for _, f := range frames {
		if err := put(f); err != nil {
			return err
		}
	}
	pc := uint64(0x7f0000000000)
	for i, n := range m.Names {
		if err := put(&rawstream.Function{FunctionID: uint32(i + 1), ModuleID: 1, PC: pc, Size: uint32(m.Sizes[i]), Name: n}); err != nil {
			return err
		}
		pc += m.Sizes[i]
	}
	launch := uint64(0)
	for it := 0; it < o.Launches; it++ {
		for _, k := range o.Launched {
			launch++
			if err := put(&rawstream.Launch{LaunchID: launch, FunctionID: uint32(k + 1), Grid: [3]uint32{64, 1, 1}, Block: [3]uint32{256, 1, 1}, Instrumented: true}); err != nil {
				return err
			}
			var s []rawstream.PCSample
			for j := 0; j < o.Samples; j++ {
				// The loop's instructions (offsets 0x40-0x80) and the first ones.
				off := uint32(j%8) * 16
				s = append(s, rawstream.PCSample{FunctionID: uint32(k + 1), Offset: off,
					Stalls: []rawstream.StallCount{{Reason: 1 + uint32(j%2), Samples: uint32(1 + j)}}})
			}
			ns := launch * 1_000_000
			if err := put(&rawstream.PCSamples{LaunchID: launch, PCs: s}); err != nil {
				return err
			}
			if err := put(&rawstream.KernelEnd{LaunchID: launch, StartNS: ns, EndNS: ns + 20_000 + uint64(k), BlocksTotal: 64, BlocksSampled: 64}); err != nil {
				return err
			}
		}
	}
	if err := put(&rawstream.End{ExitCode: 0}); err != nil {
		return err
	}
	return bw.Flush()
}
