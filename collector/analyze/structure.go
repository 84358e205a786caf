package analyze

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
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

// Structure is what the analysis needs of a GPU function's parsed SASS.
// Offsets are counted from the start of the named function, as the stream
// gives them (record PC minus the function's PC). Implementations must be
// safe for concurrent use.
type Structure interface {
	Place(function string, offset uint64) (Placement, bool)
	AccessKind(function string, offset uint64) (AccessKind, bool)
}

// ModuleRef names the module of a structure request.
type ModuleRef struct {
	Hash profile.ModuleHash // 0: the module is not known
	// Cubin is the module's bytes (nil when the stream did not carry them).
	Cubin []byte
	SM    uint16 // compute capability × 10
	// Functions are the names of the module's functions known so far
	// (committed listings are chosen by them). Read only.
	Functions []string
}

// StructureSource finds the structure of GPU functions, one function at a
// time: Request starts the work for (module, function) once and returns at
// once; the analysis asks when a function is first launched or sampled and
// waits for the answer only where it must (docs/collector.md, "Structure").
// Implementations must be safe for concurrent use.
type StructureSource interface {
	Request(mod ModuleRef, fn string) *Pending
}

// Reasons a function is left without structure: the first word of
// Pending's reason, the suffix of the kernel's StructureMissing metric.
const (
	WhyUnknownModule = "unknown_module" // launched without (or before) its module
	WhyNoCubin       = "no_cubin"       // the stream carried no bytes and no listing was found
	WhyNoNVDisasm    = "no_nvdisasm"    // no nvdisasm and no listing was found
	WhyNVDisasm      = "nvdisasm"       // nvdisasm failed
	WhyNotInModule   = "not_in_module"  // the function is not in the module's symbols or listing
	WhyBadListing    = "bad_listing"    // the listing did not parse
	WhyTimeout       = "timeout"        // not ready within the bound
)

// StructureMissing prefixes the metric that marks, on a kernel node, a
// function whose instructions were placed without structure (directly
// under the function): "structure.missing.<reason>", 1 per rank, kernel
// context and function.
const StructureMissing = profile.StructureMissingPrefix

// ReasonCode is the first word of a reason ("no_cubin: ..." -> no_cubin).
func ReasonCode(why string) string {
	code, _, _ := strings.Cut(why, ":")
	return strings.TrimSpace(code)
}

// Pending is the structure of a function on its way.
type Pending struct {
	done chan struct{}
	once sync.Once
	st   Structure
	why  string
}

// NewPending returns an unfinished Pending.
func NewPending() *Pending { return &Pending{done: make(chan struct{})} }

// Resolved returns a finished Pending.
func Resolved(st Structure, why string) *Pending {
	p := NewPending()
	p.Finish(st, why)
	return p
}

// Finish settles p: st, or nil and why. Later calls do nothing.
func (p *Pending) Finish(st Structure, why string) {
	p.once.Do(func() {
		p.st, p.why = st, why
		if st == nil && why == "" {
			p.why = WhyNotInModule
		}
		close(p.done)
	})
}

// Done is closed once p is settled.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Ready returns the result without waiting; ok is false while pending.
func (p *Pending) Ready() (st Structure, why string, ok bool) {
	select {
	case <-p.done:
		return p.st, p.why, true
	default:
		return nil, "", false
	}
}

// Wait waits at most d for the result; ok is false when it is still
// pending.
func (p *Pending) Wait(d time.Duration) (Structure, string, bool) {
	if st, why, ok := p.Ready(); ok || d <= 0 {
		return st, why, ok
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.st, p.why, true
	case <-t.C:
		return nil, "", false
	}
}

