// Package analyze is the collector's online analysis: it turns the decoded
// raw record stream of one rank into profile items (docs/collector.md).
//
// Frames are fed in stream order to an Analyzer. Control frames (modules,
// functions, launches, allocations, kernel ends, PC samples, instruction
// counts) are handled in the caller's goroutine; access records are
// analysed by workers in parallel: GVProf's temporal redundancy (per
// thread, so a thread's records go to one shard), spatial redundancy
// (per data object, resolved in parallel by value partition at barriers),
// per-instruction and per-object value statistics; memory divergence,
// reuse distances and bank conflicts on memory workers of their own.
// Flush returns what was accumulated since the previous flush as one
// profile item.
package analyze

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/symbolize"
	"gpuprof/profile"
)

// HostResolver turns raw host return addresses into calling-context frames.
type HostResolver interface {
	AddModule(m *rawstream.HostModule)
	// Frames takes return addresses innermost first and returns host frames
	// outermost first, without the frames of the CUDA runtime, the driver,
	// the injection library and the C start code.
	Frames(stack []uint64) []profile.Frame
}

// Options configure an Analyzer.
type Options struct {
	Job  string
	Rank int32
	// Workers analysing access records in parallel (default GOMAXPROCS).
	Workers int
	// MemWorkers computing reuse distances and bank conflicts, sharded by
	// block (default Workers). Both pools are CPU-bound; on the 16-core
	// GPU host, smaller pools that left cores to the serial reader and
	// dispatch loop were no faster (docs/collector.md).
	MemWorkers int
	// ReuseSampling measures reuse distances in one traced block in this
	// many of each launch, from its first (default DefaultReuseSampling;
	// 1: every block, exact histograms).
	ReuseSampling int
	// ResolveEvery is how many access records per worker may pass between
	// the resolutions of spatial candidates (default 1<<14; candidates that
	// outgrow the cache are resolved sooner).
	ResolveEvery uint64
	// CandidateLimit brings a barrier forward when a worker holds this
	// many spatial candidates (default candLimit).
	CandidateLimit int64
	// QueueDepth is how many frames each worker's queue holds (default
	// 16): deeper queues even out the load of workers whose records come
	// in bursts from a few blocks, at the price of longer drains at
	// barriers.
	QueueDepth int
	// Host resolves host call stacks (default: a symbolize.Symbolizer).
	Host HostResolver
	// Structures gives GPU module structure (nil: instructions are placed
	// directly under their function and values read at the record's width).
	Structures StructureSource
	// OnModule is called once per new module content hash with the cubin
	// bytes (for sharing through the broker's object store).
	OnModule func(hash profile.ModuleHash, cubin []byte)
	// HashValues, when set, puts keyed hashes of the values read from the
	// application's memory into the value sketches instead of the values
	// (profile.ValHashed): counts and redundancy fractions are kept, no
	// value leaves the collector.
	HashValues *ValueHasher
}

// Metric names the analysis adds beyond profile's well-known ones.
var (
	// MemOutside counts global lane units at addresses in no known
	// allocation (not attributed to a data object).
	MemOutside = profile.Metric("mem.outside_objects")
	// InstThreadExecuted is the thread-level execution count (hybrid mode).
	InstThreadExecuted = profile.Metric("inst.thread_executed")
)

type modInfo struct {
	id        uint64
	hash      profile.ModuleHash
	size      uint64
	cubin     []byte
	funcs     []string
	resolved  bool
	structure Structure
}

type funcInfo struct {
	idx    uint32
	wireID uint32
	mod    *modInfo
	name   string
	pc     uint64
	size   uint32
	ctx    uint32 // the last launch context of this function (for samples without a launch)
	hasCtx bool
	orphan bool // reported without a known module
}

// fn returns the function with wire id id: a function reported without a
// module is the same-named function of a module loaded since, if any.
func (a *Analyzer) fn(id uint32) *funcInfo {
	f := a.funcByID[id]
	if f != nil && f.orphan {
		if real := a.byName[f.name]; real != nil {
			return real
		}
	}
	return f
}

// funcSnap is an immutable list of functions with known code ranges,
// sorted by PC; a new one is made when a function is added.
type funcSnap struct{ byPC []*funcInfo }

func (s *funcSnap) find(pc uint64) *funcInfo {
	fs := s.byPC
	i := sort.Search(len(fs), func(i int) bool { return fs[i].pc > pc }) - 1
	if i >= 0 && pc-fs[i].pc < uint64(fs[i].size) {
		return fs[i]
	}
	return nil
}

// objSnap is an immutable list of live allocations sorted by address
// (GVProf's memory snapshot): a launch analyses its accesses against the
// snapshot current when it was launched.
type objSnap struct{ e []objEntry }

type objEntry struct {
	start, end uint64
	idx        uint32
}

