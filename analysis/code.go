package analysis

import (
	"fmt"
	"strings"
	"sync"

	"gpuprof/analysis/blame"
	"gpuprof/profile"
	"gpuprof/sass"
)

// ModuleSource gives the parsed SASS of GPU modules by content hash.
type ModuleSource interface {
	Module(h profile.ModuleHash) (*sass.Module, error)
}

// Modules is a ModuleSource over modules already parsed.
type Modules map[profile.ModuleHash]*sass.Module

// Module returns the module of hash h, or nil when it is not known.
func (m Modules) Module(h profile.ModuleHash) (*sass.Module, error) { return m[h], nil }

// code is one GPU function's SASS prepared for the advisor: the blamer's
// model and per-instruction facts.
type code struct {
	M     *sass.Module
	F     *sass.Function
	Model *blame.Func
	// Loop[i] is the innermost loop of instruction i (index into
	// F.CFG().Loops), -1 outside loops.
	Loop []int

	loopOnce sync.Once
	loopPos  map[int]sass.Pos

	libmOnce sync.Once
	libm     []bool // libmConversions

	divOnce sync.Once
	div     *divisions // divisionSequences

	barOnce   sync.Once
	interval  []int // barrierIntervals
	nInterval int

	shOnce  sync.Once
	shShare []float64 // sharedRemovable

	laneOnce sync.Once
	lane     []bool // laneVarying
}

// divisions returns the function's IEEE float divisions (divide.go).
func (c *code) divisions() *divisions {
	c.divOnce.Do(func() { c.div = divisionSequences(c.F) })
	return c.div
}

// division says whether instruction i is part of an IEEE float
// division that fast math removes.
func (c *code) division(i int) bool {
	d := c.divisions()
	return i < len(d.of) && d.removed(i)
}

// libmConversion says whether instruction i is a conversion of the math
// library's trigonometric range reduction (libmConversions).
func (c *code) libmConversion(i int) bool {
	c.libmOnce.Do(func() { c.libm = libmConversions(c.F) })
	return i < len(c.libm) && c.libm[i]
}

var codeCache sync.Map // *sass.Function -> *code

// codeOf returns the prepared code of f (built once per function).
func codeOf(m *sass.Module, f *sass.Function) *code {
	if c, ok := codeCache.Load(f); ok {
		return c.(*code)
	}
	c := buildCode(m, f)
	actual, _ := codeCache.LoadOrStore(f, c)
	return actual.(*code)
}

// Fixed latencies in cycles for the latency rule: ptxas schedules
// fixed-latency consumers by the producer's latency, which on Volta to
// Hopper is 4-6 cycles for the ALU/FMA pipes and longer for FP64 and MMA.
func fixedLatency(in *sass.Instruction) int {
	switch {
	case strings.HasPrefix(in.Op, "D"):
		return 8
	case strings.HasSuffix(in.Op, "MMA"):
		return 32
	}
	return 6
}

// kindOf maps an instruction to the blamer's kinds. Control bits decide
// variable latency where known: ptxas gives a scoreboard exactly to
// variable-latency producers.
func kindOf(in *sass.Instruction) (blame.Kind, int) {
	ctl, hasCtl := in.Control()
	varLat := hasCtl && ctl.WriteBarrier >= 0
	switch in.Class {
	case sass.ClassMemory:
		switch in.Mem.Space {
		case sass.SpaceGlobal:
			return blame.KGlobalMem, 0
		case sass.SpaceLocal:
			return blame.KLocalMem, 0
		case sass.SpaceGeneric:
			return blame.KGenericMem, 0
		case sass.SpaceTexture, sass.SpaceSurface:
			return blame.KTextureMem, 0
		case sass.SpaceShared:
			return blame.KSharedMem, 0
		case sass.SpaceConstant:
			if !hasCtl || varLat {
				return blame.KConstMem, 0
			}
			return blame.KArithFixed, fixedLatency(in) // ULDC through the uniform datapath
		}
		return blame.KGenericMem, 0
	case sass.ClassSync:
		return blame.KSync, 0
	case sass.ClassControl:
		return blame.KControl, 0
	case sass.ClassConvert:
		if hasCtl && !varLat {
			return blame.KArithFixed, fixedLatency(in)
		}
		return blame.KArithVar, 0
	case sass.ClassFloat, sass.ClassInteger, sass.ClassMove, sass.ClassPredicate:
		special := in.Op == "S2R" || in.Op == "SHFL" || in.Op == "S2UR" || in.Op == "VOTE" || in.Op == "MATCH" || in.Op == "REDUX"
		switch {
		case hasCtl && varLat && special:
			return blame.KSpecial, 0
		case hasCtl && varLat:
			return blame.KArithVar, 0
		case !hasCtl && special:
			return blame.KSpecial, 0
		case !hasCtl && (in.Op == "MUFU" || strings.HasPrefix(in.Op, "D")):
			return blame.KArithVar, 0
		}
		return blame.KArithFixed, fixedLatency(in)
	}
	return blame.KOther, 0
}