// StructureOf requests a function's structure and waits for it.
func StructureOf(src StructureSource, mod ModuleRef, fn string) (Structure, string) {
	p := src.Request(mod, fn)
	<-p.Done()
	return p.st, p.why
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
// (before the function selection and the cubin's path): code only, line
// information with inlining, and the encodings, whose control bits the
// stall blamer needs. One set for the collectors and the root, so a
// listing shared through the broker or the disk cache serves both.
var NVDisasmArgs = []string{"-c", "-g", "-gi", "-hex"}

// ListingShare shares the nvdisasm listings of a job's functions between
// its ranks, so that one rank disassembles each (module, function). The
// bytes stored are EncodeEntry's. Implementations must be safe for
// concurrent use.
type ListingShare interface {
	// Claim reports whether this rank is the one to produce the listing
	// of function fn of module h: true for exactly one rank of the job.
	Claim(ctx context.Context, h profile.ModuleHash, fn string) (bool, error)
	// Store stores the claimant's listing, or with failure != "" (and no
	// listing) says that it gave up.
	Store(ctx context.Context, h profile.ModuleHash, fn string, listing []byte, failure string) error
	// Await returns the listing another rank produced. claimed is false
	// when nobody claimed it (nothing to wait for); err is set when the
	// claimant gave up or ctx ended first.
	Await(ctx context.Context, h profile.ModuleHash, fn string) (listing []byte, claimed bool, err error)
}

// ShareStats count how a SASS found its functions' listings.
type ShareStats struct {
	Disassembled uint64 // nvdisasm runs
	Functions    uint64 // functions disassembled here
	Whole        uint64 // modules disassembled whole (a function selection that failed)
	CacheHits    uint64 // functions found in the disk cache
	Shared       uint64 // listings another rank produced, parsed here
	Fallbacks    uint64 // waits that ended without a listing: nvdisasm ran here
	Stored       uint64 // listings this rank stored for the others
}

// SASS is a StructureSource backed by the sass package. For each function
// asked for it looks, in order, in the disk cache, in listings named by
// the module's hash among Files, in the listings other ranks share, and
// then runs nvdisasm on the cubin for that function only (batching the
// functions of a module that wait together into one run, several modules
// in parallel); legacy listings among Files (chosen by function names)
// come last, or before the broker for a rank that cannot disassemble
// (docs/sass.md, "Function by function").
type SASS struct {
	// NVDisasm is the nvdisasm to run; "" looks it up on PATH, "-" never
	// runs one.
	NVDisasm string
	// Files are nvdisasm outputs (files, or directories searched for
	// *.sass.txt, *.hex.txt and *.sass.zst). HASH.sass.txt, HASH.hex.txt
	// or HASH.sass.zst (HASH: the module's 16 hex digits; several files
	// join) serve that module; other files serve the functions they hold,
	// preferring one that holds every function of the module, one with
	// encodings, one for the module's architecture.
	Files []string
	// Timeout bounds one nvdisasm run (default 2 minutes).
	Timeout time.Duration
	// Share, when set, shares listings with the job's other ranks: the
	// first rank to need a function claims it and runs nvdisasm, the
	// others wait for its listing.
	Share ListingShare
	// ShareWait bounds a wait for another rank's listing (default Timeout
	// plus 30s); a claimant that died is then replaced by running nvdisasm
	// here.
	ShareWait time.Duration
	// Cache keeps listings across runs (nil: none).
	Cache *DiskCache
	// Parallel bounds the nvdisasm runs at once (default: half the CPUs,
	// 1 to 4).
	Parallel int
	// Logf receives messages about sharing (nil: silent).
	Logf func(format string, args ...any)

	mu       sync.Mutex
	funcs    map[funcKey]*Pending
	mods     map[profile.ModuleHash]*modWork
	sem      chan struct{}
	tmp      string
	files    *listingFiles
	structs  map[*sass.Module]*sassStructure
	toolOnce sync.Once
	toolPath string
	toolID   string
	toolErr  error
	statMu   sync.Mutex
	stats    ShareStats
}

type funcKey struct {
	h  profile.ModuleHash
	fn string
}

// Stats returns the counters so far.
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

func (s *SASS) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// Request implements StructureSource.
func (s *SASS) Request(mod ModuleRef, fn string) *Pending {
	k := funcKey{mod.Hash, fn}
	s.mu.Lock()
	if p := s.funcs[k]; p != nil {
		s.mu.Unlock()
		return p
	}
	if s.funcs == nil {
		s.funcs = map[funcKey]*Pending{}
	}
	p := NewPending()
	s.funcs[k] = p
	s.mu.Unlock()
	go func() {
		defer func() {
			if r := recover(); r != nil {
				p.Finish(nil, fmt.Sprintf("%s: %v", WhyBadListing, r))
			}
		}()
		f, why := s.find(mod, fn)
		if f.m == nil {
			p.Finish(nil, why)
			return
		}
		p.Finish(s.structureOf(mod.Hash, f.m), "")
	}()
	return p
}

// Listing returns the listing of function fn of module mod (its sections
// and those of its callees), found as for Request, or why there is none.
// The root joins those of a profile's functions into its modules.
func (s *SASS) Listing(mod ModuleRef, fn string) ([]byte, string) {
	f, why := s.find(mod, fn)
	if f.m == nil {
		return nil, why
	}
	return f.text, ""
}

// Listings is Listing for several functions of a module at once (their
// nvdisasm work in one batch): listings by function, and why for those
// without.
func (s *SASS) Listings(mod ModuleRef, fns []string) (map[string][]byte, map[string]string) {
	texts, whys := map[string][]byte{}, map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			text, why := s.Listing(mod, fn)
			mu.Lock()
			defer mu.Unlock()
			if text != nil {
				texts[fn] = text
			} else {
				whys[fn] = why
			}
		}()
	}
	wg.Wait()
	return texts, whys
}

