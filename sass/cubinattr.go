package sass

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"
)

// FuncAttr is what a cubin's .nv.info sections and shared-memory sections
// say about a function's resources: what the occupancy calculation needs.
// Zero fields were not stated in the cubin.
type FuncAttr struct {
	Regs         int    // registers per thread (EIATTR_REGCOUNT)
	MaxRegs      int    // register limit the compiler was given (EIATTR_MAXREG_COUNT, from __launch_bounds__ or -maxrregcount)
	FrameSize    int    // bytes of local stack per thread (EIATTR_FRAME_SIZE): spill slots and local arrays
	MaxThreads   [3]int // __launch_bounds__ maximum threads per block (EIATTR_MAX_THREADS)
	SharedStatic int    // bytes of static shared memory per block (.nv.shared.<function>)
}

// EIATTR attribute codes (the cubin's .nv.info records) and formats.
const (
	eiMaxThreads   = 0x05
	eiFrameSize    = 0x11
	eiMaxRegCount  = 0x1b
	eiRegCount     = 0x2f
	eifmtSVAL      = 0x04 // format, attribute, u16 size, size bytes
	eiRecordHeader = 4
)

// infoRecord is one .nv.info record: its attribute and value bytes (for
// the fixed formats, the two bytes after the attribute).
type infoRecord struct {
	attr uint8
	val  []byte
}

// parseInfo splits a .nv.info section into records. Formats 1-3 (none,
// byte, half word) are four bytes long; format 4 carries a size.
func parseInfo(sec string, fileOff uint64, b []byte) ([]infoRecord, error) {
	var out []infoRecord
	for off := 0; off < len(b); {
		if len(b)-off < eiRecordHeader {
			return nil, &FormatError{Offset: int64(fileOff) + int64(off), Msg: fmt.Sprintf("%s: %d bytes left, a record needs %d", sec, len(b)-off, eiRecordHeader)}
		}
		format, attr := b[off], b[off+1]
		switch {
		case format == eifmtSVAL:
			n := int(binary.LittleEndian.Uint16(b[off+2:]))
			if n > len(b)-off-eiRecordHeader {
				return nil, &FormatError{Offset: int64(fileOff) + int64(off) + 2, Msg: fmt.Sprintf("%s: attribute %#x claims %d bytes, %d left", sec, attr, n, len(b)-off-eiRecordHeader)}
			}
			out = append(out, infoRecord{attr, b[off+eiRecordHeader : off+eiRecordHeader+n]})
			off += eiRecordHeader + n
		case format >= 1 && format <= 3:
			out = append(out, infoRecord{attr, b[off+2 : off+4]})
			off += eiRecordHeader
		default:
			return nil, &FormatError{Offset: int64(fileOff) + int64(off), Msg: fmt.Sprintf("%s: record format %d is not 1-4", sec, format)}
		}
	}
	return out, nil
}

// readAttrs fills the functions' attributes from the cubin's .nv.info
// sections: the module-wide one keys records by symbol index, a
// function's own one (.nv.info.<name>) holds its launch bounds.
func readAttrs(f *elf.File, data []byte, syms []elf.Symbol, byName map[string]*FuncAttr) error {
	// debug/elf's Symbols() drops the null symbol: index i is syms[i-1].
	symName := func(i uint32) string {
		if i == 0 || int(i) > len(syms) {
			return ""
		}
		return syms[i-1].Name
	}
	for _, sec := range f.Sections {
		switch {
		case sec.Name == ".nv.info" || strings.HasPrefix(sec.Name, ".nv.info."):
		case strings.HasPrefix(sec.Name, ".nv.shared."):
			if a := byName[strings.TrimPrefix(sec.Name, ".nv.shared.")]; a != nil {
				a.SharedStatic = int(sec.Size)
			}
			continue
		default:
			continue
		}
		if sec.Type == elf.SHT_NOBITS {
			continue
		}
		if sec.Offset > uint64(len(data)) || sec.Size > uint64(len(data))-sec.Offset {
			return &FormatError{Offset: -1, Msg: fmt.Sprintf("section %s [%#x+%#x) lies outside the file", sec.Name, sec.Offset, sec.Size)}
		}
		recs, err := parseInfo(sec.Name, sec.Offset, data[sec.Offset:sec.Offset+sec.Size])
		if err != nil {
			return err
		}
		own := byName[strings.TrimPrefix(sec.Name, ".nv.info.")] // nil for the module-wide section
		for _, r := range recs {
			switch {
			case own == nil && (r.attr == eiRegCount || r.attr == eiFrameSize) && len(r.val) == 8:
				a := byName[symName(binary.LittleEndian.Uint32(r.val))]
				if a == nil {
					continue // a symbol that is not a function of this cubin
				}
				v := int(binary.LittleEndian.Uint32(r.val[4:]))
				if r.attr == eiRegCount {
					a.Regs = v
				} else {
					a.FrameSize = v
				}
			case own != nil && r.attr == eiMaxRegCount && len(r.val) == 2:
				own.MaxRegs = int(binary.LittleEndian.Uint16(r.val))
			case own != nil && r.attr == eiMaxThreads && len(r.val) == 12:
				for i := range own.MaxThreads {
					own.MaxThreads[i] = int(binary.LittleEndian.Uint32(r.val[4*i:]))
				}
			}
		}
	}
	return nil
}
