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

	"github.com/klauspost/compress/zstd"

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
// and no error when the structure is simply not available. A source that
// also has a Prefetch(hash, cubin) method is told of each module when its
// bytes arrive, ahead of its first launch (SASS starts nvdisasm then).
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

// NVDisasmArgs are the nvdisasm options of every listing gpuprof makes
// (before the cubin's path): code only, line information with inlining,
// and the encodings, whose control bits the stall blamer needs. One set
// for the collectors and the root, so a listing shared through the broker
// serves both.
var NVDisasmArgs = []string{"-c", "-g", "-gi", "-hex"}

// ListingShare shares the nvdisasm listings of a job's modules between its
// ranks, so that one rank disassembles each module (stored bytes are
// EncodeListing's). Implementations must be safe for concurrent use.
type ListingShare interface {
	// Claim reports whether this rank is the one to produce module h's
	// listing: true for exactly one rank of the job.
	Claim(ctx context.Context, h profile.ModuleHash) (bool, error)
	// Store stores the claimant's encoded listing, or with failure != ""
	// (and no listing) says that it gave up.
	Store(ctx context.Context, h profile.ModuleHash, listing []byte, failure string) error
	// Await returns the encoded listing another rank produced. claimed is
	// false when nobody claimed the module (nothing to wait for); err is
	// set when the claimant gave up or ctx ended first.
	Await(ctx context.Context, h profile.ModuleHash) (listing []byte, claimed bool, err error)
}

// ShareStats count what a SASS did with its modules' listings.
type ShareStats struct {
	Disassembled uint64 // nvdisasm runs
	Shared       uint64 // listings another rank produced, parsed here
	Fallbacks    uint64 // waits that ended without a listing: nvdisasm ran here
	Stored       uint64 // listings this rank stored for the others
}

// SASS is a StructureSource backed by the sass package: it disassembles
// cubins with nvdisasm when it can, and otherwise uses committed nvdisasm
// output (for replays of recorded or generated streams). Parsed modules are
// cached by content hash; with Share, a job's ranks disassemble each module
// once (docs/sass.md, "Sharing listings").
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
	// Share, when set, shares listings with the job's other ranks: the
	// first rank to need a module claims it and runs nvdisasm, the others
	// wait for its listing.
	Share ListingShare
	// ShareWait bounds a wait for another rank's listing (default Timeout
	// plus 30s); a claimant that died is then replaced by running nvdisasm
	// here.
	ShareWait time.Duration
	// Logf receives messages about sharing (nil: silent).
	Logf func(format string, args ...any)

	mu      sync.Mutex
	cache   map[profile.ModuleHash]*sassStructure
	pending map[profile.ModuleHash]*prefetch
	parsed  []*parsedFile
	scanned bool
	statMu  sync.Mutex // stats, also counted by prefetches outside mu
	stats   ShareStats
}

// prefetch is a module's listing being made ahead of its first launch.
type prefetch struct {
	done chan struct{}
	m    *sass.Module
	err  error
}

type parsedFile struct {
	path string
	mod  *sass.Module
	err  error
}

// Stats returns the sharing counters so far.
func (s *SASS) Stats() ShareStats {
	s.statMu.Lock()
	defer s.statMu.Unlock()
	return s.stats
}

func (s *SASS) count(f func(*ShareStats)) {
	s.statMu.Lock()
	f(&s.stats)
	s.statMu.Unlock()
}

// Prefetch starts making the listing of a module in the background, when
// its bytes arrive: nvdisasm then runs while the application sets up
// (allocations, copies) instead of holding up the analysis at the
// module's first launch, where Structure waits for it. On the H100 host
// the first launch waited 0.7 s for nvdisasm while the stream piled up.
func (s *SASS) Prefetch(hash profile.ModuleHash, cubin []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cache[hash]; ok || len(cubin) == 0 {
		return
	}
	if _, ok := s.pending[hash]; ok {
		return
	}
	if s.pending == nil {
		s.pending = map[profile.ModuleHash]*prefetch{}
	}
	p := &prefetch{done: make(chan struct{})}
	s.pending[hash] = p
	go func() {
		defer close(p.done)
		p.m, p.err = s.module(hash, cubin)
	}()
}

