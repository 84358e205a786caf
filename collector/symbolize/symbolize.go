// Package symbolize turns raw host return addresses into calling-context
// frames: (module path, function, file, line) with the inlined frames at
// each address, from the ELF symbol table and DWARF of the mapped module.
// Parsed modules are cached per (path, build id) and shared by every
// Symbolizer of the process. Frames inside the CUDA driver, runtime and
// CUPTI, the injection library and the C start code are dropped; addresses
// that cannot be resolved keep their module and module-relative offset.
// Addresses outside every module are looked up in the process's perf map
// (CPython's Python functions, perfmap.go).
package symbolize

import (
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// DefaultDropModules are the base-name prefixes of modules whose frames are
// dropped (a trailing '*' is implied).
var DefaultDropModules = []string{"libcuda.", "libcudart", "libcupti", "libgpuprof_inject", "libsanitizer", "libnvidia-", "libcudadebugger"}

// DefaultDropFunctions name the functions whose frames are dropped wherever
// they are (the statically linked CUDA runtime lives in the executable; the
// C start code in libc or the executable). A trailing '*' makes a prefix.
var DefaultDropFunctions = []string{"cudart::*", "__cudart*", "_ZN6cudart*", "libcudart_static_*", "__libc_start_main", "__libc_start_call_main", "_start",
	"cudaLaunch*", "cudaMalloc*", "__device_stub__*", "_Z*__device_stub__*"}

// Symbolizer resolves addresses of one process.
type Symbolizer struct {
	DropModules   []string
	DropFunctions []string
	// Tables resolve modules whose files are not on this machine (or
	// differ from the file that was mapped), from symbol tables extracted
	// where the stream was captured.
	Tables *Tables

	mu      sync.Mutex
	modules []*rawstream.HostModule
	perf    *perfMap // nil: no perf map
	cache   map[uint64][]profile.Frame
	dropped map[uint64]bool
}

// New returns a symbolizer with the default drop lists.
func New() *Symbolizer {
	return &Symbolizer{DropModules: DefaultDropModules, DropFunctions: DefaultDropFunctions,
		cache: map[uint64][]profile.Frame{}, dropped: map[uint64]bool{}}
}

// AddModule records a module mapped into the process.
func (s *Symbolizer) AddModule(m *rawstream.HostModule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modules = append(s.modules, m)
	clear(s.cache) // an address may now resolve differently
	clear(s.dropped)
}

// SetPerfMap names the process's perf map (perf-PID.map, see perfmap.go)
// for addresses outside every module: CPython's Python frames. "" sets
// none; a file that does not exist yet is looked for again at the next
// miss.
func (s *Symbolizer) SetPerfMap(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perf = nil
	if path != "" {
		s.perf = &perfMap{path: path}
	}
	clear(s.cache)
	clear(s.dropped)
}

func (s *Symbolizer) moduleOf(addr uint64) *rawstream.HostModule {
	for i := len(s.modules) - 1; i >= 0; i-- { // the latest mapping wins
		if s.modules[i].Contains(addr) {
			return s.modules[i]
		}
	}
	return nil
}

// Frames resolves a stack of return addresses (innermost first) into host
// frames, outermost first.
func (s *Symbolizer) Frames(stack []uint64) []profile.Frame {
	var out []profile.Frame
	for i := len(stack) - 1; i >= 0; i-- {
		fr, _ := s.Resolve(stack[i])
		out = append(out, fr...)
	}
	return out
}

// Resolve returns the frames of one return address, outermost first (the
// function, then the functions inlined into it), and whether the address
// was kept (false: it lies in a dropped module or function).
func (s *Symbolizer) Resolve(ret uint64) ([]profile.Frame, bool) {
	if ret == 0 {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fr, ok := s.cache[ret]; ok {
		return fr, true
	}
	if s.dropped[ret] {
		return nil, false
	}
	fr, keep := s.resolve(ret)
	if len(s.cache) > 1<<16 {
		clear(s.cache)
		clear(s.dropped)
	}
	if keep {
		s.cache[ret] = fr
	} else {
		s.dropped[ret] = true
	}
	return fr, keep
}

func hasPrefix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// matches reports whether name is one of pats: exact names, "prefix*", or
// "a*b*" (a prefix, then b somewhere after it).
func matches(name string, pats []string) bool {
	for _, p := range pats {
		parts := strings.Split(p, "*")
		if len(parts) == 1 {
			if name == p {
				return true
			}
			continue
		}
		if !strings.HasPrefix(name, parts[0]) {
			continue
		}
		rest, ok := name[len(parts[0]):], true
		for _, q := range parts[1 : len(parts)-1] {
			i := strings.Index(rest, q)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(q):]
		}
		if ok && strings.HasSuffix(rest, parts[len(parts)-1]) {
			return true
		}
	}
	return false
}

func (s *Symbolizer) resolve(ret uint64) ([]profile.Frame, bool) {
	m := s.moduleOf(ret)
	if m == nil {
		// Code outside every module: generated at run time, named by the
		// perf map if the process wrote one (the call is the byte before
		// the return address, inside the caller's range).
		if s.perf != nil {
			if e := s.perf.lookup(ret - 1); e != nil {
				return []profile.Frame{s.perf.perfFrame(e.name)}, true
			}
		}
		return []profile.Frame{{Kind: profile.KindHostFrame, Offset: ret}}, true
	}
	if hasPrefix(filepath.Base(m.Path), s.DropModules) {
		return nil, false
	}
	// A return address points after the call; the call is the byte before.
	va := ret - 1 - m.Base
	unresolved := []profile.Frame{{Kind: profile.KindHostFrame, Module: m.Path, Offset: va + 1}}
	f := open(m.Path, m.BuildID)
	if f == nil {
		f = s.Tables.module(m.Path, m.BuildID)
	}
	if f == nil {
		return unresolved, true
	}
	chain := f.lookup(va)
	if len(chain) == 0 {
		return unresolved, true
	}
	out := make([]profile.Frame, 0, len(chain))
	for _, c := range chain {
		if matches(c.function, s.DropFunctions) {
			return nil, false
		}
		out = append(out, profile.Frame{Kind: profile.KindHostFrame, Module: m.Path, Function: c.function, File: c.file, Line: c.line})
	}
	// Without a line (a binary built without -g: only the symbol table) the
	// function's name alone would make every call in it one frame, and
	// every allocation of one size made in main one data object. The
	// call's address keeps the call sites apart, as an unresolved frame's
	// does.
	if last := &out[len(out)-1]; last.Line == 0 {
		last.Offset = va + 1
	}
	return out, true
}

// frame is one resolved (possibly inlined) frame.
type frame struct {
	function string
	file     string
	line     uint32
}

var files struct {
	sync.Mutex
	m map[string]*elfFile
}

// open returns the parsed module at path with the given build id, or nil
// if it cannot be read or is not the file that was mapped.
func open(path, buildID string) *elfFile {
	key := path + "\x00" + buildID
	files.Lock()
	defer files.Unlock()
	if f, ok := files.m[key]; ok {
		return f
	}
	if files.m == nil {
		files.m = map[string]*elfFile{}
	}
	f, err := load(path)
	if err != nil || (buildID != "" && f.buildID != "" && !strings.EqualFold(f.buildID, buildID)) {
		f = nil
	}
	files.m[key] = f
	return f
}

type symbol struct {
	addr, size uint64
	name       string
}

func findSymbol(syms []symbol, va uint64) *symbol {
	i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > va }) - 1
	for ; i >= 0; i-- {
		s := &syms[i]
		if va < s.addr+max(s.size, 1) {
			return s
		}
		if s.size != 0 { // sized symbols do not nest; give up at the first that ends before va
			return nil
		}
	}
	return nil
}
