package online

import (
	"sort"
	"strconv"
	"time"

	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// Flush ends the current item: it waits for the workers to analyse every
// frame added so far, resolves spatial first occurrences, and returns what
// was accumulated since the previous flush as item (rank, seq), or nil if
// there is nothing new.
func (a *Analyzer) Flush(seq uint32) (*profile.Profile, error) {
	if a.failed != nil {
		return nil, a.failed
	}
	if err := a.barrier(); err != nil {
		a.failed = err
		return nil, err
	}
	accs := make([]*acc, numShards)
	data := false
	for i, s := range a.shards {
		accs[i] = s.acc
		if !s.acc.empty() {
			data = true
			s.acc = newAcc()
		}
	}
	allocs := false
	for _, o := range a.objs {
		allocs = allocs || o.allocs > 0
	}
	if !data && !allocs && len(a.kern) == 0 && !a.anyPlaceable() && a.d == (delta{}) {
		return nil, nil
	}
	var p *profile.Profile
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = panicError(r)
			}
		}()
		t0 := time.Now()
		defer func() { a.tBuild += time.Since(t0) }()
		a.beforeBuild()
		p = a.build(seq, accs)
		for i, s := range a.shards {
			if accs[i] != s.acc {
				s.acc.recycle(accs[i])
			}
		}
		return p.AsItem(a.o.Rank, seq)
	}()
	if err != nil {
		a.failed = err
		return nil, err
	}
	a.pending = 0
	a.itemBuilt()
	return p, nil
}

func (a *Analyzer) provenance(ri *profile.RankInfo) {
	if h := a.hello; h != nil {
		ri.Host, ri.GPU, ri.GPUUUID, ri.Driver, ri.CUDA = h.Host, h.GPU, h.GPUUUID, h.Driver, h.CUDA
		ri.Mode = h.Mode.String()
		ri.Source = "captured"
		if h.Flags&rawstream.HelloSynthetic != 0 {
			ri.Source = "synthetic"
		}
		ri.BlockP, ri.KernelK = h.BlockSampling, h.KernelSampling
		if h.Device >= 0 {
			ri.Device = strconv.Itoa(int(h.Device))
		}
		d := h.Props
		ri.Props = profile.GPUProps{SMs: d.SMs, ClockKHz: d.ClockKHz, MemClockKHz: d.MemClockKHz, MemBusBits: d.MemBusBits,
			L2Bytes: d.L2Bytes, RegsPerSM: d.RegsPerSM, SharedPerSM: d.SharedPerSM, ThreadsPerSM: d.ThreadsPerSM, MemBytes: d.MemBytes}
		if h.Mode == rawstream.ModePCSampling {
			ri.PCSampling = "sampled"
			if h.Flags&rawstream.HelloPCSElsewhere != 0 {
				ri.PCSampling = "kernel times only: another process PC-samples " + h.GPUUUID
			}
		}
		if h.Mode == rawstream.ModeRedundancy {
			ri.ReuseP = a.reusePeriod // the memory workers' histograms
			ri.SpatialLevel = uint32(a.maxLevel)
		}
	}
}

// Done returns the rank's done item: no data, the final provenance and the
// number of data items published before it (seq).
func (a *Analyzer) Done(seq uint32, exitCode int32, incomplete string) (*profile.Profile, error) {
	return DoneItem(a.o.Job, a.o.Rank, seq, a.hello, exitCode, incomplete)
}

// DoneItem builds a done item from a HELLO (nil if the stream had none).
func DoneItem(job string, rank int32, seq uint32, hello *rawstream.Hello, exitCode int32, incomplete string) (*profile.Profile, error) {
	p := profile.New(job)
	ri := p.Rank(rank)
	a := &Analyzer{hello: hello}
	a.provenance(ri)
	p.Synthetic = ri.Source == "synthetic"
	ri.Batches = int64(seq)
	ri.ExitCode = exitCode
	ri.Incomplete = incomplete
	if err := p.AsItem(rank, seq); err != nil {
		return nil, err
	}
	return p, nil
}

// builder assembles one item.
type builder struct {
	a     *Analyzer
	p     *profile.Profile
	kern  map[uint32]profile.NodeID
	insts map[pcKey]profile.NodeID
	pcOf  map[uint64]profile.PC
}