func (s *SASS) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
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
	var m *sass.Module
	var err error
	if p := s.pending[hash]; p != nil {
		s.mu.Unlock()
		<-p.done
		s.mu.Lock()
		delete(s.pending, hash)
		if st, ok := s.cache[hash]; ok { // another caller finished it meanwhile
			if st == nil {
				return nil, nil
			}
			return st, nil
		}
		m, err = p.m, p.err
	} else {
		m, err = s.module(hash, cubin)
	}
	if err != nil {
		errs = append(errs, err.Error())
	}
	if m != nil && covers(m, functions) {
		st := newSASSStructure(hash, m)
		s.cache[hash] = st
		return st, nil
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

// module returns the parsed listing of the module: another rank's through
// Share, else nvdisasm's here (nil without an error when there is no way).
func (s *SASS) module(hash profile.ModuleHash, cubin []byte) (*sass.Module, error) {
	tool, toolErr := s.tool()
	canRun := toolErr == nil && len(cubin) > 0
	share := s.Share != nil
	if share {
		ctx := context.Background()
		claimed := false
		if canRun {
			var err error
			if claimed, err = s.Share.Claim(ctx, hash); err != nil {
				// The broker is unreachable: work alone.
				s.logf("module %v: claiming its listing: %v (disassembling here)", hash, err)
				share = false
			}
		}
		switch {
		case claimed:
			text, err := s.run(tool, cubin)
			if err != nil {
				if serr := s.Share.Store(ctx, hash, nil, firstLine(err.Error())); serr != nil {
					s.logf("module %v: %v", hash, serr)
				}
				return nil, err
			}
			return s.parseAndStore(hash, text)
		case share:
			wait := s.ShareWait
			if wait <= 0 {
				wait = s.timeout() + 30*time.Second
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			enc, wasClaimed, err := s.Share.Await(wctx, hash)
			cancel()
			switch {
			case err == nil && wasClaimed:
				m, err := decodeAndParse(enc)
				if err == nil {
					s.count(func(st *ShareStats) { st.Shared++ })
					return m, nil
				}
				s.logf("module %v: the shared listing is unusable: %v", hash, err)
			case err != nil:
				s.logf("module %v: no shared listing: %v", hash, err)
			}
			if canRun {
				s.count(func(st *ShareStats) { st.Fallbacks++ })
			}
		}
	}
	if !canRun {
		if len(cubin) == 0 {
			return nil, nil
		}
		return nil, toolErr
	}
	text, err := s.run(tool, cubin)
	if err != nil {
		return nil, err
	}
	if share {
		// After a claimant failed or died: the next ranks need not wait.
		return s.parseAndStore(hash, text)
	}
	return parseListing(text)
}

func (s *SASS) parseAndStore(hash profile.ModuleHash, text []byte) (*sass.Module, error) {
	m, err := parseListing(text)
	failure := ""
	var enc []byte
	if err != nil {
		failure = firstLine(err.Error())
	} else {
		enc = EncodeListing(text)
	}
	if serr := s.Share.Store(context.Background(), hash, enc, failure); serr != nil {
		s.logf("module %v: sharing its listing: %v", hash, serr)
	} else if err == nil {
		s.count(func(st *ShareStats) { st.Stored++ })
	}
	return m, err
}

func decodeAndParse(enc []byte) (*sass.Module, error) {
	text, err := DecodeListing(enc)
	if err != nil {
		return nil, err
	}
	return parseListing(text)
}

func parseListing(text []byte) (*sass.Module, error) {
	m, err := sass.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parsing nvdisasm output: %w", err)
	}
	return m, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func (s *SASS) tool() (string, error) {
	tool := s.NVDisasm
	if tool == "-" {
		return "", fmt.Errorf("nvdisasm disabled")
	}
	if tool == "" {
		p, err := exec.LookPath("nvdisasm")
		if err != nil {
			return "", fmt.Errorf("nvdisasm not on PATH")
		}
		tool = p
	}
	return tool, nil
}

func (s *SASS) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return 2 * time.Minute
}

// run runs nvdisasm on a cubin and returns its listing.
func (s *SASS) run(tool string, cubin []byte) ([]byte, error) {
	s.count(func(st *ShareStats) { st.Disassembled++ })
	return RunNVDisasm(tool, cubin, s.timeout())
}

// RunNVDisasm writes cubin to a temporary file and returns nvdisasm's
// listing of it (NVDisasmArgs), within timeout.
func RunNVDisasm(tool string, cubin []byte, timeout time.Duration) ([]byte, error) {
	dir, err := os.MkdirTemp("", "gpuprof-cubin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "module.cubin")
	if err := os.WriteFile(f, cubin, 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, append(append([]string(nil), NVDisasmArgs...), f)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nvdisasm: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

var (
	listingEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	listingDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxListing))
)

// maxListing bounds a decoded listing (nvdisasm text of the largest
// modules is tens of MB).
const maxListing = 1 << 30

// EncodeListing compresses an nvdisasm listing for the module store
// (listings compress about 10x).
func EncodeListing(text []byte) []byte { return listingEnc.EncodeAll(text, nil) }

// DecodeListing reverses EncodeListing.
func DecodeListing(b []byte) ([]byte, error) {
	text, err := listingDec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("shared nvdisasm listing: %w", err)
	}
	return text, nil
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
