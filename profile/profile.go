// Package profile is the data model every gpuprof stage shares: the
// calling-context tree (host frames down to GPU instructions) with sparse
// metrics and cross-rank summaries, GVProf's redundancy tables, data objects,
// GPU modules and per-rank provenance, plus the merge algebra and the batch
// encoding.
//
// A Profile is a sum of items, one item per published batch, named by
// (rank, sequence). Merge is associative, commutative and idempotent over
// those items: the set of merged items is kept as a roaring bitmap per rank,
// an item already present is ignored, and every value is an integer (or an
// exact integer moment), so any grouping and order of merges gives the same
// profile and byte-identical encodings.
package profile

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cespare/xxhash/v2"
)

// NodeID names a calling context: xxhash64 of the parent's id and the frame,
// so the same context gets the same id on every rank.
type NodeID uint64

// RootID is the id of the tree's root (the whole program).
const RootID NodeID = 0

// NodeKind says what a calling-context node stands for.
type NodeKind uint8

const (
	KindRoot        NodeKind = iota
	KindHostFrame            // a host function at a call site (module, function, file, line)
	KindKernel               // a GPU kernel launched from its host parent (module hash, function)
	KindGPUFunction          // a GPU device function called from the kernel (or the kernel body)
	KindInlined              // an inlined GPU frame (function, call-site file:line)
	KindLoop                 // a loop in GPU code (header file:line, header offset)
	KindLine                 // a source line in GPU code
	KindInstruction          // a GPU instruction (offset in its function)
	numKinds
)

var kindNames = [...]string{"root", "host", "kernel", "gpufunc", "inlined", "loop", "line", "inst"}

func (k NodeKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Frame is what a node adds to its parent's context.
type Frame struct {
	Kind     NodeKind
	Module   string // host: module path; GPU: module content hash (hex)
	Function string // mangled name where known
	File     string
	Line     uint32
	// Offset: host frames that could not be symbolised keep their
	// module-relative address here; GPU instructions and loops their offset
	// in the function.
	Offset uint64
}

// ChildID is the id of the context made by appending f to parent.
func ChildID(parent NodeID, f Frame) NodeID {
	var buf [64]byte
	b := binary.LittleEndian.AppendUint64(buf[:0], uint64(parent))
	b = append(b, byte(f.Kind))
	b = append(b, f.Module...)
	b = append(b, 0)
	b = append(b, f.Function...)
	b = append(b, 0)
	b = append(b, f.File...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, f.Line)
	b = binary.LittleEndian.AppendUint64(b, f.Offset)
	id := NodeID(xxhash.Sum64(b))
	if id == RootID { // keep the root's id unique
		id = 1
	}
	return id
}

// Node is one calling context.
type Node struct {
	ID      NodeID
	Parent  NodeID
	Frame   Frame
	Metrics Values // exclusive values summed over all merged items
}

// ModuleHash is a GPU module's content hash (xxhash64 of the cubin bytes).
type ModuleHash uint64

func (h ModuleHash) String() string { return fmt.Sprintf("%016x", uint64(h)) }

// Module is a GPU module known by content; its bytes and parsed structure
// travel separately (object store), keyed by Hash.
type Module struct {
	Hash ModuleHash
	Size uint64
	Name string // a readable name (first seen file or embedding binary)
	SM   uint16 // compute capability × 10
}

// FuncID names a GPU function: xxhash64 of its module hash and name.
type FuncID uint64

// Func is a GPU function of a module.
type Func struct {
	ID     FuncID
	Module ModuleHash
	Name   string // mangled
}

// FuncIDOf gives the id of function name in module m.
func FuncIDOf(m ModuleHash, name string) FuncID {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(m))
	d := xxhash.New()
	d.Write(buf[:])
	d.WriteString(name)
	return FuncID(d.Sum64())
}

// PC is a GPU instruction, normalised so every rank agrees: a function and
// the offset nvdisasm prints.
type PC struct {
	Func   FuncID
	Offset uint32
}

