package online

import "gpuprof/profile"

// Kernels reported before their module.
//
// With lazy module loading the library reports a kernel (FUNCTION with
// module id 0) at its first launch, before its module: the LAUNCH follows
// at once, then MODULE and the module's FUNCTIONs. A context's identity is
// the launch site the user sees, host path and kernel (module content hash
// and name), so the first launch cannot have its identity when it is made.
// It gets a *provisional* context under the unknown module (hash 0). When
// the first function of that name in a loaded module comes, the orphan is
// that function, and the provisional context becomes an alias of the
// context the later launches from the same site get. What was accumulated
// under the provisional context, its pseudo objects or the orphan's PCs is
// keyed again when an item is built (canon*), so the item holds one kernel
// node with every launch. An item waits while a provisional context holds
// data (Holding), within the collector's bound; docs/collector.md.

// orphans is the analyzer's state for kernels reported before their module.
type orphans struct {
	waiting map[string][]*funcInfo // orphans whose module has not come, by name
	prov    map[string][]uint32    // their provisional contexts, by kernel name
	ctx     map[uint32]uint32      // provisional context -> the loaded kernel's
	obj     map[uint32]uint32      // its pseudo objects -> the loaded kernel context's
	held    map[uint32]bool        // provisional contexts with data since the last item
	// published: provisional contexts an item published while they were
	// held (the bound was reached): they hold no item again.
	published map[uint32]bool
	// structures: the functions resolved orphans turned out to be, whose
	// structure is requested before the next item (their own launches,
	// which would, may not come).
	structures []*funcInfo
	// rekeyed: some orphan has a real function, so items are built with
	// canonical ids (streams without orphans skip the lookups).
	rekeyed bool
}

func newOrphans() orphans {
	return orphans{waiting: map[string][]*funcInfo{}, prov: map[string][]uint32{},
		ctx: map[uint32]uint32{}, obj: map[uint32]uint32{}, held: map[uint32]bool{}, published: map[uint32]bool{}}
}

// unknownModule stands for the module of functions the library reported
// before (or without) their module. Its hash is 0 on every rank.
func (a *Analyzer) unknownModule() *modInfo {
	if a.unknownMod == nil {
		a.unknownMod = &modInfo{id: ^uint64(0)}
	}
	return a.unknownMod
}

// orphan records a function reported without its module. A function of
// that name already loaded is taken for it (a module loaded again, as in
// a second CUDA context, has the same content); otherwise it waits for
// the first one to come.
func (a *Analyzer) orphan(f *funcInfo) {
	if known := a.byName[f.name]; known != nil {
		f.real = known
		a.orph.rekeyed = true
		return
	}
	a.orph.waiting[f.name] = append(a.orph.waiting[f.name], f)
}

// resolveOrphans: f, a function of a loaded module, is every orphan of its
// name still waiting; their provisional contexts become aliases.
func (a *Analyzer) resolveOrphans(f *funcInfo) {
	os := a.orph.waiting[f.name]
	if len(os) == 0 {
		return
	}
	delete(a.orph.waiting, f.name)
	for _, o := range os {
		o.real = f
	}
	a.orph.rekeyed = true
	for _, ci := range a.orph.prov[f.name] {
		a.rekey(ci, f)
	}
	delete(a.orph.prov, f.name)
	// Their launches count toward f's contexts in splits of samples that
	// carry no launch.
	for _, o := range os {
		if o.split == nil {
			continue
		}
		if f.split == nil {
			f.split = newSampleSplit()
		}
		f.split.merge(o.split, a.orph.ctx)
		o.split = nil
	}
	a.orph.structures = append(a.orph.structures, f)
}