func (s *objSnap) find(addr uint64, hint int) (uint32, int) {
	e := s.e
	if hint < len(e) && addr >= e[hint].start && addr < e[hint].end {
		return e[hint].idx, hint
	}
	i := sort.Search(len(e), func(i int) bool { return e[i].start > addr }) - 1
	if i >= 0 && addr < e[i].end {
		return e[i].idx, i
	}
	return noObj, hint
}

type objInfo struct {
	id      profile.ObjectID
	frames  []profile.Frame // allocation context (host frames), or the kernel path for pseudo objects
	size    uint64
	space   uint8
	allocs  uint64 // allocations since the last item
	bytes   uint64
	touched bool
}

type ctxInfo struct {
	frames []profile.Frame // host frames then the kernel frame
	fn     *funcInfo
	shared uint32 // pseudo objects
	local  uint32
}

type launchInfo struct {
	seq          uint32
	wireID       uint64
	fn           *funcInfo
	ctx          uint32
	objs         *objSnap
	funcs        *funcSnap
	shared       uint32
	local        uint32
	instrumented bool
	ended        bool
	warps        int // warps per block (extra.go)
	// the lane groups of its warps (laneGroupsOf), and the work units of
	// the warps and blocks seen (dispatcher only; units)
	groups int
	// splitGrains: the parts of a block's memory work are work units of
	// their own (memSplit), for launches with fewer blocks whose reuse is
	// measured than memory workers
	splitGrains bool
	wunits      map[uint64]uint64 // warp unit << 32 | its block's unit
	bunits      map[uint32]uint32
	// seen: per partition, the values of each (object, kind) seen before
	// the last barrier; written only at barriers.
	seen []map[uint32]*valSet // per partition, by object << 1 | kind
}

type kernAcc struct {
	time, launches, traced, blocks, blocksTraced uint64
}

type instKey struct {
	ctx uint32
	pc  uint64 // packed
}

type instAcc struct {
	samples  uint64
	stalls   map[string]uint64
	executed uint64
	threads  uint64
}

type delta struct {
	launches, traced, blocks, blocksTraced, records, dropped, hostDropped, samplesDropped uint64
}

// Analyzer analyses one process's stream. Use it from one goroutine.
type Analyzer struct {
	o     Options
	hello *rawstream.Hello
	exit  int32

	modules    map[uint64]*modInfo
	byContent  map[uint64]*modInfo // content key -> first module with its bytes
	hashes     map[profile.ModuleHash]bool
	funcs      []*funcInfo
	funcByID   map[uint32]*funcInfo
	byName     map[string]*funcInfo // functions of known modules, by name
	unknownMod *modInfo
	fsnap      *funcSnap

	ctxs     []*ctxInfo
	ctxByID  map[profile.NodeID]uint32
	stacks   map[string][]profile.Frame
	launches map[uint64]*launchInfo // open launches by wire id
	bySeq    map[uint32]*launchInfo // launches whose spatial state is alive
	ended    []*launchInfo
	recent   map[uint64]uint32 // wire launch id -> ctx, for samples that come after KERNEL_END
	recentQ  []uint64
	nextSeq  uint32

	objs   []*objInfo
	objIdx map[profile.ObjectID]uint32
	osnap  *objSnap

	kern   map[uint32]*kernAcc
	insts  map[instKey]*instAcc
	stalls map[uint32]string
	first  map[objPCKey]uint64 // spatial first occurrences resolved since the last item
	d      delta

	workers []*worker
	shards  [numShards]*shard
	fseq    uint32
	// the next warp and block work units (units)
	nextWarp, nextBlock uint32
	nextTracked         uint32 // block units whose reuse is measured
	reusePeriod         uint32 // Options.ReuseSampling
	pending             uint64 // access records since the last flush
	// access records since the last barrier
	sinceResolve uint64

	places map[uint64]*Placement

	// time spent waiting for workers at barriers, resolving candidates,
	// building items and blocked on a full worker queue (Busy reports them)
	tWait, tResolve, tBuild, tBlocked, tMemBlocked time.Duration
	barriers, earlyBarriers                        int

	anomalies uint64
	firstAnom string
	failed    error
	closed    bool

	x extra // launch statistics, bank conflicts, reuse distances (extra.go)
}

