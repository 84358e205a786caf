package online

import (
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"gpuprof/profile"
)

// Structure arrives while the analysis runs (docs/collector.md,
// "Structure"). A function's structure is requested when it is first
// launched or sampled and made elsewhere (nvdisasm, the disk cache, other
// ranks); the analysis waits for it only where it must, and never longer
// than Options.StructureWait in all:
//   - access records are read by the access kinds of their instructions,
//     so the first records of a launch wait for their function's structure
//     (from a budget of StructureWait for the whole stream; once it is
//     spent, records whose structure is not there yet are read at their
//     width, the fallback every unknown instruction gets);
//   - PC samples and instruction counts of a function whose structure is
//     on its way stay in the analysis, item after item, until it comes:
//     they are placed once, where the structure puts them;
//   - after the stream's END (or Final) everything still waiting gets
//     until StructureWait from then; FlushReady publishes what needs no
//     waiting first.
// A function is placed one way for the whole stream: with its structure,
// or directly under its function (flat) once its structure failed or did
// not come in time. Flat placements are counted on their kernel node by a
// StructureMissing metric that names the reason, so the report lists the
// kernels left without structure and why.

// DefaultStructureWait is the default of Options.StructureWait.
const DefaultStructureWait = 30 * time.Second

// funcStructure is a function's structure as the analysis sees it.
type funcStructure struct {
	pend atomic.Pointer[Pending] // requested; workers read it for access kinds
	// Set once by the analysis goroutine: the placement is fixed.
	decided bool
	st      Structure
	flat    string // why st is nil ("" when there is no structure source)
}

// structState is the analysis' waiting for structure.
type structState struct {
	final    bool
	noWait   bool          // FlushReady
	deadline time.Time     // of the waits after Final
	blocked  time.Duration // waited before Final
	marked   map[[2]uint32]bool
}

func (a *Analyzer) structureWait() time.Duration {
	if a.o.StructureWait > 0 {
		return a.o.StructureWait
	}
	return DefaultStructureWait
}

// Final says that no frame comes any more: what waits for structure gets
// until StructureWait from now, then is placed flat.
func (a *Analyzer) Final() { a.FinalWithin(a.structureWait()) }

// FlushReady is Flush without waiting for structure: the instructions
// whose function's structure is still on its way stay for the next Flush.
// The collector publishes what is measured at once when the application
// ends, then, after Final, the rest.
func (a *Analyzer) FlushReady(seq uint32) (*profile.Profile, error) {
	a.ss.noWait = true
	defer func() { a.ss.noWait = false }()
	return a.Flush(seq)
}

// FinalWithin is Final with its own bound (0: no wait at all).
func (a *Analyzer) FinalWithin(d time.Duration) {
	dl := time.Now().Add(d)
	if !a.ss.final || dl.Before(a.ss.deadline) {
		a.ss.deadline = dl
	}
	a.ss.final = true
}

// requestStructure asks for fn's structure (once); nil without a source.
func (a *Analyzer) requestStructure(fn *funcInfo) *Pending {
	if a.o.Structures == nil {
		return nil
	}
	if p := fn.fs.pend.Load(); p != nil {
		return p
	}
	var p *Pending
	if fn.mod.id == ^uint64(0) {
		p = Resolved(nil, WhyUnknownModule+": launched or sampled before its module was loaded, and never found in one")
	} else {
		var sm uint16
		if a.hello != nil {
			sm = a.hello.SM
		}
		m := fn.mod
		p = a.o.Structures.Request(ModuleRef{Hash: m.hash, Cubin: m.cubin, SM: sm, Functions: m.funcs[:len(m.funcs):len(m.funcs)]}, fn.name)
	}
	fn.fs.pend.Store(p)
	return p
}