func (b *builder) kernel(ci uint32) profile.NodeID {
	ci = b.a.canonCtx(ci)
	if id, ok := b.kern[ci]; ok {
		return id
	}
	c := b.a.ctxs[ci]
	n := b.p.Path(c.frames...)
	m := c.fn.mod
	b.p.AddModule(profile.Module{Hash: m.hash, Size: m.size, Name: moduleName(m, c.fn.name), SM: b.sm()})
	b.p.AddFunc(m.hash, c.fn.name)
	b.kern[ci] = n.ID
	return n.ID
}

// moduleName is a readable name for a module: the first function seen in
// it (the stream does not name modules).
func moduleName(m *modInfo, fn string) string {
	if m.id == ^uint64(0) {
		return "<unknown module>"
	}
	return fn
}

func (b *builder) sm() uint16 {
	if b.a.hello != nil {
		return b.a.hello.SM
	}
	return 0
}

func (b *builder) pc(packed uint64) profile.PC {
	packed = b.a.canonPC(packed)
	if pc, ok := b.pcOf[packed]; ok {
		return pc
	}
	pl := b.a.place(packed)
	m := b.a.funcs[packed>>32].mod
	b.p.AddModule(profile.Module{Hash: m.hash, Size: m.size, Name: moduleName(m, b.a.funcs[packed>>32].name), SM: b.sm()})
	pc := profile.PC{Func: b.p.AddFunc(m.hash, pl.Function), Offset: pl.Offset}
	b.pcOf[packed] = pc
	return pc
}

func (b *builder) inst(ctx uint32, kind uint8, packed uint64) profile.NodeID {
	ctx, packed = b.a.canonCtx(ctx), b.a.canonPC(packed)
	k := pcKey{ctx, kind, packed}
	if id, ok := b.insts[k]; ok {
		return id
	}
	// Loads and stores of one instruction share its node.
	k2 := pcKey{ctx, kind ^ 1, packed}
	if id, ok := b.insts[k2]; ok {
		b.insts[k] = id
		return id
	}
	id := b.kernel(ctx)
	pl := b.a.place(packed)
	for _, f := range pl.Frames {
		id = b.p.Child(id, f).ID
	}
	id = b.p.Child(id, profile.Frame{Kind: profile.KindInstruction, Offset: uint64(pl.Offset)}).ID
	b.pc(packed)
	b.markMissing(ctx, packed)
	b.insts[k] = id
	return id
}

func access(kind uint8) profile.Access {
	if kind == kStore {
		return profile.Store
	}
	return profile.Load
}

func (b *builder) object(oi uint32) profile.ObjectID {
	o := b.a.objs[b.a.canonObj(oi)]
	if d, ok := b.p.Objects[o.id]; ok {
		return d.ID
	}
	ctx := b.p.Path(o.frames...).ID
	b.p.Objects[o.id] = &profile.DataObject{ID: o.id, Context: ctx, Size: o.size, Count: o.allocs, Space: o.space}
	if o.allocs > 0 {
		b.p.Add(ctx, profile.AllocCount, o.allocs)
		b.p.Add(ctx, profile.AllocBytes, o.bytes)
		o.allocs, o.bytes = 0, 0
	}
	return o.id
}

func (a *Analyzer) build(seq uint32, accs []*acc) *profile.Profile {
	p := profile.New(a.o.Job)
	b := &builder{a: a, p: p, kern: map[uint32]profile.NodeID{}, insts: map[pcKey]profile.NodeID{}, pcOf: map[uint64]profile.PC{}}
	ri := p.Rank(a.o.Rank)
	a.provenance(ri)
	p.Synthetic = ri.Source == "synthetic"
	ri.Launches, ri.LaunchesTraced = a.d.launches, a.d.traced
	ri.Blocks, ri.BlocksTraced = a.d.blocks, a.d.blocksTraced
	ri.Records, ri.Dropped, ri.HostDropped = a.d.records, a.d.dropped, a.d.hostDropped
	ri.SamplesDropped = a.d.samplesDropped
	a.d = delta{}

	b.kernelMetrics()
	sums := a.sumAccesses(accs)
	b.accessStats(sums)

	// Temporal pairs <PC_old, PC_new>.
	for _, ac := range accs {
		for k, n := range ac.pairs {
			tk := profile.TemporalKey{Context: b.kernel(k.ctx), Old: b.pc(k.old), New: b.pc(k.nw), Access: access(k.kind)}
			p.Temporal[tk] += *n
		}
	}

	b.spatialPairs(sums)

	// Allocations made since the last item.
	for i, o := range a.objs {
		if o.allocs > 0 {
			b.object(uint32(i))
		}
	}

	b.instStats()
	a.x.build(b, accs)
	return p
}