// New starts an analyzer and its workers; Close stops them.
func New(o Options) *Analyzer {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Workers > numShards {
		o.Workers = numShards
	}
	if o.Host == nil {
		o.Host = symbolize.New()
	}
	if o.ResolveEvery == 0 {
		o.ResolveEvery = resolveEvery
	}
	if o.CandidateLimit <= 0 {
		o.CandidateLimit = candLimit
	}
	if o.QueueDepth <= 0 {
		o.QueueDepth = 16
	}
	if o.ReuseSampling <= 0 {
		o.ReuseSampling = DefaultReuseSampling
	}
	a := &Analyzer{o: o, exit: -1, reusePeriod: uint32(o.ReuseSampling),
		modules: map[uint64]*modInfo{}, byContent: map[uint64]*modInfo{}, hashes: map[profile.ModuleHash]bool{},
		funcByID: map[uint32]*funcInfo{}, byName: map[string]*funcInfo{}, fsnap: &funcSnap{},
		ctxByID: map[profile.NodeID]uint32{}, stacks: map[string][]profile.Frame{},
		launches: map[uint64]*launchInfo{}, bySeq: map[uint32]*launchInfo{}, recent: map[uint64]uint32{},
		objIdx: map[profile.ObjectID]uint32{}, osnap: &objSnap{},
		kern: map[uint32]*kernAcc{}, insts: map[instKey]*instAcc{}, stalls: map[uint32]string{}, first: map[objPCKey]uint64{},
		places: map[uint64]*Placement{},
	}
	for i := range a.shards {
		a.shards[i] = newShard(i, o.HashValues)
	}
	for w := 0; w < o.Workers; w++ {
		wk := &worker{id: w, n: o.Workers, a: a, in: make(chan msg, o.QueueDepth), pcs: map[uint64]*pcInfo{}}
		wk.cand = make([]spTable, o.Workers)
		for p := range wk.cand {
			wk.cand[p].first = firstTableSize(o.CandidateLimit, o.Workers)
		}
		for s := w; s < numShards; s += o.Workers {
			wk.own = append(wk.own, a.shards[s])
		}
		a.workers = append(a.workers, wk)
		go wk.run()
	}
	if o.MemWorkers <= 0 {
		o.MemWorkers = o.Workers
	}
	a.x.start(o.MemWorkers, o.QueueDepth)
	return a
}

// Close stops the workers. The analyzer cannot be used afterwards.
func (a *Analyzer) Close() {
	if a.closed {
		return
	}
	a.closed = true
	for _, w := range a.workers {
		close(w.in)
	}
	a.x.stop()
}

// Hello returns the stream's HELLO (nil before it).
func (a *Analyzer) Hello() *rawstream.Hello { return a.hello }

// ExitCode is END's exit code, -1 before END.
func (a *Analyzer) ExitCode() int32 { return a.exit }

// Pending is the number of access records analysed since the last flush.
func (a *Analyzer) Pending() uint64 { return a.pending }

// Anomalies returns the number of frames that were inconsistent with the
// stream before them (unknown ids) and were skipped, and the first one.
func (a *Analyzer) Anomalies() (uint64, string) { return a.anomalies, a.firstAnom }

func (a *Analyzer) anomaly(off int64, k rawstream.Kind, format string, args ...any) {
	a.anomalies++
	if a.firstAnom == "" {
		a.firstAnom = fmt.Sprintf("offset %d (%v): %s", off, k, fmt.Sprintf(format, args...))
	}
}

func panicError(r any) error {
	return fmt.Errorf("analysis failed: %v\n%s", r, debug.Stack())
}

// Add analyses one frame; offset is its byte offset in the stream (for
// messages). Frames inconsistent with what came before (unknown launch,
// function or module ids) are skipped and counted (Anomalies). Add returns
// an error only if the analysis itself failed; everything flushed before
// stays valid.
func (a *Analyzer) Add(f rawstream.Frame, offset int64) (err error) {
	if a.failed != nil {
		return a.failed
	}
	defer func() {
		if r := recover(); r != nil {
			a.failed = panicError(r)
			err = a.failed
		}
	}()
	switch f := f.(type) {
	case *rawstream.Hello:
		a.hello = f
	case *rawstream.HostModule:
		a.o.Host.AddModule(f)
	case *rawstream.Module:
		a.module(f, offset)
	case *rawstream.Function:
		a.function(f, offset)
	case *rawstream.Launch:
		a.launch(f, offset)
	case *rawstream.Access:
		l := a.launches[f.LaunchID]
		if l == nil {
			a.anomaly(offset, f.Kind(), "launch %d unknown or already ended; %d records skipped", f.LaunchID, f.Count)
			return nil
		}
		a.fseq++
		a.dispatch(f, l)
		a.pending += uint64(f.Count)
		a.d.records += uint64(f.Count)
		// Resolve spatial candidates every resolveEvery records, not only
		// at items, and sooner when a worker's candidates outgrow the
		// cache: the window's candidate tables stay small, and values seen
		// are known to the workers sooner.
		if a.sinceResolve += uint64(f.Count); a.sinceResolve >= a.o.ResolveEvery*uint64(len(a.workers)) || a.candidatesFull() {
			if a.sinceResolve < a.o.ResolveEvery*uint64(len(a.workers)) {
				a.earlyBarriers++
			}
			if err := a.barrier(); err != nil {
				a.failed = err
				return err
			}
		}
	case *rawstream.KernelEnd:
		a.kernelEnd(f, offset)
	case *rawstream.Alloc:
		a.alloc(f)
	case *rawstream.Free:
		a.free(f)
	case *rawstream.StallReasons:
		for _, r := range f.Reasons {
			a.stalls[r.Index] = r.Name
		}
	case *rawstream.PCSamples:
		a.pcSamples(f, offset)
	case *rawstream.InstrCounts:
		a.instrCounts(f, offset)
	case *rawstream.Dropped:
		a.d.hostDropped += f.Records
		a.d.samplesDropped += f.PCSamples
	case *rawstream.End:
		a.exit = f.ExitCode
	}
	return nil
}