func buildCode(m *sass.Module, f *sass.Function) *code {
	g := f.CFG()
	du := f.DefUse()
	c := &code{M: m, F: f, Loop: make([]int, len(f.Insts))}
	mf := &blame.Func{Name: f.Name, Insts: make([]blame.Inst, len(f.Insts)), Users: make([]map[uint32][]int, len(f.Insts))}
	for i := range f.Insts {
		in := &f.Insts[i]
		k, lat := kindOf(in)
		bi := blame.Inst{Offset: uint32(in.Offset), Op: in.Opcode, Kind: k, Guarded: in.Guarded(), Latency: lat}
		if ctl, ok := in.Control(); ok {
			bi.Cycles = int(ctl.Stall)
		}
		if in.Class == sass.ClassMemory {
			for _, o := range in.Operands {
				if o.Kind == sass.OperandMem && o.Base.Tracked() {
					bi.Indirect = true
				}
			}
		}
		for u, r := range du.Uses[i] {
			d := blame.Dep{Reg: uint32(r), SB: r.Kind() == sass.KindSB}
			for _, p := range du.UD[i][u] {
				d.Defs = append(d.Defs, int(p))
				if d.SB && p >= 0 {
					if ctl, ok := f.Insts[p].Control(); ok && int(ctl.ReadBarrier) == r.Index() && int(ctl.WriteBarrier) != r.Index() {
						d.WAR = true
					}
				}
			}
			bi.Deps = append(bi.Deps, d)
		}
		for dIdx, r := range du.Defs[i] {
			if len(du.DU[i][dIdx]) == 0 {
				continue
			}
			if mf.Users[i] == nil {
				mf.Users[i] = map[uint32][]int{}
			}
			for _, u := range du.DU[i][dIdx] {
				mf.Users[i][uint32(r)] = append(mf.Users[i][uint32(r)], int(u))
			}
		}
		mf.Insts[i] = bi
		c.Loop[i] = -1
	}
	for b, bl := range g.Blocks {
		mf.Blocks = append(mf.Blocks, blame.Block{Start: bl.Start, End: bl.End, Succs: append([]int(nil), bl.Succs...)})
		if bl.Loop >= 0 {
			for i := bl.Start; i < bl.End; i++ {
				c.Loop[i] = bl.Loop
			}
		}
		_ = b
	}
	c.Model = mf
	return c
}

// lineOf returns the source position of instruction i ("" if unknown).
func (c *code) lineOf(i int) (string, uint32) {
	l := c.M.Location(c.F.Insts[i].Loc)
	if l.File < 0 {
		return "", 0
	}
	pos := l.Pos
	// Code inlined from the toolkit's headers is shown at the innermost
	// call site in user code.
	for k := len(l.Calls) - 1; k >= 0 && SystemFile(c.M.File(pos.File)); k-- {
		pos = l.Calls[k]
	}
	return c.M.File(pos.File), uint32(pos.Line)
}