// kernelMetrics adds the kernel-level metrics since the last item, in
// context order.
func (b *builder) kernelMetrics() {
	a, p := b.a, b.p
	for _, ci := range sortedKeys(a.kern) {
		k := a.kern[ci]
		id := b.kernel(ci)
		p.Add(id, profile.GPUTime, k.time)
		p.Add(id, profile.GPULaunches, k.launches)
		p.Add(id, profile.GPUTraced, k.traced)
		p.Add(id, profile.GPUGraph, k.graph)
		p.Add(id, profile.GPUBlocks, k.blocks)
		p.Add(id, profile.GPUBlocksTrace, k.blocksTraced)
	}
	clear(a.kern)
}

// pcSum is one instruction's access statistics summed over the shards,
// with the value counters its sketch is made from.
type pcSum struct {
	pcAcc
	counters []*valCounter
}

// accSum is the accesses of one (instruction, object), with the value
// counters from which both the instruction's and the object's sketches
// are made, or of one object summed over its instructions.
type accSum struct {
	ak       AccessKind
	accesses uint64
	counters []*valCounter
}

// accessSums are an item's access statistics summed over the shards (in
// shard order, so the sketches are the same whatever the worker count),
// with their keys in the order they are added to the profile.
type accessSums struct {
	pcs     map[pcKey]*pcSum
	pcKeys  []pcKey
	ops     map[objPCKey]*accSum
	opKeys  []objPCKey
	objs    map[objKey]*accSum
	objKeys []objKey
}

func (a *Analyzer) sumAccesses(accs []*acc) *accessSums {
	pcs := map[pcKey]*pcSum{}
	// Keys are canonical (orphans.go): a first launch keyed again and the
	// later launches are one instruction, one sketch.
	for _, ac := range accs {
		for k, v := range ac.pcs {
			k = a.canonPCKey(k)
			s := pcs[k]
			if s == nil {
				s = &pcSum{pcAcc: pcAcc{ak: v.ak}}
				pcs[k] = s
			}
			s.ak = knownKind(s.ak, a.orphanKind(k.pc, v.ak))
			s.accesses += v.accesses
			s.redT += v.redT
			s.outside += v.outside
		}
	}
	ops := map[objPCKey]*accSum{}
	for _, ac := range accs {
		for k, v := range ac.objPC {
			k = a.canonOPKey(k)
			s := ops[k]
			if s == nil {
				s = &accSum{ak: v.ak}
				ops[k] = s
			}
			s.ak = knownKind(s.ak, a.orphanKind(k.pc, v.ak))
			s.accesses += v.accesses
			s.counters = append(s.counters, &v.vals)
		}
	}
	opKeys := make([]objPCKey, 0, len(ops))
	for k := range ops {
		opKeys = append(opKeys, k)
	}
	sort.Slice(opKeys, func(i, j int) bool { return lessOP(opKeys[i], opKeys[j]) })
	objs := map[objKey]*accSum{}
	var objKeys []objKey
	for _, k := range opKeys {
		s := ops[k]
		pc := pcs[pcKey{k.ctx, k.kind, k.pc}]
		pc.counters = append(pc.counters, s.counters...)
		if k.obj == noObj {
			continue
		}
		ok := objKey{k.ctx, k.kind, k.obj}
		os := objs[ok]
		if os == nil {
			os = &accSum{ak: s.ak}
			objs[ok] = os
			objKeys = append(objKeys, ok)
		}
		os.ak = knownKind(os.ak, s.ak)
		os.accesses += s.accesses
		os.counters = append(os.counters, s.counters...)
	}
	pcKeys := make([]pcKey, 0, len(pcs))
	for k := range pcs {
		pcKeys = append(pcKeys, k)
	}
	sort.Slice(pcKeys, func(i, j int) bool { return lessPC(pcKeys[i], pcKeys[j]) })
	return &accessSums{pcs: pcs, pcKeys: pcKeys, ops: ops, opKeys: opKeys, objs: objs, objKeys: objKeys}
}