// dispatch gives each worker its lane groups' parts of a frame's records,
// and each memory worker its blocks' records.
func (a *Analyzer) dispatch(f *rawstream.Access, l *launchInfo) {
	n := len(a.workers)
	per := make([][]recRef, n)
	// The memory workers' records are split in the same pass, so no worker
	// reads records that are not its own.
	mem := a.x.ms.split()
	it := f.RecordHeaders()
	lastKey, unit, bunit := ^uint64(0), uint32(0), uint32(0)
	for {
		off := it.Offset()
		if !it.Next() {
			break
		}
		r := it.Record()
		// Records of one warp often come in runs.
		if k := uint64(r.Block)<<16 | uint64(r.Warp); k != lastKey {
			lastKey = k
			unit, bunit = a.units(l, r.Block, r.Warp)
		}
		for g := 0; g < l.groups; g++ {
			lanes := r.Active & groupMask(g, l.groups)
			if lanes == 0 {
				continue
			}
			s := shardOf(unit, g, l.groups)
			w := s % n
			if per[w] == nil {
				per[w] = make([]recRef, 0, l.groups*int(f.Count)/n+16)
			}
			per[w] = append(per[w], recRef{idx: uint32(it.Index()), off: uint32(off), lanes: lanes, shard: uint8(s)})
		}
		mem.add(r, uint32(off), bunit, l.splitGrains)
	}
	for i, w := range a.workers {
		if len(per[i]) > 0 {
			a.tBlocked += w.send(msg{kind: msgAccess, acc: f, l: l, fseq: a.fseq, recs: per[i]})
		}
	}
	a.tMemBlocked += a.x.ms.access(f, l, mem)
}

// units numbers the launch's warps and blocks in the order they first
// appear (across launches): a warp's lane groups go to consecutive shards
// and a block's reuse granularities to consecutive memory workers, so a
// launch's traced warps and blocks are spread evenly, as hashing their
// indices (spaced by the block-sampling period) would not do.
func (a *Analyzer) units(l *launchInfo, block uint32, warp uint16) (warpUnit, blockUnit uint32) {
	k := uint64(block)<<16 | uint64(warp)
	if u, ok := l.wunits[k]; ok { // one lookup on the hot path: both units
		return uint32(u >> 32), uint32(u)
	}
	b, ok := l.bunits[block]
	if !ok {
		// Every ReuseSampling-th block of the launch has its reuse
		// distances measured, from its first (memSplit); those blocks are
		// numbered apart, so each kind is dealt out evenly.
		if uint32(len(l.bunits))%a.reusePeriod == 0 {
			b = a.nextTracked | trackedBlock
			a.nextTracked++
		} else {
			b = a.nextBlock
			a.nextBlock++
		}
		l.bunits[block] = b
	}
	u := a.nextWarp
	a.nextWarp++
	l.wunits[k] = uint64(u)<<32 | uint64(b)
	return u, b
}

func (a *Analyzer) module(f *rawstream.Module, off int64) {
	m := &modInfo{id: f.ModuleID, size: uint64(f.Size)}
	switch {
	case f.HasBytes:
		m.hash = profile.ModuleHash(xxhash.Sum64(f.Bytes))
		m.cubin = f.Bytes
		if _, ok := a.byContent[f.ContentKey]; !ok {
			a.byContent[f.ContentKey] = m
		}
	case a.byContent[f.ContentKey] != nil:
		src := a.byContent[f.ContentKey]
		m.hash, m.cubin = src.hash, src.cubin
	default:
		// The bytes never came: the library's key stands in for the hash,
		// which then only this process agrees on.
		a.anomaly(off, f.Kind(), "module %d: content key %#x was never sent with bytes", f.ModuleID, f.ContentKey)
		m.hash = profile.ModuleHash(f.ContentKey)
	}
	a.modules[f.ModuleID] = m
	if pf, ok := a.o.Structures.(interface {
		Prefetch(profile.ModuleHash, []byte)
	}); ok && m.cubin != nil {
		pf.Prefetch(m.hash, m.cubin)
	}
	if !a.hashes[m.hash] {
		a.hashes[m.hash] = true
		if a.o.OnModule != nil && m.cubin != nil {
			a.o.OnModule(m.hash, m.cubin)
		}
	}
}

