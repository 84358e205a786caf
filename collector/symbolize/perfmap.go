package symbolize

import (
	"bytes"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

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
	err     error // the last read's error (a missing file is not one)
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
// profile.PythonModule, its qualified name and source file) for CPython's
// "py::" entries, else a frame named as the map names it.
func perfFrame(name string) profile.Frame {
	if rest, ok := strings.CutPrefix(name, "py::"); ok {
		fn, file, _ := strings.Cut(rest, ":")
		return profile.Frame{Kind: profile.KindHostFrame, Module: profile.PythonModule, Function: fn, File: file}
	}
	return profile.Frame{Kind: profile.KindHostFrame, Module: profile.JITModule, Function: name}
}