// Access tells loads from stores.
type Access uint8

const (
	Load Access = iota
	Store
)

func (a Access) String() string {
	if a == Load {
		return "load"
	}
	return "store"
}

// TemporalKey is a GVProf temporal redundancy pair <PC_old, PC_new> within a
// kernel launch context (definitions III.1-III.2).
type TemporalKey struct {
	Context NodeID // the kernel node
	Old     PC
	New     PC
	Access  Access
}

// ObjectID names a data object by its allocation context and size, so the
// same allocation on every rank is one object.
type ObjectID uint64

// ObjectIDOf is the id of an object allocated at ctx with size bytes.
func ObjectIDOf(ctx NodeID, size uint64) ObjectID {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(ctx))
	binary.LittleEndian.PutUint64(buf[8:], size)
	return ObjectID(xxhash.Sum64(buf[:]))
}

// SpatialKey is a GVProf spatial redundancy pair <data object, PC> within a
// kernel launch context (definitions III.3-III.4).
type SpatialKey struct {
	Context NodeID
	Object  ObjectID
	PC      PC
	Access  Access
}

// DataObject is an allocation site; Count allocations of Size bytes were
// made there (summed over items).
type DataObject struct {
	ID      ObjectID
	Context NodeID // allocation calling context (host frames)
	Size    uint64
	Count   uint64
	// Space: 0 device memory; shared and local memory get pseudo objects
	// per kernel (Space 2, 3) so that their accesses are not dropped.
	Space uint8
}

// PCKey names the per-instruction statistics of one access kind.
type PCKey struct {
	Context NodeID
	PC      PC
	Access  Access
}

// PCStat holds per-instruction access statistics (what eq. 1 divides by)
// and, when the analysis keeps them, value statistics.
type PCStat struct {
	Accesses uint64 // lane accesses measured (sampled)
	Values   *ValueSketch
}

// ObjectKey names per-object access statistics of one access kind.
type ObjectKey struct {
	Context NodeID
	Object  ObjectID
	Access  Access
}

// ObjectStat holds per-object access statistics (eq. 2 divides by Accesses).
type ObjectStat struct {
	Accesses uint64
	Values   *ValueSketch
}

// RankInfo is a rank's provenance. Counters add over the rank's items.
type RankInfo struct {
	Rank    int32
	Host    string
	GPU     string
	GPUUUID string
	// Device is the CUDA device ordinal the rank used on its host ("" if
	// unknown; a set, like the strings below, when passes differ).
	Device string
	// Props are the GPU's properties as read from the device (zero when
	// the stream did not carry them).
	Props   GPUProps
	Driver  string
	CUDA    string
	Mode    string // redundancy, pcsampling, hybrid, or a '+'-joined set after merging passes
	Source  string // "captured" or "synthetic"
	BlockP  uint32 // block sampling period
	KernelK uint32 // kernel sampling period
	// ReuseP: reuse distances were measured in one traced block in ReuseP
	// of each launch (0 or 1: every block).
	ReuseP uint32
	// SpatialLevel: the highest level at which the spatial redundancy's
	// values were sampled by hash (one value in 2^SpatialLevel followed,
	// its first occurrences counted 2^SpatialLevel times); 0: every value
	// followed, the counts exact.
	SpatialLevel uint32
	Launches     uint64
	// LaunchesTraced counts launches chosen by kernel sampling.
	LaunchesTraced uint64
	Blocks         uint64
	BlocksTraced   uint64
	Records        uint64 // access records analysed
	Dropped        uint64 // records lost on the device
	HostDropped    uint64 // records lost in the library's host queue
	// SamplesDropped counts PC samples the GPU's sampling hardware
	// dropped (its buffer was full): stall shares are then measured on
	// fewer samples than were taken.
	SamplesDropped uint64
	// Batches is the rank's data batch count, known once its done item
	// (sequence Batches) is merged; -1 before.
	Batches    int64
	ExitCode   int32
	Incomplete string // why the rank's data is incomplete ("" if complete)
	// PCSampling says, for a rank measured with PC sampling, whether its
	// GPU was sampled in this rank ("sampled"), or why not (one process
	// per GPU can be; the others give kernel times only).
	PCSampling string
}

