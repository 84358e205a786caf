package analyze

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"gpuprof/profile"
	"gpuprof/sass"
)

// AccessKind is how a memory instruction's value is made of units: Vec
// units of UnitBits bits, read as Type (GVProf's access kind).
type AccessKind struct {
	Type     profile.ValueKind
	UnitBits uint8
	Vec      uint8
}

// Placement is where a GPU instruction sits in the calling-context tree
// below its kernel node.
type Placement struct {
	// Function holds the instruction (a subroutine that ptxas placed in a
	// kernel's section is a function of its own) and Offset is the
	// instruction's offset as nvdisasm prints it.
	Function string
	Offset   uint32
	// Frames go from the kernel node down to the instruction's parent; the
	// first is the KindGPUFunction frame of Function.
	Frames []profile.Frame
}

// Structure is what the analysis needs of a GPU module's parsed SASS.
// Offsets are counted from the start of the named function, as the stream
// gives them (record PC minus the function's PC). Implementations must be
// safe for concurrent use.
type Structure interface {
	Place(function string, offset uint64) (Placement, bool)
	AccessKind(function string, offset uint64) (AccessKind, bool)
}

// StructureSource finds the structure of a module: its content hash, the
// cubin bytes (nil if the stream did not carry them), the names of its
// functions known so far and the compute capability × 10. It returns nil
// and no error when the structure is simply not available.
type StructureSource interface {
	Structure(hash profile.ModuleHash, cubin []byte, functions []string, sm uint16) (Structure, error)
}

// fallbackKind reads an access of size bytes per lane as redshow does
// without an access kind: units of min(size, 4) bytes... except that 8-byte
// accesses are one 64-bit unit, the common case (double, pointer, long).
func fallbackKind(size uint8) AccessKind {
	switch size {
	case 1, 2, 4, 8:
		return AccessKind{Type: profile.ValUnknown, UnitBits: size * 8, Vec: 1}
	case 16:
		return AccessKind{Type: profile.ValUnknown, UnitBits: 32, Vec: 4}
	}
	return AccessKind{}
}

// SASS is a StructureSource backed by the sass package: it disassembles
// cubins with nvdisasm when it can, and otherwise uses committed nvdisasm
// output (for replays of recorded or generated streams). Parsed modules are
// cached by content hash.
type SASS struct {
	// NVDisasm is the nvdisasm to run; "" looks it up on PATH, "-" never
	// runs one.
	NVDisasm string
	// Files are nvdisasm outputs (files, or directories searched for
	// *.sass.txt) used for modules nvdisasm cannot handle: the first file
	// whose functions include every function of the module, preferring one
	// for the module's architecture.
	Files []string
	// Timeout bounds one nvdisasm run (default 2 minutes).
	Timeout time.Duration

	mu      sync.Mutex
	cache   map[profile.ModuleHash]*sassStructure
	parsed  []*parsedFile
	scanned bool
}

type parsedFile struct {
	path string
	mod  *sass.Module
	err  error
}

