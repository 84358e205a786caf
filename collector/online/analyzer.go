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
package online

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
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
	// SpatialKeep is how many distinct values of one (launch, object,
	// access kind), and a quarter of how many accesses, the spatial
	// analysis follows before it samples the values by hash (default
	// spatialKeep; negative: never, every value exact): docs/collector.md,
	// "Spatial redundancy by distinct sampling".
	SpatialKeep int64
	// PrefetchBytes: a module of at most this many bytes has the structure
	// of all its kernels asked for when it loads, where a Structures
	// source can prefetch (SASS.Prefetch), rather than each at its first
	// launch, until four times as many bytes were (0: none; the command
	// line's default is 1 MiB).
	PrefetchBytes int
	// QueueDepth is how many frames each worker's queue holds (default
	// 4): deeper queues even out the load of workers whose records come
	// in bursts from a few blocks, at the price of longer drains at
	// barriers (with 16, replays on the H100 waited 1.5-2x longer at
	// barriers and were up to 15% slower, docs/overhead.md).
	QueueDepth int
	// Host resolves host call stacks (default: a symbolize.Symbolizer).
	Host HostResolver
	// Structures gives GPU function structure (nil: instructions are placed
	// directly under their function and values read at the record's width).
	Structures StructureSource
	// StructureWait bounds the waits for structure: in all, at the first
	// access records of launches (whose values are read by it), and, from
	// the end of the stream, for the structure that instructions sampled
	// meanwhile still wait for (default DefaultStructureWait; placement.go).
	StructureWait time.Duration
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
	id    uint64
	hash  profile.ModuleHash
	size  uint64
	cubin []byte
	funcs []string
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
	split  *sampleSplit // its launches' contexts, for samples without a launch
	orphan bool         // reported without a known module
	fs     funcStructure
	// real is, for an orphan, the function of a loaded module it is
	// (orphans.go); nil while its module has not come.
	real *funcInfo
}