// GPUProps are a GPU's properties as read from the device at run time.
type GPUProps struct {
	SMs, ClockKHz, MemClockKHz, MemBusBits, L2Bytes, RegsPerSM, SharedPerSM, ThreadsPerSM uint32
	MemBytes                                                                              uint64
}

// fields lists the properties in their encoding order.
func (g *GPUProps) fields() []*uint32 {
	return []*uint32{&g.SMs, &g.ClockKHz, &g.MemClockKHz, &g.MemBusBits, &g.L2Bytes, &g.RegsPerSM, &g.SharedPerSM, &g.ThreadsPerSM}
}

// Profile is the whole model. The zero value is not usable: call New.
type Profile struct {
	Job string
	// Items: per rank, the sequence numbers merged into this profile.
	Items   map[int32]*roaring.Bitmap
	Nodes   map[NodeID]*Node
	Modules map[ModuleHash]*Module
	Funcs   map[FuncID]*Func
	Objects map[ObjectID]*DataObject
	// Temporal and Spatial count redundant accesses per pair.
	Temporal map[TemporalKey]uint64
	Spatial  map[SpatialKey]uint64
	PCs      map[PCKey]*PCStat
	ObjStats map[ObjectKey]*ObjectStat
	Ranks    map[int32]*RankInfo
	// Summaries: per node, cross-rank summaries of its metrics over the
	// sealed ranks (those whose every item is merged).
	Summaries map[NodeID]Summaries
	// Open: per rank not yet sealed, its own node values, kept until the
	// rank is sealed and folded into Summaries.
	Open map[int32]map[NodeID]Values
	// PerRank keeps each rank's values at launch contexts (host frames and
	// kernel nodes), small enough to keep for every rank; it feeds the
	// per-rank views (heatmaps, per-rank hpcviewer profiles).
	PerRank map[int32]map[NodeID]Values
	// Synthetic is set if any merged item came from generated data.
	Synthetic bool
	// Interrupted names the signal that cut the job short ("SIGTERM"), ""
	// if it ran to its end: the profile holds what was merged by then.
	Interrupted string
}

// New returns an empty profile of job.
func New(job string) *Profile {
	p := &Profile{Job: job}
	p.init()
	return p
}

func (p *Profile) init() {
	p.Items = map[int32]*roaring.Bitmap{}
	p.Nodes = map[NodeID]*Node{RootID: {ID: RootID, Parent: RootID, Frame: Frame{Kind: KindRoot}}}
	p.Modules = map[ModuleHash]*Module{}
	p.Funcs = map[FuncID]*Func{}
	p.Objects = map[ObjectID]*DataObject{}
	p.Temporal = map[TemporalKey]uint64{}
	p.Spatial = map[SpatialKey]uint64{}
	p.PCs = map[PCKey]*PCStat{}
	p.ObjStats = map[ObjectKey]*ObjectStat{}
	p.Ranks = map[int32]*RankInfo{}
	p.Summaries = map[NodeID]Summaries{}
	p.Open = map[int32]map[NodeID]Values{}
	p.PerRank = map[int32]map[NodeID]Values{}
}

// Child returns the child of parent with frame f, creating it if needed.
func (p *Profile) Child(parent NodeID, f Frame) *Node {
	id := ChildID(parent, f)
	if n, ok := p.Nodes[id]; ok {
		return n
	}
	n := &Node{ID: id, Parent: parent, Frame: f}
	p.Nodes[id] = n
	return n
}

// Path returns the node reached from the root through frames.
func (p *Profile) Path(frames ...Frame) *Node {
	id := RootID
	n := p.Nodes[RootID]
	for _, f := range frames {
		n = p.Child(id, f)
		id = n.ID
	}
	return n
}