// unknownModule stands for the module of functions the library reported
// before (or without) their module: with lazy loading, a kernel's launch
// can come before its module is loaded. Its hash is 0 on every rank.
func (a *Analyzer) unknownModule() *modInfo {
	if a.unknownMod == nil {
		a.unknownMod = &modInfo{id: ^uint64(0), resolved: true}
	}
	return a.unknownMod
}

func (a *Analyzer) function(f *rawstream.Function, off int64) {
	m := a.modules[f.ModuleID]
	orphan := m == nil
	if orphan {
		m = a.unknownModule()
	}
	fi := &funcInfo{idx: uint32(len(a.funcs)), wireID: f.FunctionID, mod: m, name: f.Name, pc: f.PC, size: f.Size, orphan: orphan}
	a.funcs = append(a.funcs, fi)
	a.funcByID[f.FunctionID] = fi
	if !orphan {
		a.byName[f.Name] = fi
	}
	m.funcs = append(m.funcs, f.Name)
	m.resolved = false // more functions: a better structure match may exist
	if f.PC != 0 && f.Size != 0 {
		n := &funcSnap{byPC: make([]*funcInfo, 0, len(a.fsnap.byPC)+1)}
		for _, g := range a.fsnap.byPC {
			if g.pc+uint64(g.size) <= f.PC || g.pc >= f.PC+uint64(f.Size) { // a reloaded range replaces the old one
				n.byPC = append(n.byPC, g)
			}
		}
		n.byPC = append(n.byPC, fi)
		sort.Slice(n.byPC, func(i, j int) bool { return n.byPC[i].pc < n.byPC[j].pc })
		a.fsnap = n
	}
}

// structure resolves a module's structure once its functions are known
// (at its first launch).
func (a *Analyzer) structure(m *modInfo) {
	if m.resolved || a.o.Structures == nil {
		return
	}
	m.resolved = true
	var sm uint16
	if a.hello != nil {
		sm = a.hello.SM
	}
	st, err := a.o.Structures.Structure(m.hash, m.cubin, m.funcs, sm)
	if err == nil && st != nil {
		m.structure = st
	}
}

func (a *Analyzer) hostFrames(stack []uint64) []profile.Frame {
	var b strings.Builder
	for _, x := range stack {
		fmt.Fprintf(&b, "%x,", x)
	}
	k := b.String()
	if fr, ok := a.stacks[k]; ok {
		return fr
	}
	fr := a.o.Host.Frames(stack)
	if len(a.stacks) > 1<<16 {
		clear(a.stacks)
	}
	a.stacks[k] = fr
	return fr
}

func (a *Analyzer) newObj(id profile.ObjectID, frames []profile.Frame, size uint64, space uint8) uint32 {
	if i, ok := a.objIdx[id]; ok {
		return i
	}
	i := uint32(len(a.objs))
	a.objs = append(a.objs, &objInfo{id: id, frames: frames, size: size, space: space})
	a.objIdx[id] = i
	return i
}

func pathID(frames []profile.Frame) profile.NodeID {
	id := profile.RootID
	for _, f := range frames {
		id = profile.ChildID(id, f)
	}
	return id
}

func (a *Analyzer) launch(f *rawstream.Launch, off int64) {
	fn := a.fn(f.FunctionID)
	if fn == nil {
		a.anomaly(off, f.Kind(), "launch %d: function %d unknown", f.LaunchID, f.FunctionID)
		return
	}
	a.structure(fn.mod)
	host := a.hostFrames(f.Host)
	frames := append(append([]profile.Frame(nil), host...), profile.Frame{Kind: profile.KindKernel, Module: fn.mod.hash.String(), Function: fn.name})
	id := pathID(frames)
	ci, ok := a.ctxByID[id]
	if !ok {
		ci = uint32(len(a.ctxs))
		c := &ctxInfo{frames: frames, fn: fn}
		c.shared = a.newObj(profile.SpaceObjectID(id, uint8(rawstream.SpaceShared)), frames, 0, uint8(rawstream.SpaceShared))
		c.local = a.newObj(profile.SpaceObjectID(id, uint8(rawstream.SpaceLocal)), frames, 0, uint8(rawstream.SpaceLocal))
		a.ctxs = append(a.ctxs, c)
		a.ctxByID[id] = ci
	}
	c := a.ctxs[ci]
	fn.ctx, fn.hasCtx = ci, true
	if old := a.launches[f.LaunchID]; old != nil {
		a.anomaly(off, f.Kind(), "launch id %d reused before its KERNEL_END", f.LaunchID)
		a.endLaunch(old)
	}
	a.nextSeq++
	l := &launchInfo{seq: a.nextSeq, wireID: f.LaunchID, fn: fn, ctx: ci, objs: a.osnap, funcs: a.fsnap,
		shared: c.shared, local: c.local, instrumented: f.Instrumented, seen: make([]map[uint32]*valSet, len(a.workers)),
		wunits: map[uint64]uint64{}, bunits: map[uint32]uint32{}}
	blocks, warps := a.tracedBlocks(f)
	l.groups = laneGroupsOf(blocks * warps)
	// Split when the blocks whose reuse is measured are too few to keep
	// the memory workers busy.
	l.splitGrains = (blocks+uint64(a.reusePeriod)-1)/uint64(a.reusePeriod) < uint64(len(a.x.ms.ws))
	a.launches[f.LaunchID] = l
	a.bySeq[l.seq] = l
	a.x.launch(ci, fn, f, l)
	ka := a.kernAcc(ci)
	ka.launches++
	a.d.launches++
	if f.Instrumented {
		ka.traced++
		a.d.traced++
	}
	a.remember(f.LaunchID, ci)
}

