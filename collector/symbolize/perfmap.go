package symbolize

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"gpuprof/profile"
)

// A perf map (/tmp/perf-PID.map) names code a process generated at run
// time: one "START SIZE NAME" line per range, hexadecimal without 0x,
// appended as code is made. CPython 3.12+ with its perf trampoline
// (python -X perf, PYTHONPERFSUPPORT=1) writes one entry per Python
// function the first time it runs, named "py::QUALNAME:FILE"; each call
// of the function then runs through its trampoline, so a native stack
// holds a return address inside that entry's range for every Python frame
// the unwinder passed. The map has no line numbers.

type perfEntry struct {
	start, size uint64
	name        string
}

// perfMap is one process's map, read incrementally: the file only grows,
// so a lookup that misses reads what was appended since.
type perfMap struct {
	path    string
	off     int64 // bytes of whole lines parsed
	entries []perfEntry
	err     error               // the last read's error (a missing file is not one)
	src     map[string][]string // Python source files by path, for definition lines
}

// maxPerfMapRead bounds one read of a map (CPython's maps of large
// programs are a few MB).
const maxPerfMapRead = 256 << 20

// refresh parses the lines appended since the last read and reports
// whether any were.
func (m *perfMap) refresh() bool {
	f, err := os.Open(m.path)
	if err != nil {
		if !os.IsNotExist(err) {
			m.err = err
		}
		return false
	}
	defer f.Close()
	if _, err := f.Seek(m.off, io.SeekStart); err != nil {
		m.err = err
		return false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPerfMapRead))
	if err != nil {
		m.err = err
		return false
	}
	// A line still being written waits for the next read.
	end := bytes.LastIndexByte(b, '\n') + 1
	if end == 0 {
		return false
	}
	added := parsePerfMap(b[:end])
	m.off += int64(end)
	if len(added) == 0 {
		return false
	}
	m.entries = append(m.entries, added...)
	// Later entries win over earlier ones at the same start (code
	// regenerated at an address), as perf reads them.
	sort.SliceStable(m.entries, func(i, j int) bool { return m.entries[i].start < m.entries[j].start })
	return true
}

// parsePerfMap reads "START SIZE NAME" lines; malformed lines are skipped
// (the map is another program's output).
func parsePerfMap(b []byte) []perfEntry {
	var out []perfEntry
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		f := strings.SplitN(strings.TrimSpace(string(line)), " ", 3)
		if len(f) != 3 || f[2] == "" {
			continue
		}
		start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		size, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err1 != nil || err2 != nil || size == 0 || start+size < start {
			continue
		}
		out = append(out, perfEntry{start, size, f[2]})
	}
	return out
}

// find returns the entry whose range holds addr: of the entries starting
// at or below it, the last with the highest start.
func (m *perfMap) find(addr uint64) *perfEntry {
	i := sort.Search(len(m.entries), func(i int) bool { return m.entries[i].start > addr }) - 1
	if i < 0 {
		return nil
	}
	e := &m.entries[i]
	if addr-e.start < e.size {
		return e
	}
	return nil
}

// lookup finds addr, reading the map again once if it is not there yet.
func (m *perfMap) lookup(addr uint64) *perfEntry {
	if e := m.find(addr); e != nil {
		return e
	}
	if m.refresh() {
		return m.find(addr)
	}
	return nil
}

// perfFrame is the frame of a perf-map entry: a Python function (module
// profile.PythonModule, its qualified name, source file and the line of its
// definition, 0 when not found) for CPython's "py::" entries, else a frame
// named as the map names it.
func (m *perfMap) perfFrame(name string) profile.Frame {
	if rest, ok := strings.CutPrefix(name, "py::"); ok {
		fn, file, _ := strings.Cut(rest, ":")
		return profile.Frame{Kind: profile.KindHostFrame, Module: profile.PythonModule, Function: fn, File: file, Line: m.defLine(file, fn)}
	}
	return profile.Frame{Kind: profile.KindHostFrame, Module: profile.JITModule, Function: name}
}

// maxPySource bounds the source file read for a definition line.
const maxPySource = 16 << 20

// defLine is the line of the definition of Python function qualname
// ("Net.forward", "main.<locals>.step") in file: the map has no lines, and
// the definition is the line CPython itself gives a function
// (co_firstlineno). The collector runs beside the application, so the
// file is the one that ran; 0 when it cannot be read or the name is not
// found (module code, lambdas, comprehensions).
func (m *perfMap) defLine(file, qualname string) uint32 {
	if file == "" || strings.HasPrefix(file, "<") {
		return 0
	}
	lines, ok := m.src[file]
	if !ok {
		if m.src == nil {
			m.src = map[string][]string{}
		}
		if b, err := readBounded(file, maxPySource); err == nil {
			lines = strings.Split(string(b), "\n")
		}
		m.src[file] = lines // nil: unreadable, not tried again
	}
	return pyDefLine(lines, qualname)
}

// readBounded reads at most n bytes of a regular file (never a FIFO or a
// device a map might name, which could block or never end).
func readBounded(path string, n int64) ([]byte, error) {
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// pyDefLine finds qualname's definition: each component's "def NAME(" or
// "class NAME" after the previous component's, skipping "<locals>".
func pyDefLine(lines []string, qualname string) uint32 {
	line, from := 0, 0
	for _, c := range strings.Split(qualname, ".") {
		if c == "<locals>" {
			continue
		}
		if strings.HasPrefix(c, "<") {
			return 0
		}
		found := false
		for i := from; i < len(lines); i++ {
			t := strings.TrimPrefix(strings.TrimSpace(lines[i]), "async ")
			rest, ok := strings.CutPrefix(t, "def ")
			if !ok {
				rest, ok = strings.CutPrefix(t, "class ")
			}
			if ok && pyIdent(strings.TrimLeft(rest, " ")) == c {
				line, from, found = i+1, i+1, true
				break
			}
		}
		if !found {
			return 0
		}
	}
	return uint32(line)
}

// pyIdent is the identifier s starts with.
func pyIdent(s string) string {
	for i, r := range s {
		if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			return s[:i]
		}
	}
	return s
}