// found is a function's listing: its text and the parsed module that
// holds the function (the text's, or a committed file's).
type found struct {
	text []byte
	m    *sass.Module
}

// inFile cuts function fn's listing from a parsed listing file.
func inFile(pf *parsedFile, fn string) (found, bool) {
	m := pf.get()
	if m == nil || m.Func(fn) == nil {
		return found{}, false
	}
	text, _ := sass.FunctionListing(pf.text, m, fn)
	return found{text, m}, true
}

// Close removes the cubins written for nvdisasm. Requests after Close
// write them again.
func (s *SASS) Close() {
	s.mu.Lock()
	tmp := s.tmp
	s.tmp = ""
	for _, mw := range s.mods {
		mw.path = ""
	}
	s.mu.Unlock()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
}

// find looks for the listing of one function where SASS's comment says.
func (s *SASS) find(mod ModuleRef, fn string) (found, string) {
	if mod.Hash == 0 {
		return found{}, WhyUnknownModule + ": the function came without a known module"
	}
	toolPath, toolID, toolErr := s.tool()
	if text, ok := s.Cache.Get(mod.Hash, fn, toolID); ok {
		if m, err := parseFunction(text, fn); err == nil {
			s.count(func(st *ShareStats) { st.CacheHits++ })
			return found{text, m}, ""
		}
	}
	if pf := s.listings().byHash(mod.Hash); pf != nil {
		if f, ok := inFile(pf, fn); ok {
			return f, ""
		}
	}
	canRun := toolErr == nil && len(mod.Cubin) > 0
	if !canRun {
		// A rank that cannot disassemble uses the listings it was given
		// (a replay) before waiting on the broker for another rank's.
		if pf := s.listings().byName(fn, mod.Functions, mod.SM); pf != nil {
			if f, ok := inFile(pf, fn); ok {
				return f, ""
			}
		}
	}
	var errs []string
	if s.Share != nil {
		f, why, done := s.shared(mod, fn, canRun, toolPath, toolID)
		if done {
			return f, why
		}
		if why != "" {
			errs = append(errs, why)
		}
	}
	if canRun {
		text, why := s.disassemble(mod, fn, toolPath)
		if why == "" {
			m, err := parseFunction(text, fn)
			if err != nil {
				return found{}, WhyBadListing + ": " + err.Error()
			}
			if err := s.Cache.Put(mod.Hash, fn, toolID, text); err != nil {
				s.logf("%v", err)
			}
			return found{text, m}, ""
		}
		errs = append(errs, why)
	}
	if pf := s.listings().byName(fn, mod.Functions, mod.SM); pf != nil {
		if f, ok := inFile(pf, fn); ok {
			return f, ""
		}
	}
	switch {
	case len(errs) > 0:
		return found{}, errs[0]
	case len(mod.Cubin) == 0:
		return found{}, WhyNoCubin + ": the stream carried no bytes of the module and no listing of the function was found"
	default:
		return found{}, WhyNoNVDisasm + ": " + toolErr.Error() + ", and no listing of the function was found"
	}
}