// fn returns the function with wire id id: a function reported without a
// module is the loaded module's function it turned out to be, if known.
func (a *Analyzer) fn(id uint32) *funcInfo {
	f := a.funcByID[id]
	if f != nil && f.real != nil {
		return f.real
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
	structured   bool // its function's structure was awaited (first ACCESS)
	warps        int  // warps per block (extra.go)
	// the lane groups of its warps (laneGroupsOf), and the work units of
	// the warps and blocks seen (dispatcher only; units)
	groups int
	// span and shardBase: the shards its work units go to (spanFor),
	// narrow when it started with fewer than every shard, nextIdx its
	// warps seen so far; tracedWarps: the warps block sampling traces;
	// recs: the access records dispatched (dispatcher only)
	span, shardBase   int
	narrow            bool
	nextIdx           uint32
	tracedWarps, recs uint64
	// splitGrains: the parts of a block's memory work are work units of
	// their own (memSplit), for launches with fewer blocks whose reuse is
	// measured than memory workers
	splitGrains bool
	wunits      warpUnits
	bunits      map[uint32]uint32
	// sent and memSent: the workers and memory workers given records of
	// the launch (a bit each), the ones to tell of its end
	sent, memSent uint64
	// seen: per partition, the values of each (object, kind) seen before
	// the last barrier; written only at barriers.
	seen []map[uint32]*valSet // per partition, by object << 1 | kind
	// levels: the spatial sampling level of each (object, kind), by
	// object << 1 | kind (none: 0, every value); written only at the
	// launch's start and at barriers, and never lowered (sample.go).
	levels []uint8
	// tslots: the temporal table size its context's last freed warp
	// left (any worker's; shard.warp)
	tslots *atomic.Int32
	// lanes: per worker, the accesses of each (object, kind) it analysed,
	// by object << 1 | kind; each worker writes its own row, the barriers
	// read them all (sample.go)
	lanes [][]int64
}

// tslotHint is the temporal table size hint of calling context ctx.
func (a *Analyzer) tslotHint(ctx uint32) *atomic.Int32 {
	h := a.tslotHints[ctx]
	if h == nil {
		if a.tslotHints == nil {
			a.tslotHints = map[uint32]*atomic.Int32{}
		}
		h = new(atomic.Int32)
		a.tslotHints[ctx] = h
	}
	return h
}

type kernAcc struct {
	time, launches, traced, graph, blocks, blocksTraced uint64
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

	modules   map[uint64]*modInfo
	trimmed   map[uint64]*rawstream.ModuleHash // MODULE_HASH frames by module id
	byContent map[uint64]*modInfo              // content key -> first module with its bytes
	hashes    map[profile.ModuleHash]bool
	funcs     []*funcInfo
	funcByID  map[uint32]*funcInfo
	byName    map[string]*funcInfo // functions of known modules, by name
	// launchedName: the function last launched under each name, for
	// samples that carry no launch and name a function id never launched
	// (launchedAs).
	launchedName map[string]*funcInfo
	unknownMod   *modInfo
	fsnap        *funcSnap
	fpending     []*funcInfo // reported since fsnap was built (funcSnapshot)

	ctxs     []*ctxInfo
	ctxByID  map[profile.NodeID]uint32
	stacks   map[string][]profile.Frame
	paths    map[string]pathEntry // by fn, its module and the host stack (launchPath)
	keyBuf   []byte
	launches map[uint64]*launchInfo // open launches by wire id
	bySeq    map[uint32]*launchInfo // launches whose spatial state is alive
	// spanHints: by calling context, the access records per traced warp
	// of its last traced launch that had any (spanFor); nextShard: the
	// first shard of the next narrow launch
	spanHints map[uint32]float64
	nextShard int
	// tslotHints: by calling context, the temporal table size its last
	// freed warp left (shard.warp), shared by the launches' workers
	tslotHints map[uint32]*atomic.Int32
	// levelHints: by calling context, the spatial sampling levels its
	// last launch ended with (sample.go)
	levelHints map[uint32][]uint8
	prefetched int   // module bytes whose kernels were prefetched (Options.PrefetchBytes)
	sampled    int   // (launch, object, kind) sampled (Busy)
	maxLevel   uint8 // the highest level (Busy)
	ended      []*launchInfo
	recent     map[uint64]uint32 // wire launch id -> ctx, for samples that come after KERNEL_END
	recentQ    []uint64
	nextSeq    uint32

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
	lanesTo      []int64 // dispatch's scratch: lanes of a frame per worker

	places map[uint64]*Placement
	ss     structState // waiting for structure (placement.go)

	orph orphans // kernels reported before their module (orphans.go)

	// time spent waiting for workers at barriers, resolving candidates,
	// building items and blocked on a full worker queue (Busy reports them)
	tWait, tResolve, tBuild, tBlocked, tMemBlocked time.Duration
	barriers, earlyBarriers                        int

	// per: the dispatcher's lists of the workers' records in a frame
	per []*[]recRef
	// sinks keeps the resolvers' loads that bring slots into the cache
	// (one per partition).
	sinks []uint64
	// scratch: per partition, the resolution's set of values of ended
	// launches; conflicted, the values found conflicting, and conflicts
	// their first conflicting candidates (resolve), kept from one barrier
	// to the next
	scratch, conflicted []pairSet
	conflicts           [][]*spEntry

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
		o.QueueDepth = 4
	}
	if o.SpatialKeep == 0 {
		o.SpatialKeep = spatialKeep
	}
	if o.ReuseSampling <= 0 {
		o.ReuseSampling = DefaultReuseSampling
	}
	a := &Analyzer{o: o, exit: -1, reusePeriod: uint32(o.ReuseSampling),
		modules: map[uint64]*modInfo{}, byContent: map[uint64]*modInfo{}, hashes: map[profile.ModuleHash]bool{},
		funcByID: map[uint32]*funcInfo{}, byName: map[string]*funcInfo{}, launchedName: map[string]*funcInfo{}, fsnap: &funcSnap{},
		ctxByID: map[profile.NodeID]uint32{}, stacks: map[string][]profile.Frame{}, paths: map[string]pathEntry{},
		launches: map[uint64]*launchInfo{}, bySeq: map[uint32]*launchInfo{}, recent: map[uint64]uint32{},
		objIdx: map[profile.ObjectID]uint32{}, osnap: &objSnap{},
		kern: map[uint32]*kernAcc{}, insts: map[instKey]*instAcc{}, stalls: map[uint32]string{}, first: map[objPCKey]uint64{},
		places: map[uint64]*Placement{}, orph: newOrphans(),
	}
	for i := range a.shards {
		a.shards[i] = newShard(i, o.HashValues)
	}
	a.sinks = make([]uint64, o.Workers)
	a.scratch, a.conflicted, a.conflicts = make([]pairSet, o.Workers), make([]pairSet, o.Workers), make([][]*spEntry, o.Workers)
	for w := 0; w < o.Workers; w++ {
		wk := &worker{id: w, n: o.Workers, a: a, in: make(chan msg, o.QueueDepth), pcs: map[uint64]*pcInfo{}, ratio: 1}
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
	case *rawstream.ModuleHash:
		if a.trimmed == nil {
			a.trimmed = map[uint64]*rawstream.ModuleHash{}
		}
		a.trimmed[f.ModuleID] = f
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
		if !l.structured {
			// Values are read by the access kinds of the function's code.
			l.structured = true
			a.awaitStructure(l.fn)
		}
		a.fseq++
		a.touch(l.ctx)
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
		a.Final()
	}
	return nil
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
	case a.trimmed[f.ModuleID] != nil && a.trimmed[f.ModuleID].ContentKey == f.ContentKey:
		// A trimmed capture: the bytes are gone, their hash stays (its
		// listings are found by it).
		m.hash = profile.ModuleHash(a.trimmed[f.ModuleID].Hash)
		a.byContent[f.ContentKey] = m
	default:
		// The bytes never came: the library's key stands in for the hash,
		// which then only this process agrees on.
		a.anomaly(off, f.Kind(), "module %d: content key %#x was never sent with bytes", f.ModuleID, f.ContentKey)
		m.hash = profile.ModuleHash(f.ContentKey)
	}
	a.modules[f.ModuleID] = m
	if !a.hashes[m.hash] {
		a.hashes[m.hash] = true
		if a.o.OnModule != nil && m.cubin != nil {
			a.o.OnModule(m.hash, m.cubin)
		}
		// At most four times PrefetchBytes in all: a framework that loads
		// hundreds of small modules eagerly does not disassemble them all.
		if p, ok := a.o.Structures.(structurePrefetcher); ok && m.cubin != nil && len(m.cubin) <= a.o.PrefetchBytes &&
			a.prefetched+len(m.cubin) <= 4*a.o.PrefetchBytes {
			a.prefetched += len(m.cubin)
			var sm uint16
			if a.hello != nil {
				sm = a.hello.SM
			}
			p.Prefetch(ModuleRef{Hash: m.hash, Cubin: m.cubin, SM: sm})
		}
	}
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
	if orphan {
		a.orphan(fi)
	} else {
		a.byName[f.Name] = fi
		a.resolveOrphans(fi)
	}
	m.funcs = append(m.funcs, f.Name)
	if f.PC != 0 && f.Size != 0 {
		// The snapshot launches take is rebuilt once at the next launch,
		// not per function: a framework module's thousands of FUNCTION
		// frames would otherwise copy and sort it thousands of times.
		a.fpending = append(a.fpending, fi)
	}
}