// tracedBlocks is the number of blocks block sampling traces in a launch
// (block b is traced iff (b + r) mod P = 0), and warpsPerBlock their warps.
func (a *Analyzer) tracedBlocks(f *rawstream.Launch) (blocks, warpsPerBlock uint64) {
	if !f.Instrumented {
		return 0, 0
	}
	blocks = f.Blocks()
	if a.hello != nil && a.hello.BlockSampling > 1 {
		p := uint64(a.hello.BlockSampling)
		first := (p - uint64(f.BlockOffset)%p) % p
		if first >= blocks {
			blocks = 0
		} else {
			blocks = (blocks-1-first)/p + 1
		}
	}
	threads := uint64(f.Block[0]) * uint64(f.Block[1]) * uint64(f.Block[2])
	return blocks, (threads + 31) / 32
}

func (a *Analyzer) remember(id uint64, ctx uint32) {
	if _, ok := a.recent[id]; !ok {
		a.recentQ = append(a.recentQ, id)
	}
	a.recent[id] = ctx
	if len(a.recentQ) > 1<<14 {
		delete(a.recent, a.recentQ[0])
		a.recentQ = a.recentQ[1:]
	}
}

func (a *Analyzer) kernAcc(ci uint32) *kernAcc {
	k := a.kern[ci]
	if k == nil {
		k = &kernAcc{}
		a.kern[ci] = k
	}
	return k
}

func (a *Analyzer) endLaunch(l *launchInfo) {
	delete(a.launches, l.wireID)
	l.ended = true
	a.ended = append(a.ended, l)
	l.wunits, l.bunits = nil, nil
	for _, w := range a.workers {
		w.endLaunch(l)
	}
	a.x.ms.endLaunch(l)
}

func (a *Analyzer) kernelEnd(f *rawstream.KernelEnd, off int64) {
	l := a.launches[f.LaunchID]
	if l == nil {
		a.anomaly(off, f.Kind(), "launch %d unknown or already ended", f.LaunchID)
		return
	}
	ka := a.kernAcc(l.ctx)
	a.x.ls.kernelEnd(l.ctx, f)
	if f.EndNS > f.StartNS && f.StartNS != 0 {
		ka.time += f.EndNS - f.StartNS
	}
	ka.blocks += uint64(f.BlocksTotal)
	ka.blocksTraced += uint64(f.BlocksSampled)
	a.d.blocks += uint64(f.BlocksTotal)
	a.d.blocksTraced += uint64(f.BlocksSampled)
	a.d.dropped += f.Dropped
	a.endLaunch(l)
}

func (a *Analyzer) alloc(f *rawstream.Alloc) {
	frames := a.hostFrames(f.Host)
	id := profile.ObjectIDOf(pathID(frames), f.Size)
	i := a.newObj(id, frames, f.Size, 0)
	a.objs[i].allocs++
	a.objs[i].bytes += f.Size
	end := f.Address + f.Size
	if end < f.Address {
		end = ^uint64(0)
	}
	n := &objSnap{e: make([]objEntry, 0, len(a.osnap.e)+1)}
	for _, e := range a.osnap.e {
		if e.end <= f.Address || e.start >= end { // a live range it overlaps was freed without a FREE
			n.e = append(n.e, e)
		}
	}
	n.e = append(n.e, objEntry{f.Address, end, i})
	sort.Slice(n.e, func(i, j int) bool { return n.e[i].start < n.e[j].start })
	a.osnap = n
}

func (a *Analyzer) free(f *rawstream.Free) {
	for k, e := range a.osnap.e {
		if e.start == f.Address {
			n := &objSnap{e: make([]objEntry, 0, len(a.osnap.e)-1)}
			n.e = append(append(n.e, a.osnap.e[:k]...), a.osnap.e[k+1:]...)
			a.osnap = n
			return
		}
	}
}