// shared gets the listing through Share: done is true when that settled
// the function (found, or failed for good); otherwise why says what went
// wrong, if anything, and find goes on.
func (s *SASS) shared(mod ModuleRef, fn string, canRun bool, toolPath, toolID string) (found, string, bool) {
	ctx := context.Background()
	claimed := false
	if canRun {
		var err error
		if claimed, err = s.Share.Claim(ctx, mod.Hash, fn); err != nil {
			// The broker is unreachable: work alone.
			s.logf("module %v %s: claiming its listing: %v (disassembling here)", mod.Hash, fn, err)
			return found{}, "", false
		}
	}
	if claimed {
		text, why := s.disassemble(mod, fn, toolPath)
		if why != "" {
			if err := s.Share.Store(ctx, mod.Hash, fn, nil, firstLine(why)); err != nil {
				s.logf("module %v %s: %v", mod.Hash, fn, err)
			}
			return found{}, why, true
		}
		return s.parseAndStore(mod.Hash, fn, toolID, text)
	}
	wait := s.ShareWait
	if wait <= 0 {
		wait = s.timeout() + 30*time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	enc, wasClaimed, err := s.Share.Await(wctx, mod.Hash, fn)
	cancel()
	switch {
	case err == nil && wasClaimed:
		tool, gotFn, text, derr := DecodeEntry(enc)
		if derr == nil && gotFn == fn {
			m, perr := parseFunction(text, fn)
			if perr == nil {
				s.count(func(st *ShareStats) { st.Shared++ })
				if err := s.Cache.Put(mod.Hash, fn, tool, text); err != nil {
					s.logf("%v", err)
				}
				return found{text, m}, "", true
			}
			derr = perr
		} else if derr == nil {
			derr = fmt.Errorf("it is the listing of %s", gotFn)
		}
		s.logf("module %v %s: the shared listing is unusable: %v", mod.Hash, fn, derr)
	case err != nil:
		s.logf("module %v %s: no shared listing: %v", mod.Hash, fn, err)
	}
	if !canRun {
		return found{}, "", false
	}
	s.count(func(st *ShareStats) { st.Fallbacks++ })
	text, why := s.disassemble(mod, fn, toolPath)
	if why != "" {
		return found{}, why, true
	}
	// After a claimant failed or died: the next ranks need not wait.
	return s.parseAndStore(mod.Hash, fn, toolID, text)
}

func (s *SASS) parseAndStore(h profile.ModuleHash, fn, toolID string, text []byte) (found, string, bool) {
	m, err := parseFunction(text, fn)
	failure := ""
	var enc []byte
	if err != nil {
		failure = WhyBadListing + ": " + firstLine(err.Error())
	} else {
		enc = EncodeEntry(toolID, fn, text)
		if err := s.Cache.Put(h, fn, toolID, text); err != nil {
			s.logf("%v", err)
		}
	}
	if serr := s.Share.Store(context.Background(), h, fn, enc, failure); serr != nil {
		s.logf("module %v %s: sharing its listing: %v", h, fn, serr)
	} else if err == nil {
		s.count(func(st *ShareStats) { st.Stored++ })
	}
	if err != nil {
		return found{}, failure, true
	}
	return found{text, m}, "", true
}

// parseFunction parses a function's listing; it must hold fn.
func parseFunction(text []byte, fn string) (*sass.Module, error) {
	m, err := sass.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parsing nvdisasm output: %w", err)
	}
	if m.Func(fn) == nil {
		return nil, fmt.Errorf("the listing lacks %s", fn)
	}
	return m, nil
}