// funcSnapshot returns the functions by PC, with those reported since the
// last snapshot in place: a later function's range replaces the earlier
// ones it overlaps (a reloaded module).
func (a *Analyzer) funcSnapshot() *funcSnap {
	if len(a.fpending) == 0 {
		return a.fsnap
	}
	all := make([]*funcInfo, 0, len(a.fsnap.byPC)+len(a.fpending))
	all = append(append(all, a.fsnap.byPC...), a.fpending...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].pc < all[j].pc })
	overlap := false
	for i := 1; i < len(all) && !overlap; i++ {
		overlap = all[i-1].pc+uint64(all[i-1].size) > all[i].pc
	}
	if overlap { // rare: replay the insertions in order
		byPC := a.fsnap.byPC
		for _, fi := range a.fpending {
			n := make([]*funcInfo, 0, len(byPC)+1)
			for _, g := range byPC {
				if g.pc+uint64(g.size) <= fi.pc || g.pc >= fi.pc+uint64(fi.size) {
					n = append(n, g)
				}
			}
			byPC = append(n, fi)
			sort.Slice(byPC, func(i, j int) bool { return byPC[i].pc < byPC[j].pc })
		}
		all = byPC
	}
	a.fsnap, a.fpending = &funcSnap{byPC: all}, nil
	return a.fsnap
}

