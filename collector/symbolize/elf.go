package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"debug/gosym"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// elfFile is a parsed host module: its symbols and, where present, its
// DWARF line tables and inlined-subroutine trees (built per compilation
// unit on first use).
type elfFile struct {
	buildID string
	syms    []symbol
	d       *dwarf.Data
	// gosym is the Go runtime's own line table, used for Go binaries
	// linked without DWARF or a symbol table (as go test and go run do).
	gosym *gosym.Table

	mu  sync.Mutex
	cus map[dwarf.Offset]*cuInfo

	// sites are the frames at known addresses, from a symbol table (a
	// module whose file is not on this machine).
	sites map[uint64][]frame
}

func load(path string) (*elfFile, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	f := &elfFile{cus: map[dwarf.Offset]*cuInfo{}}
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOTE && s.Name == ".note.gnu.build-id" {
			if b, err := s.Data(); err == nil {
				f.buildID = noteBuildID(b, ef.ByteOrder)
			}
		}
	}
	f.addSymbols(ef, ef.Symbols, ef.DynamicSymbols)
	if d, err := ef.DWARF(); err == nil {
		f.d = d
	}
	// A stripped module keeps only its exported symbols (.dynsym): its
	// separate debug file, where the distribution installs one, has the
	// rest and the DWARF.
	if _, err := ef.Symbols(); err != nil || f.d == nil {
		if dbg := openDebugFile(path, f.buildID, ef); dbg != nil {
			f.addSymbols(dbg, dbg.Symbols)
			if f.d == nil {
				if d, err := dbg.DWARF(); err == nil {
					f.d = d
				}
			}
			dbg.Close()
		}
	}
	sort.Slice(f.syms, func(i, j int) bool {
		if f.syms[i].addr != f.syms[j].addr {
			return f.syms[i].addr < f.syms[j].addr
		}
		return f.syms[i].size > f.syms[j].size
	})
	if pcln := ef.Section(".gopclntab"); pcln != nil {
		if text := ef.Section(".text"); text != nil {
			if b, err := pcln.Data(); err == nil {
				f.gosym, _ = gosym.NewTable(nil, gosym.NewLineTable(b, text.Addr))
			}
		}
	}
	return f, nil
}

func (f *elfFile) addSymbols(ef *elf.File, tables ...func() ([]elf.Symbol, error)) {
	for _, get := range tables {
		syms, _ := get()
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Name != "" {
				f.syms = append(f.syms, symbol{s.Value, s.Size, s.Name})
			}
		}
	}
}

// DebugDirs are where separate debug files are looked for, as gdb does:
// DIR/.build-id/xx/rest.debug by build id, and DIR/<module's directory>/
// NAME by .gnu_debuglink (after the module's own directory and its
// .debug subdirectory).
var DebugDirs = []string{"/usr/lib/debug"}

// openDebugFile finds the separate debug file of the module at path. A
// candidate whose build id differs from the module's is not it.
func openDebugFile(path, buildID string, ef *elf.File) *elf.File {
	var cands []string
	if len(buildID) > 2 {
		for _, d := range DebugDirs {
			cands = append(cands, filepath.Join(d, ".build-id", buildID[:2], buildID[2:]+".debug"))
		}
	}
	if sec := ef.Section(".gnu_debuglink"); sec != nil {
		if b, err := sec.Data(); err == nil {
			if name, _, ok := bytes.Cut(b, []byte{0}); ok && len(name) > 0 && !bytes.ContainsRune(name, '/') {
				dir := filepath.Dir(path)
				cands = append(cands, filepath.Join(dir, string(name)), filepath.Join(dir, ".debug", string(name)))
				if abs, err := filepath.Abs(dir); err == nil {
					for _, d := range DebugDirs {
						cands = append(cands, filepath.Join(d, abs, string(name)))
					}
				}
			}
		}
	}
	for _, c := range cands {
		if c == path {
			continue
		}
		dbg, err := elf.Open(c)
		if err != nil {
			continue
		}
		id := ""
		if sec := dbg.Section(".note.gnu.build-id"); sec != nil {
			if b, err := sec.Data(); err == nil {
				id = noteBuildID(b, dbg.ByteOrder)
			}
		}
		if buildID != "" && id != "" && !strings.EqualFold(id, buildID) {
			dbg.Close()
			continue
		}
		return dbg
	}
	return nil
}

func noteBuildID(b []byte, bo interface{ Uint32([]byte) uint32 }) string {
	for len(b) >= 12 {
		nsz, dsz, typ := bo.Uint32(b), bo.Uint32(b[4:]), bo.Uint32(b[8:])
		b = b[12:]
		na := (int(nsz) + 3) &^ 3
		da := (int(dsz) + 3) &^ 3
		if na+int(dsz) > len(b) || na < 0 || da < 0 {
			return ""
		}
		if typ == 3 && nsz == 4 && string(b[:3]) == "GNU" {
			return hex.EncodeToString(b[na : na+int(dsz)])
		}
		if na+da > len(b) {
			return ""
		}
		b = b[na+da:]
	}
	return ""
}

// lookup returns the frames at file virtual address va, outermost first.
func (f *elfFile) lookup(va uint64) []frame {
	if fr, ok := f.sites[va]; ok {
		return fr
	}
	if f.d != nil {
		if fr := f.dwarfLookup(va); len(fr) > 0 {
			return fr
		}
	}
	if f.gosym != nil {
		if file, line, fn := f.gosym.PCToLine(va); fn != nil {
			return []frame{{function: fn.Name, file: file, line: uint32(line)}}
		}
	}
	if s := findSymbol(f.syms, va); s != nil {
		return []frame{{function: s.name}}
	}
	return nil
}