// structureOf adapts a parsed module, once per module.
func (s *SASS) structureOf(h profile.ModuleHash, m *sass.Module) *sassStructure {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.structs[m]; st != nil {
		return st
	}
	if s.structs == nil {
		s.structs = map[*sass.Module]*sassStructure{}
	}
	st := newSASSStructure(h, m)
	s.structs[m] = st
	return st
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// tool finds nvdisasm and its identity (its version text and gpuprof's
// options): cached listings are used only when the same tool made them.
func (s *SASS) tool() (path, id string, err error) {
	s.toolOnce.Do(func() {
		tool := s.NVDisasm
		switch tool {
		case "-":
			s.toolErr = fmt.Errorf("nvdisasm disabled")
			return
		case "":
			p, err := exec.LookPath("nvdisasm")
			if err != nil {
				s.toolErr = fmt.Errorf("nvdisasm not on PATH")
				return
			}
			tool = p
		}
		s.toolPath = tool
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, tool, "--version").Output()
		if err != nil {
			out = []byte(tool) // an nvdisasm without --version: its path stands for it
		}
		s.toolID = fmt.Sprintf("nvdisasm-%016x", xxhash.Sum64String(string(out)+"\x00"+strings.Join(NVDisasmArgs, " ")))
	})
	return s.toolPath, s.toolID, s.toolErr
}

func (s *SASS) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return 2 * time.Minute
}

// RunNVDisasm writes cubin to a temporary file and returns nvdisasm's
// listing of it (NVDisasmArgs, then extra), within timeout.
func RunNVDisasm(tool string, cubin []byte, timeout time.Duration, extra ...string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "gpuprof-cubin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "module.cubin")
	if err := os.WriteFile(f, cubin, 0o600); err != nil {
		return nil, err
	}
	return runNVDisasmFile(tool, f, timeout, extra...)
}

func runNVDisasmFile(tool, cubin string, timeout time.Duration, extra ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	args := append(append(append([]string(nil), NVDisasmArgs...), extra...), cubin)
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("nvdisasm: no answer within %v", timeout)
		}
		return nil, fmt.Errorf("nvdisasm: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

var (
	listingEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	listingDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxListing))
)

// maxListing bounds a decoded listing (nvdisasm text of the largest
// modules is hundreds of MB).
const maxListing = 1 << 30

// EncodeListing compresses an nvdisasm listing (listings compress about
// 10x).
func EncodeListing(text []byte) []byte { return listingEnc.EncodeAll(text, nil) }

// DecodeListing reverses EncodeListing.
func DecodeListing(b []byte) ([]byte, error) {
	text, err := listingDec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("nvdisasm listing: %w", err)
	}
	return text, nil
}

// EncodeEntry is a function's listing as the disk cache and the broker
// keep it: which tool made it and for which function, and the text,
// compressed.
func EncodeEntry(tool, fn string, listing []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(cacheMagic) + len(tool) + len(fn) + 20 + len(listing))
	fmt.Fprintf(&b, "%stool %s\nfunction %s\n\n", cacheMagic, strings.ReplaceAll(tool, "\n", " "), strings.ReplaceAll(fn, "\n", " "))
	b.Write(listing)
	return EncodeListing(b.Bytes())
}