func (a *Analyzer) hostFrames(stack []uint64) []profile.Frame {
	k := a.stackKey(nil, stack)
	if fr, ok := a.stacks[string(k)]; ok {
		return fr
	}
	fr := a.o.Host.Frames(stack)
	if len(a.stacks) > 1<<16 {
		clear(a.stacks)
	}
	a.stacks[string(k)] = fr
	return fr
}

// stackKey is the words of head then of stack as bytes (in a buffer
// reused by the next call): a map key for them.
func (a *Analyzer) stackKey(head, stack []uint64) []byte {
	b := a.keyBuf[:0]
	for _, x := range head {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	for _, x := range stack {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	a.keyBuf = b
	return b
}

// launchPath is the calling context of a launch of fn from the host
// stack (kernelPath) and its node id. Programs launch from a few places,
// so each path is made once: a launch's host frames, kernel frame and
// path hash were most of the cost of a launch.
func (a *Analyzer) launchPath(stack []uint64, fn *funcInfo) ([]profile.Frame, profile.NodeID) {
	k := a.stackKey([]uint64{uint64(fn.idx), uint64(fn.mod.hash)}, stack)
	if p, ok := a.paths[string(k)]; ok && p.fn == fn && p.mod == fn.mod.hash {
		return p.frames, p.id
	}
	key := string(k) // before hostFrames reuses the key's buffer
	frames := kernelPath(a.hostFrames(stack), fn)
	id := pathID(frames)
	if len(a.paths) > 1<<16 {
		clear(a.paths)
	}
	a.paths[key] = pathEntry{fn: fn, mod: fn.mod.hash, frames: frames, id: id}
	return frames, id
}

// pathEntry is a path launchPath made.
type pathEntry struct {
	fn     *funcInfo
	mod    profile.ModuleHash
	frames []profile.Frame
	id     profile.NodeID
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

// kernelPath is a launch's calling context: its host frames, then its
// kernel (module content hash and name).
func kernelPath(host []profile.Frame, fn *funcInfo) []profile.Frame {
	return append(append(make([]profile.Frame, 0, len(host)+1), host...), profile.Frame{Kind: profile.KindKernel, Module: fn.mod.hash.String(), Function: fn.name})
}

// context returns the context of a path, made on first use with its
// shared and local pseudo objects.
func (a *Analyzer) context(frames []profile.Frame, fn *funcInfo) uint32 {
	return a.contextAt(frames, pathID(frames), fn)
}

// contextAt is context, with the path's node id given.
func (a *Analyzer) contextAt(frames []profile.Frame, id profile.NodeID, fn *funcInfo) uint32 {
	if ci, ok := a.ctxByID[id]; ok {
		return ci
	}
	ci := uint32(len(a.ctxs))
	c := &ctxInfo{frames: frames, fn: fn}
	c.shared = a.newObj(profile.SpaceObjectID(id, uint8(rawstream.SpaceShared)), frames, 0, uint8(rawstream.SpaceShared))
	c.local = a.newObj(profile.SpaceObjectID(id, uint8(rawstream.SpaceLocal)), frames, 0, uint8(rawstream.SpaceLocal))
	a.ctxs = append(a.ctxs, c)
	a.ctxByID[id] = ci
	if fn.orphan && fn.real == nil {
		a.orph.prov[fn.name] = append(a.orph.prov[fn.name], ci)
	}
	return ci
}

func (a *Analyzer) launch(f *rawstream.Launch, off int64) {
	fn := a.fn(f.FunctionID)
	if fn == nil {
		a.anomaly(off, f.Kind(), "launch %d: function %d unknown", f.LaunchID, f.FunctionID)
		return
	}
	a.requestStructure(fn)
	frames, id := a.launchPath(f.Host, fn)
	ci := a.contextAt(frames, id, fn)
	c := a.ctxs[ci]
	fn.ctx, fn.hasCtx = ci, true
	if a.hello == nil || a.hello.Mode != rawstream.ModeRedundancy {
		// Only PC sampling and instruction counts carry samples without
		// a launch (launchedAs, sampleSplit).
		a.launchedName[fn.name] = fn
		if fn.split == nil {
			fn.split = newSampleSplit()
		}
		fn.split.launched(ci, f.Blocks()*uint64(f.Block[0])*uint64(f.Block[1])*uint64(f.Block[2]))
	}
	a.touch(ci)
	if old := a.launches[f.LaunchID]; old != nil {
		a.anomaly(off, f.Kind(), "launch id %d reused before its KERNEL_END", f.LaunchID)
		a.endLaunch(old)
	}
	a.nextSeq++
	l := &launchInfo{seq: a.nextSeq, wireID: f.LaunchID, fn: fn, ctx: ci, objs: a.osnap, funcs: a.funcSnapshot(),
		shared: c.shared, local: c.local, instrumented: f.Instrumented, seen: make([]map[uint32]*valSet, len(a.workers)),
		levels: a.startLevels(ci), lanes: make([][]int64, len(a.workers)), tslots: a.tslotHint(ci)}
	blocks, warps := a.tracedBlocks(f)
	l.tracedWarps = blocks * warps
	l.span, l.shardBase = a.spanFor(ci, l.tracedWarps)
	l.narrow = l.span < numShards
	l.groups = laneGroupsFor(l.tracedWarps, l.span)
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
	if f.Graph {
		ka.graph++
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
	if l.recs > 0 && l.tracedWarps > 0 {
		if a.spanHints == nil {
			a.spanHints = map[uint32]float64{}
		}
		a.spanHints[l.ctx] = float64(l.recs) / float64(l.tracedWarps)
	}
	delete(a.launches, l.wireID)
	l.ended = true
	a.ended = append(a.ended, l)
	l.wunits, l.bunits = warpUnits{}, nil
	// Only the workers given its records hold state of the launch.
	for i, w := range a.workers {
		if sentTo(l.sent, i) {
			w.endLaunch(l)
		}
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
	a.touch(l.ctx)
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

// launchedAs is the function whose launches place samples of fn that carry
// no launch: fn itself, or, if fn was never launched, the function last
// launched under its name. The CUPTI pass names a launch's function by
// name and a sample's by its module's CRC, so where two loaded modules
// hold a function of one name (a framework's JIT modules), the samples of
// the one launched can name the other; serialized collection placed them
// at their launch, and continuous collection places them so too.
func (a *Analyzer) launchedAs(launch uint64, fn *funcInfo) *funcInfo {
	if launch != 0 || fn.hasCtx {
		return fn
	}
	if alt := a.launchedName[fn.name]; alt != nil {
		return alt
	}
	return fn
}

// splitting says whether samples of fn that carry launch id launch are
// split over its contexts (sampleSplit): they carry no launch and fn was
// launched from several. The shares are set at the first of a frame's.
func (a *Analyzer) splitting(launch uint64, fn *funcInfo, begun *map[*funcInfo]bool) bool {
	if launch != 0 || fn.split == nil || !fn.split.several() {
		return false
	}
	if !(*begun)[fn] {
		if *begun == nil {
			*begun = map[*funcInfo]bool{}
		}
		fn.split.begin()
		(*begun)[fn] = true
	}
	return true
}

func (a *Analyzer) pcSamples(f *rawstream.PCSamples, off int64) {
	var begun map[*funcInfo]bool // the functions whose shares are set for this frame
	for _, s := range f.PCs {
		fn := a.fn(s.FunctionID)
		if fn == nil {
			a.anomaly(off, f.Kind(), "function %d unknown", s.FunctionID)
			continue
		}
		by := a.launchedAs(f.LaunchID, fn)
		if a.splitting(f.LaunchID, by, &begun) {
			a.requestStructure(fn)
			for _, st := range s.Stalls {
				name := a.stallName(st.Reason)
				by.split.take(uint64(st.Samples), func(ctx uint32, k uint64) {
					a.touch(ctx)
					a.instAcc(ctx, fn, s.Offset).addStall(name, k)
				})
			}
			continue
		}
		ctx, ok := a.sampleCtx(f.LaunchID, by)
		if !ok {
			a.anomaly(off, f.Kind(), "samples of %s with no launch of it", fn.name)
			continue
		}
		a.requestStructure(fn)
		a.touch(ctx)
		ia := a.instAcc(ctx, fn, s.Offset)
		for _, st := range s.Stalls {
			ia.addStall(a.stallName(st.Reason), uint64(st.Samples))
		}
	}
}

func (a *Analyzer) stallName(reason uint32) string {
	if name, ok := a.stalls[reason]; ok {
		return name
	}
	return fmt.Sprintf("reason_%d", reason)
}

func (ia *instAcc) addStall(name string, n uint64) {
	if ia.stalls == nil {
		ia.stalls = map[string]uint64{}
	}
	ia.stalls[name] += n
	// CUPTI's _not_issued variants are a subset of their reason's samples
	// (those taken when the scheduler issued nothing), and its
	// sample_count/samples_data_dropped are not reasons.
	if strings.HasPrefix(name, "smsp__pcsamp_warps_issue_stalled_") && !strings.HasSuffix(name, "_not_issued") || !strings.HasPrefix(name, "smsp__pcsamp_") {
		ia.samples += n
	}
}

func (a *Analyzer) instrCounts(f *rawstream.InstrCounts, off int64) {
	var begun map[*funcInfo]bool // the functions whose shares are set for this frame
	for _, c := range f.Counts {
		fn := a.fn(c.FunctionID)
		if fn == nil {
			a.anomaly(off, f.Kind(), "function %d unknown", c.FunctionID)
			continue
		}
		by := a.launchedAs(f.LaunchID, fn)
		if c.Executed > 0 && a.splitting(f.LaunchID, by, &begun) {
			// Both counts by the same shares: each context keeps the
			// instruction's threads per execution.
			a.requestStructure(fn)
			by.split.take(c.Executed, func(ctx uint32, k uint64) {
				a.touch(ctx)
				ia := a.instAcc(ctx, fn, c.Offset)
				ia.executed += k
				ia.threads += uint64(float64(c.ThreadExecuted) * float64(k) / float64(c.Executed))
			})
			continue
		}
		ctx, ok := a.sampleCtx(f.LaunchID, by)
		if !ok {
			a.anomaly(off, f.Kind(), "counts of %s with no launch of it", fn.name)
			continue
		}
		a.requestStructure(fn)
		a.touch(ctx)
		ia := a.instAcc(ctx, fn, c.Offset)
		ia.executed += c.Executed
		ia.threads += c.ThreadExecuted
	}
}
