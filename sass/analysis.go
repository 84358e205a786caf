package sass

// CFG returns the function's control-flow graph with dominators and loops.
// It is computed once and shared; callers must not modify it.
func (f *Function) CFG() *CFG {
	f.cfgOnce.Do(func() { f.cfg = buildCFG(f, f.Labels) })
	return f.cfg
}

// DefUse returns the function's def-use information (computed once).
func (f *Function) DefUse() *DefUse {
	f.analyzeData()
	return f.du
}

// AccessKinds returns the access kind of every instruction of f, indexed
// like f.Insts; instructions without a register-data memory access have
// the zero AccessKind (Bits() == 0).
func (f *Function) AccessKinds() []AccessKind {
	f.analyzeData()
	return f.kinds
}

func (f *Function) analyzeData() {
	f.duOnce.Do(func() {
		var summ map[*Function]*regSummary
		if f.mod != nil {
			summ = f.mod.summaries()
		}
		f.du = buildDefUse(f, f.CFG(), summ)
		f.kinds = inferKinds(f, f.du)
	})
}

// AccessKind returns the access kind of the memory instruction at offset
// off of function name (offsets counted as in FuncAt).
func (m *Module) AccessKind(name string, off uint64) (AccessKind, bool) {
	f, so := m.FuncAt(name, off)
	if f == nil {
		return AccessKind{}, false
	}
	i := f.InstAt(so)
	if i < 0 {
		return AccessKind{}, false
	}
	k := f.AccessKinds()[i]
	return k, k.Vec > 0
}

// ClassString names the instruction's class in redshow's style:
// MEMORY.LOAD.GLOBAL.32, FLOAT.FADD, INTEGER.IMAD, CONVERT.F2I, ...
func (in *Instruction) ClassString() string {
	if in.Class == ClassMemory {
		return "MEMORY." + in.Mem.Op.String() + "." + in.Mem.Space.String() + "." + itoa(in.Mem.Bits)
	}
	return in.Class.String() + "." + in.Op
}