// DecodeEntry reverses EncodeEntry.
func DecodeEntry(b []byte) (tool, fn string, listing []byte, err error) {
	text, err := DecodeListing(b)
	if err != nil {
		return "", "", nil, err
	}
	tool, fn, listing, ok := splitEntry(text)
	if !ok {
		return "", "", nil, fmt.Errorf("nvdisasm listing: no gpuprof entry header")
	}
	return tool, fn, listing, nil
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

// listingFiles are the nvdisasm outputs of SASS.Files, parsed when first
// needed.
type listingFiles struct {
	mu     sync.Mutex
	hashed map[profile.ModuleHash]*parsedFile
	named  []*parsedFile
}

type parsedFile struct {
	paths []string // several: the pieces of one module's listing
	once  sync.Once
	text  []byte
	mod   *sass.Module
	err   error
}

func (pf *parsedFile) get() *sass.Module {
	pf.once.Do(func() {
		var texts [][]byte
		for _, p := range pf.paths {
			b, err := readListingFile(p)
			if err != nil {
				pf.err = err
				return
			}
			texts = append(texts, b)
		}
		pf.text = texts[0]
		if len(texts) > 1 {
			pf.text = sass.JoinListings(texts...)
		}
		pf.mod, pf.err = sass.Parse(pf.text)
	})
	return pf.mod
}

// readListingFile reads a listing, decompressing *.zst files.
func readListingFile(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasSuffix(p, ".zst") {
		return b, err
	}
	return DecodeListing(b)
}

// ListingHash reads the module hash from a listing file named
// HASH.sass.txt, HASH.hex.txt or HASH.sass.zst (16 hex digits).
func ListingHash(path string) (profile.ModuleHash, bool) {
	base := filepath.Base(path)
	for _, suf := range []string{".sass.txt", ".hex.txt", ".sass.zst"} {
		if h, ok := strings.CutSuffix(base, suf); ok && len(h) == 16 {
			var v uint64
			if _, err := fmt.Sscanf(h, "%016x", &v); err == nil && fmt.Sprintf("%016x", v) == h {
				return profile.ModuleHash(v), true
			}
		}
	}
	return 0, false
}

func (s *SASS) listings() *listingFiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files != nil {
		return s.files
	}
	lf := &listingFiles{hashed: map[profile.ModuleHash]*parsedFile{}}
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
			if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".sass.txt") || strings.HasSuffix(p, ".sass.zst") || strings.HasSuffix(p, ".hex.txt")) {
				paths = append(paths, p)
			}
			return nil
		})
	}
	sort.Strings(paths)
	for _, p := range paths {
		if h, ok := ListingHash(p); ok {
			pf := lf.hashed[h]
			if pf == nil {
				pf = &parsedFile{}
				lf.hashed[h] = pf
			}
			pf.paths = append(pf.paths, p)
			continue
		}
		lf.named = append(lf.named, &parsedFile{paths: []string{p}})
	}
	s.files = lf
	return lf
}

func (lf *listingFiles) byHash(h profile.ModuleHash) *parsedFile {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.hashed[h]
}

// byName returns a legacy listing that holds fn: preferably one that holds
// every function of the module known so far, then one with encodings
// (*.hex.txt: the stall blamer needs the control bits), then one for the
// module's architecture.
func (lf *listingFiles) byName(fn string, functions []string, sm uint16) *parsedFile {
	arch := fmt.Sprintf("sm_%d", sm)
	var best *parsedFile
	bestScore := -1
	for _, pf := range lf.named {
		m := pf.get()
		if m == nil || m.Func(fn) == nil {
			continue
		}
		score := 0
		if coversAll(m, functions) {
			score += 4
		}
		if strings.HasSuffix(pf.paths[0], ".hex.txt") {
			score += 2
		}
		if m.Arch == arch {
			score++
		}
		if score > bestScore {
			best, bestScore = pf, score
		}
	}
	return best
}

func coversAll(m *sass.Module, functions []string) bool {
	for _, f := range functions {
		if m.Func(f) == nil {
			return false
		}
	}
	return true
}