// Structure implements StructureSource.
func (s *SASS) Structure(hash profile.ModuleHash, cubin []byte, functions []string, sm uint16) (Structure, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.cache[hash]; ok {
		if st == nil {
			return nil, nil
		}
		return st, nil
	}
	if s.cache == nil {
		s.cache = map[profile.ModuleHash]*sassStructure{}
	}
	var errs []string
	if len(cubin) > 0 {
		m, err := s.disassemble(cubin)
		if err == nil && covers(m, functions) {
			st := newSASSStructure(hash, m)
			s.cache[hash] = st
			return st, nil
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if m := s.fromFiles(functions, sm); m != nil {
		st := newSASSStructure(hash, m)
		s.cache[hash] = st
		return st, nil
	}
	s.cache[hash] = nil
	if len(errs) > 0 {
		return nil, fmt.Errorf("module %v: %s", hash, strings.Join(errs, "; "))
	}
	return nil, nil
}

func covers(m *sass.Module, functions []string) bool {
	for _, f := range functions {
		if m.Func(f) == nil {
			return false
		}
	}
	return len(functions) > 0
}

func (s *SASS) disassemble(cubin []byte) (*sass.Module, error) {
	tool := s.NVDisasm
	if tool == "-" {
		return nil, fmt.Errorf("nvdisasm disabled")
	}
	if tool == "" {
		p, err := exec.LookPath("nvdisasm")
		if err != nil {
			return nil, fmt.Errorf("nvdisasm not on PATH")
		}
		tool = p
	}
	dir, err := os.MkdirTemp("", "gpuprof-cubin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "module.cubin")
	if err := os.WriteFile(f, cubin, 0o600); err != nil {
		return nil, err
	}
	to := s.Timeout
	if to <= 0 {
		to = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), to)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, "-c", "-g", "-gi", f)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nvdisasm: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	m, err := sass.Parse(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("parsing nvdisasm output: %w", err)
	}
	return m, nil
}

func (s *SASS) fromFiles(functions []string, sm uint16) *sass.Module {
	if !s.scanned {
		s.scanned = true
		var paths []string
		for _, f := range s.Files {
			fi, err := os.Stat(f)
			if err != nil {
				continue
			}
			if !fi.IsDir() {
				paths = append(paths, f)
				continue
			}
			filepath.WalkDir(f, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(p, ".sass.txt") {
					paths = append(paths, p)
				}
				return nil
			})
		}
		sort.Strings(paths)
		for _, p := range paths {
			s.parsed = append(s.parsed, &parsedFile{path: p})
		}
	}
	arch := fmt.Sprintf("sm_%d", sm)
	var best *sass.Module
	for _, pf := range s.parsed {
		if pf.mod == nil && pf.err == nil {
			b, err := os.ReadFile(pf.path)
			if err == nil {
				pf.mod, err = sass.Parse(b)
			}
			pf.err = err
		}
		if pf.mod == nil || !covers(pf.mod, functions) {
			continue
		}
		if pf.mod.Arch == arch {
			return pf.mod
		}
		if best == nil {
			best = pf.mod
		}
	}
	return best
}

// sassStructure adapts a parsed sass.Module to Structure.
type sassStructure struct {
	hash string
	m    *sass.Module
	st   *sass.Structure
}

func newSASSStructure(h profile.ModuleHash, m *sass.Module) *sassStructure {
	return &sassStructure{hash: h.String(), m: m, st: m.Structure()}
}

func (s *sassStructure) AccessKind(fn string, off uint64) (AccessKind, bool) {
	k, ok := s.m.AccessKind(fn, off)
	if !ok || k.Fallback || k.UnitBits <= 0 || k.UnitBits > 64 || k.Vec <= 0 {
		return AccessKind{}, false
	}
	t := profile.ValUnknown
	switch k.Type {
	case sass.TypeInt:
		t = profile.ValInt
	case sass.TypeFloat:
		t = profile.ValFloat
	}
	return AccessKind{Type: t, UnitBits: uint8(k.UnitBits), Vec: uint8(k.Vec)}, true
}

func (s *sassStructure) Place(fn string, off uint64) (Placement, bool) {
	c, ok := s.st.Lookup(fn, off)
	if !ok || len(c.Scopes) == 0 {
		return Placement{}, false
	}
	in := c.Func.Insts[c.Inst]
	pl := Placement{Function: c.Func.Name, Offset: uint32(in.Offset)}
	for _, sc := range c.Scopes {
		switch sc.Kind {
		case sass.ScopeFunction:
			f := profile.Frame{Kind: profile.KindGPUFunction, Module: s.hash, Function: sc.Func.Name}
			pl.Frames = append(pl.Frames, f)
		case sass.ScopeInline:
			// nvdisasm's line map names the inlined code's file, not its
			// function; the frame carries the call site.
			pl.Frames = append(pl.Frames, profile.Frame{Kind: profile.KindInlined, Function: filepath.Base(s.m.File(sc.Callee)),
				File: s.m.File(sc.Pos.File), Line: uint32(max(sc.Pos.Line, 0))})
		case sass.ScopeLoop:
			g := sc.Func.CFG()
			var hdr uint64
			if sc.Loop >= 0 && sc.Loop < len(g.Loops) {
				b := g.Loops[sc.Loop].Header
				if b >= 0 && b < len(g.Blocks) && g.Blocks[b].Start < len(sc.Func.Insts) {
					hdr = sc.Func.Insts[g.Blocks[b].Start].Offset
				}
			}
			pl.Frames = append(pl.Frames, profile.Frame{Kind: profile.KindLoop, File: s.m.File(sc.Pos.File),
				Line: uint32(max(sc.Pos.Line, 0)), Offset: hdr})
		case sass.ScopeLine:
			pl.Frames = append(pl.Frames, profile.Frame{Kind: profile.KindLine, File: s.m.File(sc.Pos.File), Line: uint32(max(sc.Pos.Line, 0))})
		}
	}
	return pl, true
}
