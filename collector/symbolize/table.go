package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gpuprof/collector/rawstream"
)

// A symbol table stands in for host modules that are not on the machine
// replaying a capture (the test programs' binaries exist only where they
// were captured; the libc there is not the one here). It holds, per module
// (path and build id), the function symbols around the addresses a capture
// uses and the frames DWARF gives at those addresses, so the replay
// resolves them exactly as the capturing machine would have. gpuprof
// symtab extracts one beside the captures.
//
// The format is text, one record per line, tab-separated, hexadecimal
// addresses (file virtual addresses, as in the ELF file):
//
//	# comment
//	module	PATH	BUILDID        ("-": none); the records below belong to it
//	func	ADDR	SIZE	NAME     a function symbol
//	at	ADDR	FUNC	FILE	LINE[	FUNC	FILE	LINE]...
//	                              the frames at ADDR (a call's address),
//	                              outermost first (inlined calls after)

// TableHeader opens every table file.
const TableHeader = "# gpuprof host symbols 1"

// TableExt is the file name extension of table files in a directory.
const TableExt = ".syms"

// Tables holds symbol tables of host modules, by build id and by path.
type Tables struct {
	byID   map[string]*elfFile
	byPath map[string]*elfFile
	order  []*tableModule // in the order added, for writing
}

// tableModule is one module's table while it is being built.
type tableModule struct {
	path, buildID string
	f             *elfFile
	funcs         map[uint64]bool
}

// NewTables returns an empty set of tables.
func NewTables() *Tables {
	return &Tables{byID: map[string]*elfFile{}, byPath: map[string]*elfFile{}}
}

// module returns the table of the module mapped from path with buildID:
// matched by build id when both have one, else by path.
func (t *Tables) module(path, buildID string) *elfFile {
	if t == nil {
		return nil
	}
	if buildID != "" {
		if f := t.byID[strings.ToLower(buildID)]; f != nil {
			return f
		}
	}
	if f := t.byPath[path]; f != nil && (buildID == "" || f.buildID == "") {
		return f
	}
	return nil
}

func (t *Tables) add(path, buildID string) *tableModule {
	for _, m := range t.order {
		if m.path == path && strings.EqualFold(m.buildID, buildID) {
			return m
		}
	}
	m := &tableModule{path: path, buildID: strings.ToLower(buildID), f: &elfFile{buildID: strings.ToLower(buildID), sites: map[uint64][]frame{}}, funcs: map[uint64]bool{}}
	t.order = append(t.order, m)
	if m.buildID != "" {
		t.byID[m.buildID] = m.f
	}
	t.byPath[path] = m.f
	return m
}

// AddAddress resolves return address ret in host module m from the
// module's file on this machine (which must be the file that was mapped:
// same build id) and records what resolving it needs. It returns false,
// and records nothing, when the file is missing or differs.
func (t *Tables) AddAddress(m *rawstream.HostModule, ret uint64) bool {
	if ret == 0 || !m.Contains(ret) {
		return false
	}
	f := open(m.Path, m.BuildID)
	if f == nil {
		return false
	}
	tm := t.add(m.Path, m.BuildID)
	va := ret - 1 - m.Base
	if s := findSymbol(f.syms, va); s != nil && !tm.funcs[s.addr] {
		tm.funcs[s.addr] = true
		tm.f.syms = append(tm.f.syms, *s)
		sort.Slice(tm.f.syms, func(i, j int) bool {
			a, b := tm.f.syms[i], tm.f.syms[j]
			if a.addr != b.addr {
				return a.addr < b.addr
			}
			return a.size > b.size
		})
	}
	chain := f.lookup(va)
	for _, c := range chain {
		if c.line != 0 {
			tm.f.sites[va] = chain
			break
		}
	}
	return true
}