// modWork is the nvdisasm work on one module: the functions waiting, the
// cubin's symbols and its file for nvdisasm.
type modWork struct {
	hash    profile.ModuleHash
	cubin   []byte
	queue   []*fnJob
	running bool

	symOnce sync.Once
	syms    map[string]int // function name -> ELF symbol index
	symErr  error
	path    string            // the cubin written for nvdisasm ("" not yet)
	whole   map[string][]byte // after a failed selection: every function's listing, compressed
}

type fnJob struct {
	fn   string
	done chan struct{}
	text []byte
	why  string
}

func (s *SASS) parallel() int {
	if s.Parallel > 0 {
		return s.Parallel
	}
	return max(1, min(4, runtime.NumCPU()/2))
}

// disassemble returns the listing of function fn (and the functions it
// calls), made by nvdisasm with the functions of the module that wait
// with it; why says why there is none.
func (s *SASS) disassemble(mod ModuleRef, fn, tool string) ([]byte, string) {
	j := &fnJob{fn: fn, done: make(chan struct{})}
	s.mu.Lock()
	if s.mods == nil {
		s.mods = map[profile.ModuleHash]*modWork{}
		s.sem = make(chan struct{}, s.parallel())
	}
	mw := s.mods[mod.Hash]
	if mw == nil {
		mw = &modWork{hash: mod.Hash, cubin: mod.Cubin}
		s.mods[mod.Hash] = mw
	}
	mw.queue = append(mw.queue, j)
	if !mw.running {
		mw.running = true
		go s.drain(mw, tool)
	}
	s.mu.Unlock()
	<-j.done
	return j.text, j.why
}

// drain runs the module's waiting functions in batches, one nvdisasm run
// each, within the bound on runs at once.
func (s *SASS) drain(mw *modWork, tool string) {
	for {
		s.sem <- struct{}{}
		// Functions first launched together (a framework's step launches
		// a few dozen kernels at once) go in one run.
		time.Sleep(gatherDelay)
		s.mu.Lock()
		jobs := mw.queue
		mw.queue = nil
		if len(jobs) == 0 {
			mw.running = false
			s.mu.Unlock()
			<-s.sem
			return
		}
		s.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					for _, j := range jobs {
						if j.text == nil && j.why == "" {
							j.why = fmt.Sprintf("%s: %v", WhyNVDisasm, r)
						}
					}
				}
				<-s.sem
				for _, j := range jobs {
					close(j.done)
				}
			}()
			s.batch(mw, jobs, tool)
		}()
	}
}

// gatherDelay is how long a module's next nvdisasm run waits for more
// functions to join it: small beside a run, which reads the whole cubin.
const gatherDelay = 20 * time.Millisecond

// maxCalleeRounds bounds the runs that add the sections of called
// functions a selection lacked.
const maxCalleeRounds = 3