// sampleCtx finds the context of a sampled launch: the launch itself, a
// recently ended one, or (continuous mode, launch 0) the last launch of the
// function.
func (a *Analyzer) sampleCtx(launch uint64, fn *funcInfo) (uint32, bool) {
	if l := a.launches[launch]; l != nil {
		return l.ctx, true
	}
	if c, ok := a.recent[launch]; ok {
		return c, true
	}
	return fn.ctx, fn.hasCtx
}

func (a *Analyzer) instAcc(ctx uint32, fn *funcInfo, off uint32) *instAcc {
	k := instKey{ctx, uint64(fn.idx)<<32 | uint64(off)}
	ia := a.insts[k]
	if ia == nil {
		ia = &instAcc{}
		a.insts[k] = ia
	}
	return ia
}

func (a *Analyzer) pcSamples(f *rawstream.PCSamples, off int64) {
	for _, s := range f.PCs {
		fn := a.fn(s.FunctionID)
		if fn == nil {
			a.anomaly(off, f.Kind(), "function %d unknown", s.FunctionID)
			continue
		}
		ctx, ok := a.sampleCtx(f.LaunchID, fn)
		if !ok {
			a.anomaly(off, f.Kind(), "samples of %s with no launch of it", fn.name)
			continue
		}
		ia := a.instAcc(ctx, fn, s.Offset)
		for _, st := range s.Stalls {
			name, ok := a.stalls[st.Reason]
			if !ok {
				name = fmt.Sprintf("reason_%d", st.Reason)
			}
			if ia.stalls == nil {
				ia.stalls = map[string]uint64{}
			}
			ia.stalls[name] += uint64(st.Samples)
			// CUPTI's _not_issued variants are a subset of their reason's
			// samples (those taken when the scheduler issued nothing), and
			// its sample_count/samples_data_dropped are not reasons.
			if strings.HasPrefix(name, "smsp__pcsamp_warps_issue_stalled_") && !strings.HasSuffix(name, "_not_issued") || !strings.HasPrefix(name, "smsp__pcsamp_") {
				ia.samples += uint64(st.Samples)
			}
		}
	}
}

func (a *Analyzer) instrCounts(f *rawstream.InstrCounts, off int64) {
	for _, c := range f.Counts {
		fn := a.fn(c.FunctionID)
		if fn == nil {
			a.anomaly(off, f.Kind(), "function %d unknown", c.FunctionID)
			continue
		}
		ctx, ok := a.sampleCtx(f.LaunchID, fn)
		if !ok {
			a.anomaly(off, f.Kind(), "counts of %s with no launch of it", fn.name)
			continue
		}
		ia := a.instAcc(ctx, fn, c.Offset)
		ia.executed += c.Executed
		ia.threads += c.ThreadExecuted
	}
}

// resolveEvery is the default of Options.ResolveEvery, how many access
// records per worker may pass between barriers: enough to keep the
// workers busy between them. candLimit bounds a worker's candidates
// between barriers: with values that are mostly new (every lane a new
// value, 32 candidates a record) 2^14 records made 32 MB tables, where
// every insert missed the cache; 2^15 entries keep them at 2 MB, while
// streams of recurring values keep the long interval and its few
// barriers.
const resolveEvery = 1 << 14

// firstTableSize is the first size of a worker's candidate table of one
// partition: room for its share of the candidate limit at load 1/2 (a
// power of two, 64 to 2^14 slots; 4096 slots, 128 KiB, for 16 workers).
func firstTableSize(limit int64, parts int) int {
	n := 64
	for n < 1<<14 && int64(n) < 2*limit/int64(parts) {
		n *= 2
	}
	return n
}

// candLimit is the default of Options.CandidateLimit, a variable so that
// tests can make early barriers frequent.
var candLimit int64 = 1 << 15

// candidatesFull says whether some worker holds candLimit candidates (as
// of its last frame: the workers run behind the dispatcher).
func (a *Analyzer) candidatesFull() bool {
	for _, w := range a.workers {
		if w.candN.Load() >= a.o.CandidateLimit {
			return true
		}
	}
	return false
}

