package online

import (
	"path/filepath"
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

// structurePrefetcher is a StructureSource that can start on a module's
// kernels before they launch (SASS.Prefetch).
type structurePrefetcher interface {
	Prefetch(mod ModuleRef)
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

type sassStructure struct {
	hash string
	m    *sass.Module
	st   *sass.Structure
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