// rekey makes provisional context ci an alias of the context of the same
// host path with kernel f. Its path and pseudo objects are forgotten, so
// that an orphan reported later from the same site starts a new one.
func (a *Analyzer) rekey(ci uint32, f *funcInfo) {
	c := a.ctxs[ci]
	delete(a.ctxByID, pathID(c.frames))
	delete(a.objIdx, a.objs[c.shared].id)
	delete(a.objIdx, a.objs[c.local].id)
	t := a.context(kernelPath(c.frames[:len(c.frames)-1], f), f)
	a.orph.ctx[ci] = t
	a.orph.obj[c.shared] = a.ctxs[t].shared
	a.orph.obj[c.local] = a.ctxs[t].local
	if !f.hasCtx {
		f.ctx, f.hasCtx = t, true
	}
	// Its launches since the last item were counted without the cubin's
	// attributes, which the unknown module does not have.
	if k := a.kern[ci]; k != nil {
		a.x.ls.addAttrs(ci, f, k.launches)
	}
	delete(a.orph.held, ci)
}

// touch notes that context ci got data: a provisional one holds the item,
// unless an item already went out without waiting for it.
func (a *Analyzer) touch(ci uint32) {
	if f := a.ctxs[ci].fn; f.orphan && f.real == nil && !a.orph.published[ci] {
		a.orph.held[ci] = true
	}
}

// itemBuilt: an item went out; contexts it held for are given up on (a
// module that did not come within the bound is not waited for again).
func (a *Analyzer) itemBuilt() {
	for ci := range a.orph.held {
		a.orph.published[ci] = true
	}
	clear(a.orph.held)
}

// Holding reports whether a launch of a kernel reported before its module
// has data not yet published and the module has not come: an item built
// now would publish it under the unknown module, split from the kernel's
// other launches. The collector then puts a periodic item off, within a
// bound (docs/collector.md); Flush always publishes everything.
func (a *Analyzer) Holding() bool { return len(a.orph.held) > 0 }

// alias is what m makes of k, once some orphan was resolved.
func (o *orphans) alias(m map[uint32]uint32, k uint32) uint32 {
	if o.rekeyed {
		if t, ok := m[k]; ok {
			return t
		}
	}
	return k
}

// canonCtx is the context an item shows for ci.
func (a *Analyzer) canonCtx(ci uint32) uint32 { return a.orph.alias(a.orph.ctx, ci) }

// canonPC is the packed PC an item shows: an orphan's PCs are its real
// function's (offsets are function-relative).
func (a *Analyzer) canonPC(packed uint64) uint64 {
	if a.orph.rekeyed {
		if r := a.funcs[packed>>32].real; r != nil {
			return uint64(r.idx)<<32 | packed&(1<<32-1)
		}
	}
	return packed
}

// canonObj is the data object an item shows for oi.
func (a *Analyzer) canonObj(oi uint32) uint32 { return a.orph.alias(a.orph.obj, oi) }

func (a *Analyzer) canonPCKey(k pcKey) pcKey {
	return pcKey{a.canonCtx(k.ctx), k.kind, a.canonPC(k.pc)}
}

func (a *Analyzer) canonOPKey(k objPCKey) objPCKey {
	obj := k.obj
	if obj != noObj {
		obj = a.canonObj(obj)
	}
	return objPCKey{a.canonCtx(k.ctx), k.kind, obj, a.canonPC(k.pc)}
}

// orphanKind is the access kind of a first launch's records, read at
// their width before the module came, as the module's structure gives it
// where it splits them into the same units: the counters hold the units'
// bits, and the kind only says how to read them.
func (a *Analyzer) orphanKind(packed uint64, ak AccessKind) AccessKind {
	if !a.orph.rekeyed || ak.Type != profile.ValUnknown {
		return ak
	}
	f := a.funcs[packed>>32]
	st, _ := a.decide(f, false)
	if st == nil {
		return ak
	}
	if sk, ok := st.AccessKind(f.name, packed&(1<<32-1)); ok && sk.UnitBits == ak.UnitBits && sk.Vec == ak.Vec {
		return sk
	}
	return ak
}

// beforeBuild requests the structure of the functions resolved orphans
// turned out to be, so that their PCs are placed as the function's own
// launches' are.
func (a *Analyzer) beforeBuild() {
	for _, f := range a.orph.structures {
		a.requestStructure(f)
	}
	a.orph.structures = a.orph.structures[:0]
}