// WriteTo writes the tables in the text format.
func (t *Tables) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	var n int64
	p := func(format string, a ...any) {
		k, _ := fmt.Fprintf(bw, format, a...)
		n += int64(k)
	}
	p("%s\n", TableHeader)
	for _, m := range t.order {
		p("module\t%s\t%s\n", field(m.path), field(m.buildID))
		for _, s := range m.f.syms {
			p("func\t%x\t%x\t%s\n", s.addr, s.size, field(s.name))
		}
		vas := make([]uint64, 0, len(m.f.sites))
		for va := range m.f.sites {
			vas = append(vas, va)
		}
		sort.Slice(vas, func(i, j int) bool { return vas[i] < vas[j] })
		for _, va := range vas {
			p("at\t%x", va)
			for _, fr := range m.f.sites[va] {
				p("\t%s\t%s\t%d", field(fr.function), field(fr.file), fr.line)
			}
			p("\n")
		}
	}
	return n, bw.Flush()
}

// field keeps a name on its field: tabs and newlines become spaces.
func field(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

func unfield(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// ReadTables reads table files; a directory contributes its *.syms files.
func ReadTables(paths ...string) (*Tables, error) {
	t := NewTables()
	for _, p := range paths {
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		files := []string{p}
		if st.IsDir() {
			files, _ = filepath.Glob(filepath.Join(p, "*"+TableExt))
			sort.Strings(files)
		}
		for _, f := range files {
			if err := t.readFile(f); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

func (t *Tables) readFile(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	return t.Read(fh, path)
}

// Read adds the tables of one file (named name in errors).
func (t *Tables) Read(r io.Reader, name string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var cur *tableModule
	line := 0
	bad := func(why string) error { return fmt.Errorf("%s:%d: %s", name, line, why) }
	hex := func(s, what string) (uint64, error) {
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return 0, bad(fmt.Sprintf("%s %q is not a hexadecimal number", what, s))
		}
		return v, nil
	}
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 && text != TableHeader {
			return bad(fmt.Sprintf("not a gpuprof symbol table (first line %q, want %q)", text, TableHeader))
		}
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fs := strings.Split(text, "\t")
		switch fs[0] {
		case "module":
			if len(fs) != 3 {
				return bad("module record wants PATH and BUILDID")
			}
			cur = t.add(fs[1], unfield(fs[2]))
		case "func":
			if cur == nil {
				return bad("func record before any module")
			}
			if len(fs) != 4 {
				return bad("func record wants ADDR, SIZE and NAME")
			}
			addr, err := hex(fs[1], "address")
			if err != nil {
				return err
			}
			size, err := hex(fs[2], "size")
			if err != nil {
				return err
			}
			if !cur.funcs[addr] {
				cur.funcs[addr] = true
				cur.f.syms = append(cur.f.syms, symbol{addr, size, unfield(fs[3])})
			}
		case "at":
			if cur == nil {
				return bad("at record before any module")
			}
			if len(fs) < 5 || (len(fs)-2)%3 != 0 {
				return bad("at record wants ADDR then FUNC, FILE and LINE per frame")
			}
			va, err := hex(fs[1], "address")
			if err != nil {
				return err
			}
			var chain []frame
			for i := 2; i < len(fs); i += 3 {
				ln, err := strconv.ParseUint(fs[i+2], 10, 32)
				if err != nil {
					return bad(fmt.Sprintf("line %q is not a number", fs[i+2]))
				}
				chain = append(chain, frame{function: unfield(fs[i]), file: unfield(fs[i+1]), line: uint32(ln)})
			}
			cur.f.sites[va] = chain
		default:
			return bad(fmt.Sprintf("unknown record %q", fs[0]))
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if line == 0 {
		return fmt.Errorf("%s: empty, not a gpuprof symbol table", name)
	}
	for _, m := range t.order {
		sort.Slice(m.f.syms, func(i, j int) bool {
			a, b := m.f.syms[i], m.f.syms[j]
			if a.addr != b.addr {
				return a.addr < b.addr
			}
			return a.size > b.size
		})
	}
	return nil
}