// awaitStructure waits, within what is left of the budget, for the
// structure of a function whose access records are about to be analysed.
func (a *Analyzer) awaitStructure(fn *funcInfo) {
	p := a.requestStructure(fn)
	if p == nil {
		return
	}
	if _, _, ok := p.Ready(); ok {
		return
	}
	left := a.waitLeft()
	if left <= 0 {
		return
	}
	t0 := time.Now()
	p.Wait(left)
	if !a.ss.final {
		a.ss.blocked += time.Since(t0)
	}
}

func (a *Analyzer) waitLeft() time.Duration {
	if a.ss.final {
		return time.Until(a.ss.deadline)
	}
	return a.structureWait() - a.ss.blocked
}

// decide fixes how fn's instructions are placed. With mayDefer, a
// structure still on its way leaves it undecided (ok false) until Final;
// otherwise decide waits within the bounds, then places flat.
func (a *Analyzer) decide(fn *funcInfo, mayDefer bool) (st Structure, ok bool) {
	fs := &fn.fs
	if fs.decided {
		return fs.st, true
	}
	p := a.requestStructure(fn)
	if p == nil {
		fs.decided = true
		return nil, true
	}
	st, why, ready := p.Ready()
	if !ready {
		if mayDefer && (!a.ss.final || a.ss.noWait) {
			return nil, false
		}
		left := a.waitLeft()
		t0 := time.Now()
		st, why, ready = p.Wait(left)
		if !a.ss.final {
			a.ss.blocked += time.Since(t0)
		}
		if !ready {
			why = fmt.Sprintf("%s: not ready within %v", WhyTimeout, a.structureWait())
		}
	}
	fs.decided, fs.st = true, st
	if st == nil {
		fs.flat = why
	}
	return st, true
}

// placeable says whether the instruction of a packed PC can be placed
// now (its function's structure is settled), deciding it if need be.
func (a *Analyzer) placeable(packed uint64) bool {
	_, ok := a.decide(a.funcs[packed>>32], true)
	return ok
}

// anyPlaceable says whether some sampled or counted instruction can be
// placed now.
func (a *Analyzer) anyPlaceable() bool {
	for k := range a.insts {
		if a.placeable(k.pc) {
			return true
		}
	}
	return false
}

// place returns the normalised PC and the frames below the kernel node of
// a packed (function index, offset) PC.
func (a *Analyzer) place(packed uint64) *Placement {
	if pl, ok := a.places[packed]; ok {
		return pl
	}
	fn := a.funcs[packed>>32]
	off := uint64(uint32(packed))
	var pl Placement
	ok := false
	if st, _ := a.decide(fn, false); st != nil {
		pl, ok = st.Place(fn.name, off)
	}
	if !ok {
		pl = Placement{Function: fn.name, Offset: uint32(off),
			Frames: []profile.Frame{{Kind: profile.KindGPUFunction, Module: fn.mod.hash.String(), Function: fn.name}}}
	}
	a.places[packed] = &pl
	return &pl
}

// markMissing counts, once per kernel context and function, that the
// function's instructions were placed without structure, under the
// reason's metric on the kernel node.
func (b *builder) markMissing(ctx uint32, packed uint64) {
	fn := b.a.funcs[packed>>32]
	if fn.fs.flat == "" {
		return
	}
	k := [2]uint32{ctx, fn.idx}
	if b.a.ss.marked[k] {
		return
	}
	if b.a.ss.marked == nil {
		b.a.ss.marked = map[[2]uint32]bool{}
	}
	b.a.ss.marked[k] = true
	b.p.Add(b.kernel(ctx), profile.Metric(StructureMissing+ReasonCode(fn.fs.flat)), 1)
}

// Missing lists the functions placed without structure so far, with why
// (for the collector's log).
func (a *Analyzer) Missing() []string {
	var out []string
	seen := map[string]bool{}
	for _, fn := range a.funcs {
		if fn.fs.flat != "" && !seen[fn.name] {
			seen[fn.name] = true
			out = append(out, fn.name+": "+fn.fs.flat)
		}
	}
	sort.Strings(out)
	return out
}