// batch disassembles the functions of jobs in one nvdisasm run (more if
// they call functions of other sections) and cuts each one's listing.
func (s *SASS) batch(mw *modWork, jobs []*fnJob, tool string) {
	mw.symOnce.Do(func() {
		c, err := sass.ParseCubin(mw.cubin)
		if err != nil {
			mw.symErr = err
			return
		}
		mw.syms = make(map[string]int, len(c.Functions))
		for _, f := range c.Functions {
			if _, dup := mw.syms[f.Name]; !dup {
				mw.syms[f.Name] = f.Symbol
			}
		}
	})
	if mw.symErr != nil {
		for _, j := range jobs {
			j.why = fmt.Sprintf("%s: module %v: %v", WhyNVDisasm, mw.hash, mw.symErr)
		}
		return
	}
	var want []*fnJob
	for _, j := range jobs {
		if enc, ok := mw.whole[j.fn]; ok {
			j.text, _ = DecodeListing(enc)
			continue
		}
		if _, ok := mw.syms[j.fn]; !ok {
			j.why = fmt.Sprintf("%s: %s is not a function symbol of module %v", WhyNotInModule, j.fn, mw.hash)
			continue
		}
		want = append(want, j)
	}
	if len(want) == 0 {
		return
	}
	path, err := s.cubinFile(mw)
	if err != nil {
		for _, j := range want {
			j.why = WhyNVDisasm + ": " + err.Error()
		}
		return
	}
	asked := map[int]bool{}
	var idx []int
	add := func(name string) bool {
		i, ok := mw.syms[name]
		if !ok || asked[i] {
			return false
		}
		asked[i] = true
		idx = append(idx, i)
		return true
	}
	for _, j := range want {
		add(j.fn)
	}
	var text []byte
	var m *sass.Module
	for round := 0; ; round++ {
		sort.Ints(idx)
		list := make([]string, len(idx))
		for i, v := range idx {
			list[i] = fmt.Sprint(v)
		}
		s.count(func(st *ShareStats) { st.Disassembled++ })
		text, err = runNVDisasmFile(tool, path, s.timeout(), "-fun", strings.Join(list, ","))
		if err == nil {
			m, err = sass.Parse(text)
		}
		if err != nil || round == maxCalleeRounds {
			break
		}
		more := false
		for _, j := range want {
			if m.Func(j.fn) == nil {
				continue
			}
			_, missing := sass.FunctionSections(m, j.fn)
			for _, c := range missing {
				more = add(c) || more
			}
		}
		if !more {
			break
		}
	}
	var absent []string
	if err == nil {
		for _, j := range want {
			if m.Func(j.fn) == nil {
				absent = append(absent, j.fn)
			}
		}
	}
	if err != nil || len(absent) > 0 {
		// The selection failed (an nvdisasm without -fun, or one that
		// counts symbols otherwise): the whole module, once, each of its
		// functions' listings kept for later requests.
		why := fmt.Sprintf("the selection of %d functions lacked %d (such as %s)", len(idx), len(absent), firstOf(absent))
		if err != nil {
			why = firstLine(err.Error())
		}
		s.logf("module %v: nvdisasm %s; disassembling the whole module (%d bytes)", mw.hash, why, len(mw.cubin))
		s.count(func(st *ShareStats) { st.Disassembled++; st.Whole++ })
		text, err = runNVDisasmFile(tool, path, s.timeout())
		if err == nil {
			m, err = sass.Parse(text)
		}
		if err != nil {
			for _, j := range want {
				j.why = WhyNVDisasm + ": " + firstLine(err.Error())
			}
			return
		}
		mw.whole = map[string][]byte{}
		for _, f := range m.Functions {
			if piece, ok := sass.FunctionListing(text, m, f.Name); ok {
				mw.whole[f.Name] = EncodeListing(piece)
			}
		}
	}
	for _, j := range want {
		piece, ok := sass.FunctionListing(text, m, j.fn)
		if !ok {
			j.why = fmt.Sprintf("%s: nvdisasm's listing of module %v lacks %s", WhyNotInModule, mw.hash, j.fn)
			continue
		}
		j.text = piece
		s.count(func(st *ShareStats) { st.Functions++ })
	}
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// cubinFile writes the module's cubin for nvdisasm, once per module (the
// module's batches run one at a time).
func (s *SASS) cubinFile(mw *modWork) (string, error) {
	s.mu.Lock()
	if mw.path != "" {
		defer s.mu.Unlock()
		return mw.path, nil
	}
	if s.tmp == "" {
		dir, err := os.MkdirTemp("", "gpuprof-cubins-")
		if err != nil {
			s.mu.Unlock()
			return "", err
		}
		s.tmp = dir
	}
	p := filepath.Join(s.tmp, mw.hash.String()+".cubin")
	s.mu.Unlock()
	if err := os.WriteFile(p, mw.cubin, 0o600); err != nil {
		return "", err
	}
	s.mu.Lock()
	mw.path = p
	s.mu.Unlock()
	return p, nil
}