// scope is a subprogram or inlined subroutine with its code ranges.
type scope struct {
	name     string
	ranges   [][2]uint64
	callFile string // where this (inlined) scope was called from
	callLine uint32
	kids     []*scope
}

func (s *scope) contains(va uint64) bool {
	for _, r := range s.ranges {
		if va >= r[0] && va < r[1] {
			return true
		}
	}
	return false
}

type cuInfo struct {
	lines []dwarf.LineEntry
	files []*dwarf.LineFile
	funcs []*scope
}

func (f *elfFile) dwarfLookup(va uint64) []frame {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.d.Reader()
	cu, err := r.SeekPC(va)
	if err != nil || cu == nil {
		return nil
	}
	ci := f.cus[cu.Offset]
	if ci == nil {
		ci = f.buildCU(cu)
		f.cus[cu.Offset] = ci
	}
	file, line := ci.lineAt(va)
	var chain []*scope
	for _, s := range ci.funcs {
		if s.contains(va) {
			chain = append(chain, s)
			for cur := s; ; {
				var next *scope
				for _, k := range cur.kids {
					if k.contains(va) {
						next = k
						break
					}
				}
				if next == nil {
					break
				}
				chain = append(chain, next)
				cur = next
			}
			break
		}
	}
	if len(chain) == 0 {
		if file == "" {
			return nil
		}
		name := ""
		if s := findSymbol(f.syms, va); s != nil {
			name = s.name
		}
		return []frame{{function: name, file: file, line: line}}
	}
	out := make([]frame, len(chain))
	for i, s := range chain {
		out[i].function = s.name
		if i+1 < len(chain) {
			out[i].file, out[i].line = chain[i+1].callFile, chain[i+1].callLine
		} else {
			out[i].file, out[i].line = file, line
		}
	}
	return out
}

func (ci *cuInfo) lineAt(va uint64) (string, uint32) {
	ls := ci.lines
	i := sort.Search(len(ls), func(i int) bool { return ls[i].Address > va }) - 1
	if i < 0 || ls[i].EndSequence || ls[i].File == nil {
		return "", 0
	}
	return ls[i].File.Name, uint32(ls[i].Line)
}

func (f *elfFile) buildCU(cu *dwarf.Entry) *cuInfo {
	ci := &cuInfo{}
	if lr, err := f.d.LineReader(cu); err == nil && lr != nil {
		ci.files = lr.Files()
		var e dwarf.LineEntry
		for {
			if err := lr.Next(&e); err != nil {
				if !errors.Is(err, io.EOF) {
					ci.lines = nil
				}
				break
			}
			ci.lines = append(ci.lines, e)
		}
		sort.SliceStable(ci.lines, func(i, j int) bool { return ci.lines[i].Address < ci.lines[j].Address })
	}
	if !cu.Children {
		return ci
	}
	r := f.d.Reader()
	r.Seek(cu.Offset)
	r.Next() // the CU itself
	ci.funcs = f.scopes(r, ci, 0)
	return ci
}

// scopes reads the children of the current entry (depth levels of nesting
// below the CU), collecting subprograms and inlined subroutines; lexical
// blocks are looked through.
func (f *elfFile) scopes(r *dwarf.Reader, ci *cuInfo, depth int) []*scope {
	var out []*scope
	for {
		e, err := r.Next()
		if err != nil || e == nil || e.Tag == 0 {
			return out
		}
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			s := &scope{name: f.nameOf(e, 0)}
			if rs, err := f.d.Ranges(e); err == nil {
				for _, x := range rs {
					s.ranges = append(s.ranges, [2]uint64{x[0], x[1]})
				}
			}
			if e.Tag == dwarf.TagInlinedSubroutine {
				if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok && v >= 0 && int(v) < len(ci.files) && ci.files[v] != nil {
					s.callFile = ci.files[v].Name
				}
				if v, ok := e.Val(dwarf.AttrCallLine).(int64); ok && v > 0 {
					s.callLine = uint32(v)
				}
			}
			if e.Children && depth < 64 {
				s.kids = f.scopes(r, ci, depth+1)
			}
			if len(s.ranges) > 0 {
				out = append(out, s)
			}
		case dwarf.TagLexDwarfBlock:
			if e.Children && depth < 64 {
				out = append(out, f.scopes(r, ci, depth+1)...)
			}
		default:
			if e.Children {
				r.SkipChildren()
			}
		}
	}
}

// nameOf is an entry's linkage name (mangled) or name, following
// abstract_origin and specification references.
func (f *elfFile) nameOf(e *dwarf.Entry, hops int) string {
	for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, dwarf.AttrName} {
		if s, ok := e.Val(a).(string); ok && s != "" {
			if a == dwarf.AttrLinkageName || e.Val(dwarf.AttrLinkageName) == nil {
				return s
			}
		}
	}
	if hops > 4 {
		return ""
	}
	for _, a := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
		if off, ok := e.Val(a).(dwarf.Offset); ok {
			r := f.d.Reader()
			r.Seek(off)
			if o, err := r.Next(); err == nil && o != nil {
				if n := f.nameOf(o, hops+1); n != "" {
					return n
				}
			}
		}
	}
	return ""
}