// accessStats adds the per-instruction and per-object access statistics
// with their value sketches.
func (b *builder) accessStats(sums *accessSums) {
	a, p := b.a, b.p
	pcs, pcKeys, objs, objKeys := sums.pcs, sums.pcKeys, sums.objs, sums.objKeys
	// The sketches, in parallel (the workers are idle while an item is
	// built); everything else is assembled serially below.
	var jobs []sketchJob
	for _, k := range pcKeys {
		jobs = append(jobs, sketchJob{cs: pcs[k].counters, ak: pcs[k].ak})
	}
	for _, k := range objKeys {
		jobs = append(jobs, sketchJob{cs: objs[k].counters, ak: objs[k].ak})
	}
	for _, s := range sums.ops {
		for _, c := range s.counters {
			c.settle(s.ak)
		}
	}
	a.sketches(jobs)
	for i, k := range pcKeys {
		s := pcs[k]
		id := b.inst(k.ctx, k.kind, k.pc)
		if k.kind == kLoad {
			p.Add(id, profile.MemLoads, s.accesses)
			p.Add(id, profile.RedTempLoad, s.redT)
		} else {
			p.Add(id, profile.MemStores, s.accesses)
			p.Add(id, profile.RedTempStore, s.redT)
		}
		p.Add(id, MemOutside, s.outside)
		st := p.PCStatOf(profile.PCKey{Context: b.kernel(k.ctx), PC: b.pc(k.pc), Access: access(k.kind)})
		st.Accesses += s.accesses
		st.Values = jobs[i].out
	}
	for i, k := range objKeys {
		s := objs[k]
		st := p.ObjStatOf(profile.ObjectKey{Context: b.kernel(k.ctx), Object: b.object(k.obj), Access: access(k.kind)})
		st.Accesses += s.accesses
		st.Values = jobs[len(pcKeys)+i].out
	}
}

// spatialPairs adds the spatial pairs <data object, PC>: accesses minus
// the first occurrences resolved since the last item.
func (b *builder) spatialPairs(sums *accessSums) {
	a, p := b.a, b.p
	first := a.first
	if a.orph.rekeyed {
		first = make(map[objPCKey]uint64, len(a.first))
		for k, n := range a.first {
			first[a.canonOPKey(k)] += n
		}
	}
	for _, k := range sums.opKeys {
		if k.obj == noObj {
			continue
		}
		// First occurrences estimated by sampling (sample.go) may exceed
		// the accesses of one PC.
		acc, f := sums.ops[k].accesses, first[k]
		if f >= acc {
			continue
		}
		red := acc - f
		id := b.inst(k.ctx, k.kind, k.pc)
		if k.kind == kLoad {
			p.Add(id, profile.RedSpatLoad, red)
		} else {
			p.Add(id, profile.RedSpatStore, red)
		}
		sk := profile.SpatialKey{Context: b.kernel(k.ctx), Object: b.object(k.obj), PC: b.pc(k.pc), Access: access(k.kind)}
		p.Spatial[sk] += red
	}
	clear(a.first)
}

// instStats adds the PC samples and instruction counts; those of
// functions whose structure is on its way wait for a later item
// (placement.go).
func (b *builder) instStats() {
	a, p := b.a, b.p
	for k, ia := range a.insts {
		if !a.placeable(k.pc) {
			continue
		}
		delete(a.insts, k)
		id := b.inst(k.ctx, kLoad, k.pc)
		p.Add(id, profile.InstSamples, ia.samples)
		for name, n := range ia.stalls {
			p.Add(id, profile.StallMetric(name), n)
		}
		p.Add(id, profile.InstExecuted, ia.executed)
		p.Add(id, InstThreadExecuted, ia.threads)
	}
}

// knownKind is the access kind of an instruction whose records were read
// two ways: the structure's where one was (a first launch's records,
// before its module came, were read at their width; orphans.go). One
// instruction's records otherwise always agree.
func knownKind(cur, other AccessKind) AccessKind {
	if cur.Type == profile.ValUnknown && other.Type != profile.ValUnknown {
		return other
	}
	return cur
}

type sketchJob struct {
	cs  []*valCounter
	ak  AccessKind
	out *profile.ValueSketch
}

// sketches runs mergeCounters for every job on as many goroutines as the
// analyzer has workers.
func (a *Analyzer) sketches(jobs []sketchJob) {
	if err := parallel(len(a.workers), len(jobs), func(i int) {
		jobs[i].out = mergeCounters(jobs[i].cs, jobs[i].ak)
	}); err != nil {
		panic(err) // Flush turns it into an error
	}
}

func lessOP(a, b objPCKey) bool {
	if a.ctx != b.ctx {
		return a.ctx < b.ctx
	}
	if a.pc != b.pc {
		return a.pc < b.pc
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.obj < b.obj
}

func lessPC(a, b pcKey) bool {
	if a.ctx != b.ctx {
		return a.ctx < b.ctx
	}
	if a.pc != b.pc {
		return a.pc < b.pc
	}
	return a.kind < b.kind
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	ks := make([]uint32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