// barrier waits until every worker has analysed every frame sent so far,
// then resolves the spatial candidates: per partition (in parallel), the
// earliest access of each new value is its first occurrence, the others
// are redundant.
func (a *Analyzer) barrier() error {
	t0 := time.Now()
	a.barriers++
	a.sinceResolve = 0
	done := make(chan error, len(a.workers))
	for _, w := range a.workers {
		a.tBlocked += w.send(msg{kind: msgBarrier, done: done})
	}
	var err error
	for range a.workers {
		if e := <-done; e != nil && err == nil {
			err = e
		}
	}
	t1 := time.Now()
	a.tWait += t1.Sub(t0)
	defer func() { a.tResolve += time.Since(t1) }()
	if err != nil {
		return err
	}
	parts := len(a.workers)
	firsts := make([]map[objPCKey]uint64, parts)
	var wg sync.WaitGroup
	var perr error
	var mu sync.Mutex
	next := make(chan int, parts)
	for p := 0; p < parts; p++ {
		next <- p
	}
	close(next)
	for w := 0; w < len(a.workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					perr = panicError(r)
					mu.Unlock()
				}
			}()
			for p := range next {
				firsts[p] = a.resolve(p)
				// Emptied here, in parallel: the tables of all partitions
				// are hundreds of MB to clear for streams of new values.
				for _, w := range a.workers {
					w.cand[p].reset()
				}
			}
		}()
	}
	wg.Wait()
	if perr != nil {
		return perr
	}
	for _, w := range a.workers {
		w.candN.Store(0)
	}
	for _, f := range firsts {
		for k, n := range f {
			a.first[k] += n
		}
	}
	for _, l := range a.ended {
		l.seen = nil // its candidates are resolved; no access comes after KERNEL_END
		delete(a.bySeq, l.seq)
	}
	a.ended = a.ended[:0]
	return nil
}

// resolve finds, in partition p, the first access of every candidate
// value: the earliest among the workers that saw it. Every other access of
// the value is spatially redundant; resolve counts the first occurrences
// per (object, PC), which the builder subtracts from the accesses.
func (a *Analyzer) resolve(p int) map[objPCKey]uint64 {
	// Counted by the entries' own words (launch, object and kind; PC) in a
	// table of their own: a Go map with objPCKey keys cost more than the
	// rest of the resolution for streams of new values.
	var counts firstCounts
	set := func(e *spEntry) *valSet {
		l := a.bySeq[uint32(e.a>>32)]
		ok := uint32(e.a)
		if l.seen[p] == nil {
			l.seen[p] = map[uint32]*valSet{}
		}
		vs := l.seen[p][ok]
		if vs == nil {
			vs = &valSet{}
			l.seen[p][ok] = vs
		}
		return vs
	}
	// Pass 1: the first worker to bring a value counts its candidate as the
	// first occurrence (flagged in the entry). A value several workers
	// brought is a conflict, settled in pass 2.
	var conflicts []*spEntry
	var last *valSet
	lastA := ^uint64(0)
	for _, w := range a.workers {
		w.cand[p].each(func(e *spEntry) {
			if e.a != lastA {
				last, lastA = set(e), e.a
			}
			if last.addNew(e.v) {
				e.pc |= firstFlag
				counts.add(e.a, e.pc&^firstFlag, 1)
			} else {
				conflicts = append(conflicts, e)
			}
		})
	}
	// Pass 2: the first occurrence is the earliest candidate of all workers.
	for _, c := range conflicts {
		var min, flagged *spEntry
		for _, w := range a.workers {
			if e := w.cand[p].get(c.a, c.v); e != nil {
				if min == nil || e.pos < min.pos {
					min = e
				}
				if e.pc&firstFlag != 0 {
					flagged = e
				}
			}
		}
		if min != flagged {
			counts.add(flagged.a, flagged.pc&^firstFlag, -1)
			flagged.pc &^= firstFlag
			min.pc |= firstFlag
			counts.add(min.a, min.pc&^firstFlag, 1)
		}
	}
	firsts := make(map[objPCKey]uint64, counts.n)
	for _, e := range counts.e {
		if e.n == 0 {
			continue
		}
		l := a.bySeq[uint32(e.a>>32)]
		ok := uint32(e.a)
		firsts[objPCKey{l.ctx, uint8(ok & 1), ok >> 1, e.pc}] += uint64(e.n)
	}
	return firsts
}

// firstCounts counts first occurrences by (launch << 32 | object << 1 |
// kind, packed PC): an open-addressing table, since the keys are few (the
// instructions and objects of the launches between two barriers) and
// every candidate adds to one.
type firstCounts struct {
	e []firstCount
	n int
}

type firstCount struct {
	a, pc uint64
	n     int64
	used  bool
}

func (c *firstCounts) add(a, pc uint64, d int64) {
	if 2*(c.n+1) > len(c.e) {
		old := c.e
		c.e = make([]firstCount, max(2*len(old), 16))
		c.n = 0
		for _, x := range old {
			if x.used {
				c.add(x.a, x.pc, x.n)
			}
		}
	}
	mask := uint64(len(c.e) - 1)
	for i := mix64(pc^a*0x9e3779b97f4a7c15) & mask; ; i = (i + 1) & mask {
		x := &c.e[i]
		if !x.used {
			*x = firstCount{a: a, pc: pc, n: d, used: true}
			c.n++
			return
		}
		if x.a == a && x.pc == pc {
			x.n += d
			return
		}
	}
}

// firstFlag marks, in a candidate's pc, the candidate counted as its
// value's first occurrence (packed PCs use 63 bits at most).
const firstFlag = 1 << 63
