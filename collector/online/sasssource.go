package online

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"gpuprof/profile"
	"gpuprof/sass"
)

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
	structs  map[structKey]*sassStructure
	parsed   map[*sass.Module]*sass.Structure
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

// Prefetch starts the work for every kernel of a module that can be
// disassembled here, before any is launched: Request's work for each, in
// one nvdisasm run. Launch by launch, each of a program's kernels waited
// for its own run behind the analysis, which stood still at the first
// records of the one before (short_launches on the H100: five runs one
// after another, 3.6 s after the application had ended, on a first run;
// docs/collector.md, "Structure prefetch"). The analysis prefetches only
// modules of at most Options.PrefetchBytes.
func (s *SASS) Prefetch(mod ModuleRef) {
	if len(mod.Cubin) == 0 {
		return
	}
	if _, _, err := s.tool(); err != nil {
		return // no nvdisasm: listings are looked up by the launched functions' names
	}
	go func() {
		c, err := sass.ParseCubin(mod.Cubin)
		if err != nil {
			return // Request says why, for the functions that launch
		}
		var kernels []string
		for _, f := range c.Functions {
			if f.Entry {
				kernels = append(kernels, f.Name)
			}
		}
		mod.Functions = kernels
		for _, k := range kernels {
			s.Request(mod, k)
		}
	}()
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

// structKey names an adapted structure: one listing can serve several
// modules (a file of several cubins' listings, chosen by function names),
// and each module's frames carry its own hash.
type structKey struct {
	h profile.ModuleHash
	m *sass.Module
}

// structureOf adapts a parsed module for module h, once per (module,
// listing); the listing's structure is computed once whatever the modules.
// Keyed by the listing alone, the first module to ask named the frames of
// every module the listing served, so which one depended on timing.
func (s *SASS) structureOf(h profile.ModuleHash, m *sass.Module) *sassStructure {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := structKey{h, m}
	if st := s.structs[k]; st != nil {
		return st
	}
	if s.structs == nil {
		s.structs = map[structKey]*sassStructure{}
		s.parsed = map[*sass.Module]*sass.Structure{}
	}
	ps := s.parsed[m]
	if ps == nil {
		ps = m.Structure()
		s.parsed[m] = ps
	}
	st := &sassStructure{hash: h.String(), m: m, st: ps}
	s.structs[k] = st
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
		s.toolID = fmt.Sprintf("nvdisasm-%016x", xxhash.Sum64String(string(out)+"\x00"+strings.Join(sass.NVDisasmArgs, " ")))
	})
	return s.toolPath, s.toolID, s.toolErr
}

func (s *SASS) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return 2 * time.Minute
}