// loopLine names loop li as the structure tree (and so the profile's loop
// nodes) does.
func (c *code) loopLine(li int) string {
	if li < 0 {
		return ""
	}
	c.loopOnce.Do(func() {
		c.loopPos = map[int]sass.Pos{}
		var walk func(sc *sass.Scope)
		walk = func(sc *sass.Scope) {
			if sc.Kind == sass.ScopeLoop && sc.Func == c.F {
				c.loopPos[sc.Loop] = sc.Pos
			}
			for _, ch := range sc.Children {
				walk(ch)
			}
		}
		for _, fs := range c.M.Structure().Funcs {
			if fs.Func == c.F {
				walk(fs)
			}
		}
	})
	pos, ok := c.loopPos[li]
	if !ok {
		pos = c.M.Location(c.F.CFG().Loops[li].Loc).Pos
	}
	if pos.File < 0 {
		g := c.F.CFG()
		return fmt.Sprintf("+%#x (%s)", c.F.Insts[g.Blocks[g.Loops[li].Header].Start].Offset, NoLine)
	}
	return c.M.PosString(pos)
}

// inlinedFiles lists the files of the inlined frames of instruction i
// (innermost last), for recognising math-library code.
func (c *code) inlinedFiles(i int) []string {
	l := c.M.Location(c.F.Insts[i].Loc)
	var out []string
	for _, fr := range l.Frames() {
		out = append(out, c.M.File(fr.Callee))
	}
	return out
}

// instIndex finds the instruction of function name at offset off (the
// offset the profile's PC carries, a section offset as nvdisasm prints it,
// for a subroutine possibly counted from its kernel).
func instIndex(m *sass.Module, name string, off uint64) (*sass.Function, int) {
	return instIndexIn(m, "", name, off)
}

// instIndexIn is instIndex preferring the function of that name in
// section sec (the calling kernel's): the copy of a subroutine that the
// compiler placed in that kernel's section.
func instIndexIn(m *sass.Module, sec, name string, off uint64) (*sass.Function, int) {
	at := func(f *sass.Function) int {
		if i := f.InstAt(off); i >= 0 {
			return i
		}
		return f.InstAt(f.Start + off)
	}
	if sec != "" {
		if f := m.FuncIn(sec, name); f != nil {
			if i := at(f); i >= 0 {
				return f, i
			}
		}
	}
	if f := m.Func(name); f != nil {
		if i := at(f); i >= 0 {
			return f, i
		}
	}
	if f, so := m.FuncAt(name, off); f != nil {
		if i := f.InstAt(so); i >= 0 {
			return f, i
		}
	}
	return nil, -1
}

// libraryCode is mathCode on a function's code alone: the library's
// subroutines, code inlined from its headers, the conversions of
// libdevice's trigonometric range reduction, which has no line
// information of its own (libm.go), and the IEEE float division's
// inlined sequence, which fast math replaces (divide.go).
func libraryCode(c *code, i int) bool {
	if internalRoutine(c.F.Name) {
		return true
	}
	if c.libmConversion(i) || c.division(i) {
		return true
	}
	for _, f := range c.inlinedFiles(i) {
		if strings.Contains(f, "math_functions") || strings.Contains(f, "/crt/") || strings.Contains(f, "device_functions") || strings.Contains(f, "sm_20_intrinsics") {
			return true
		}
	}
	return false
}

// inLoop reports whether instruction i lies in loop li (nested included).
func (c *code) inLoop(i, li int) bool {
	g := c.F.CFG()
	for l := c.Loop[i]; l >= 0; l = g.Loops[l].Parent {
		if l == li {
			return true
		}
	}
	return false
}

// invariantAddress reports whether memory instruction i's address is the
// same in every iteration of loop li (its address registers are defined
// outside the loop) and returns a key naming the address.
func (c *code) invariantAddress(i, li int) (string, bool) {
	f := c.F
	du := f.DefUse()
	in := &f.Insts[i]
	var key strings.Builder
	for _, o := range in.Operands {
		if o.Kind != sass.OperandMem {
			continue
		}
		regs := []sass.Reg{o.Base, o.UBase}
		if o.Pair && o.Base.Tracked() {
			regs = append(regs, o.Base+1)
		}
		fmt.Fprintf(&key, "%d+%d", o.UBase, o.Offset)
		for _, r := range regs {
			if !r.Tracked() {
				continue
			}
			defs := du.Reaching(i, r)
			fmt.Fprintf(&key, "|%d:%v", r, defs)
			for _, d := range defs {
				if d >= 0 && c.inLoop(int(d), li) {
					return "", false
				}
			}
		}
		return key.String(), true
	}
	return "", false
}