// Add adds v to metric m of node n (exclusive).
func (p *Profile) Add(n NodeID, m MetricID, v uint64) {
	if v == 0 {
		return
	}
	node := p.Nodes[n]
	node.Metrics = node.Metrics.Add(m, v)
}

// AddModule records a GPU module (idempotent).
func (p *Profile) AddModule(m Module) *Module {
	if old, ok := p.Modules[m.Hash]; ok {
		return old
	}
	mm := m
	p.Modules[m.Hash] = &mm
	return &mm
}

// AddFunc records a GPU function and returns its id.
func (p *Profile) AddFunc(m ModuleHash, name string) FuncID {
	id := FuncIDOf(m, name)
	if _, ok := p.Funcs[id]; !ok {
		p.Funcs[id] = &Func{ID: id, Module: m, Name: name}
	}
	return id
}

// PCStatOf returns (creating) the statistics of k.
func (p *Profile) PCStatOf(k PCKey) *PCStat {
	s := p.PCs[k]
	if s == nil {
		s = &PCStat{}
		p.PCs[k] = s
	}
	return s
}

// ObjStatOf returns (creating) the statistics of k.
func (p *Profile) ObjStatOf(k ObjectKey) *ObjectStat {
	s := p.ObjStats[k]
	if s == nil {
		s = &ObjectStat{}
		p.ObjStats[k] = s
	}
	return s
}

// Rank returns (creating) the provenance of rank r.
func (p *Profile) Rank(r int32) *RankInfo {
	ri := p.Ranks[r]
	if ri == nil {
		ri = &RankInfo{Rank: r, Batches: -1, ExitCode: -1}
		p.Ranks[r] = ri
	}
	return ri
}

// SortedNodeIDs returns the node ids in ascending order (deterministic walks).
func (p *Profile) SortedNodeIDs() []NodeID {
	ids := make([]NodeID, 0, len(p.Nodes))
	for id := range p.Nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// SortedRanks returns the ranks with provenance, ascending.
func (p *Profile) SortedRanks() []int32 {
	rs := make([]int32, 0, len(p.Ranks))
	for r := range p.Ranks {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// Children returns the children of every node, each list sorted by id.
func (p *Profile) Children() map[NodeID][]NodeID {
	ch := map[NodeID][]NodeID{}
	for _, id := range p.SortedNodeIDs() {
		if id == RootID {
			continue
		}
		par := p.Nodes[id].Parent
		ch[par] = append(ch[par], id)
	}
	return ch
}

// Inclusive returns every node's inclusive values (its own plus its
// descendants').
func (p *Profile) Inclusive() map[NodeID]Values {
	inc := make(map[NodeID]Values, len(p.Nodes))
	ch := p.Children()
	var walk func(id NodeID) Values
	walk = func(id NodeID) Values {
		v := p.Nodes[id].Metrics.Clone()
		for _, c := range ch[id] {
			v = v.AddAll(walk(c))
		}
		inc[id] = v
		return v
	}
	walk(RootID)
	return inc
}

// Depth returns the number of ancestors of id (the root has 0).
func (p *Profile) Depth(id NodeID) int {
	d := 0
	for id != RootID {
		n, ok := p.Nodes[id]
		if !ok {
			return d
		}
		id = n.Parent
		d++
	}
	return d
}

// KernelOf returns the kernel node enclosing id (id itself if it is one),
// or RootID if none.
func (p *Profile) KernelOf(id NodeID) NodeID {
	for id != RootID {
		n, ok := p.Nodes[id]
		if !ok {
			return RootID
		}
		if n.Frame.Kind == KindKernel {
			return id
		}
		id = n.Parent
	}
	return RootID
}

// IsLaunchContext reports whether per-rank values are kept at nodes of kind k.
func IsLaunchContext(k NodeKind) bool { return k == KindHostFrame || k == KindKernel }

// MergedItems returns the number of (rank, sequence) items merged.
func (p *Profile) MergedItems() uint64 {
	var n uint64
	for _, b := range p.Items {
		n += b.GetCardinality()
	}
	return n
}
