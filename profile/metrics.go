package profile

import (
	"math"
	"math/bits"
	"sort"
	"strings"
	"sync"
)

// MetricID is a process-local handle of a metric name. Names are what
// travel: encodings write the name table, so ids never leave a process.
type MetricID uint32

var registry struct {
	sync.RWMutex
	ids   map[string]MetricID
	names []string
}

// Metric returns the id of name, registering it on first use.
func Metric(name string) MetricID {
	registry.RLock()
	id, ok := registry.ids[name]
	registry.RUnlock()
	if ok {
		return id
	}
	registry.Lock()
	defer registry.Unlock()
	if id, ok := registry.ids[name]; ok {
		return id
	}
	if registry.ids == nil {
		registry.ids = map[string]MetricID{}
	}
	id = MetricID(len(registry.names))
	registry.names = append(registry.names, name)
	registry.ids[name] = id
	return id
}

// Name returns the metric's name.
func (m MetricID) Name() string {
	registry.RLock()
	defer registry.RUnlock()
	if int(m) < len(registry.names) {
		return registry.names[m]
	}
	return "?"
}

// Well-known metrics. Stall reasons are "stall.<reason>" with CUPTI's reason
// name less its "smsp__pcsamp_warps_issue_stalled_" prefix.
var (
	GPUTime        = Metric("gpu.time_ns")         // kernel execution time
	GPULaunches    = Metric("gpu.launches")        // kernel launches
	GPUTraced      = Metric("gpu.launches_traced") // launches instrumented (kernel sampling)
	GPUGraph       = Metric("gpu.launches_graph")  // launches as kernel nodes of CUDA graph launches
	GPUBlocks      = Metric("gpu.blocks")          // blocks launched
	GPUBlocksTrace = Metric("gpu.blocks_traced")   // blocks traced (block sampling)
	InstSamples    = Metric("inst.samples")        // PC samples, all reasons
	InstExecuted   = Metric("inst.executed")       // warp-level executions (hybrid mode)
	MemLoads       = Metric("mem.loads")           // lane loads measured
	MemStores      = Metric("mem.stores")          // lane stores measured
	RedTempLoad    = Metric("red.temporal.load")   // temporally redundant loads (III.1)
	RedTempStore   = Metric("red.temporal.store")  // temporally redundant stores (III.2)
	RedSpatLoad    = Metric("red.spatial.load")    // spatially redundant loads (III.3)
	RedSpatStore   = Metric("red.spatial.store")   // spatially redundant stores (III.4)
	MemWarpAccess  = Metric("mem.warp_accesses")   // warp-level memory instructions traced
	MemSectors     = Metric("mem.sectors")         // distinct 32-byte sectors touched by them
	AllocBytes     = Metric("alloc.bytes")
	AllocCount     = Metric("alloc.count")
)

// The launch configuration of a kernel context, summed over its launches
// (so ranks and items merge by addition like every other metric): the
// collector writes them, the analysis divides by gpu.launches (or
// launch.with_attrs) for means.
var (
	LaunchBlockThreads  = Metric("launch.block_threads")  // threads per block
	LaunchGridBlocks    = Metric("launch.grid_blocks")    // blocks per grid
	LaunchSharedDynamic = Metric("launch.shared_dynamic") // dynamic shared memory bytes per block
	LaunchWithAttrs     = Metric("launch.with_attrs")     // launches whose function's cubin attributes are known
	LaunchRegs          = Metric("launch.regs")           // registers per thread (cubin)
	LaunchSharedStatic  = Metric("launch.shared_static")  // static shared memory bytes per block (cubin)
	LaunchFrameBytes    = Metric("launch.frame_bytes")    // local stack bytes per thread (cubin): spill slots
	LaunchMaxRegs       = Metric("launch.max_regs")       // register limit the compiler was given (cubin, 0 if none)
)

// TimeMetric reports whether m is the kernel time or derived from it (the
// collector's per-instance squares and histogram, "gpu.time_*"): what a
// pass whose times are not to be kept drops together.
func TimeMetric(m MetricID) bool {
	return m == GPUTime || strings.HasPrefix(m.Name(), "gpu.time_")
}

// StallPrefix starts every stall-reason metric name.
const StallPrefix = "stall."

// StallMetric returns the metric of a CUPTI stall reason name.
func StallMetric(cuptiName string) MetricID {
	n := strings.TrimPrefix(cuptiName, "smsp__pcsamp_warps_issue_stalled_")
	n = strings.TrimPrefix(n, "smsp__pcsamp_")
	return Metric(StallPrefix + n)
}

// MV is one metric value.
type MV struct {
	ID MetricID
	V  uint64
}

// Values is a sparse set of metric values sorted by id; it stays small
// (a handful per node), so a sorted slice beats a map.
type Values []MV

// Get returns the value of m (0 if absent).
func (vs Values) Get(m MetricID) uint64 {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].ID >= m })
	if i < len(vs) && vs[i].ID == m {
		return vs[i].V
	}
	return 0
}

// Add returns vs with v added to m.
func (vs Values) Add(m MetricID, v uint64) Values {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].ID >= m })
	if i < len(vs) && vs[i].ID == m {
		vs[i].V += v
		return vs
	}
	vs = append(vs, MV{})
	copy(vs[i+1:], vs[i:])
	vs[i] = MV{m, v}
	return vs
}

// AddAll returns vs with every value of o added.
func (vs Values) AddAll(o Values) Values {
	if len(o) == 0 {
		return vs
	}
	if len(vs) == 0 {
		return o.Clone()
	}
	if sameIDs(vs, o) { // the common case: same metrics on both sides
		for i := range vs {
			vs[i].V += o[i].V
		}
		return vs
	}
	out := make(Values, 0, len(vs)+len(o))
	i, j := 0, 0
	for i < len(vs) || j < len(o) {
		switch {
		case j == len(o) || (i < len(vs) && vs[i].ID < o[j].ID):
			out = append(out, vs[i])
			i++
		case i == len(vs) || o[j].ID < vs[i].ID:
			out = append(out, o[j])
			j++
		default:
			out = append(out, MV{vs[i].ID, vs[i].V + o[j].V})
			i++
			j++
		}
	}
	return out
}

func sameIDs(a, b Values) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID {
			return false
		}
	}
	return true
}

// Clone copies vs.
func (vs Values) Clone() Values {
	if vs == nil {
		return nil
	}
	return append(Values(nil), vs...)
}

// Summary is a mergeable cross-rank summary of one metric at one node over
// the ranks that have a nonzero value there. It keeps exact integer power
// sums rather than a floating mean and M2, so merging is exactly
// associative and commutative; Mean and M2 are derived.
type Summary struct {
	N              uint64 // ranks with a nonzero value
	Sum            uint64
	SumSqHi        uint64 // sum of squares, 128 bits
	SumSqLo        uint64
	Min, Max       uint64
	ArgMin, ArgMax int32 // ranks of Min and Max (lowest rank on ties)
}

// One returns the summary of a single rank's value.
func One(rank int32, v uint64) Summary {
	hi, lo := bits.Mul64(v, v)
	return Summary{N: 1, Sum: v, SumSqHi: hi, SumSqLo: lo, Min: v, Max: v, ArgMin: rank, ArgMax: rank}
}

// Merge combines two summaries of disjoint rank sets.
func (s Summary) Merge(o Summary) Summary {
	if s.N == 0 {
		return o
	}
	if o.N == 0 {
		return s
	}
	r := Summary{N: s.N + o.N, Sum: s.Sum + o.Sum}
	var c uint64
	r.SumSqLo, c = bits.Add64(s.SumSqLo, o.SumSqLo, 0)
	r.SumSqHi, _ = bits.Add64(s.SumSqHi, o.SumSqHi, c)
	r.Min, r.ArgMin = s.Min, s.ArgMin
	if o.Min < s.Min || (o.Min == s.Min && o.ArgMin < s.ArgMin) {
		r.Min, r.ArgMin = o.Min, o.ArgMin
	}
	r.Max, r.ArgMax = s.Max, s.ArgMax
	if o.Max > s.Max || (o.Max == s.Max && o.ArgMax < s.ArgMax) {
		r.Max, r.ArgMax = o.Max, o.ArgMax
	}
	return r
}

// Mean is the mean over the N ranks with a value.
func (s Summary) Mean() float64 {
	if s.N == 0 {
		return 0
	}
	return float64(s.Sum) / float64(s.N)
}

// M2 is the sum of squared deviations from the mean (Welford's M2).
func (s Summary) M2() float64 {
	if s.N == 0 {
		return 0
	}
	sq := float64(s.SumSqHi)*math.Exp2(64) + float64(s.SumSqLo)
	m2 := sq - float64(s.Sum)*float64(s.Sum)/float64(s.N)
	if m2 < 0 { // rounding
		return 0
	}
	return m2
}

// Stddev is the population standard deviation over the N ranks.
func (s Summary) Stddev() float64 {
	if s.N == 0 {
		return 0
	}
	return math.Sqrt(s.M2() / float64(s.N))
}

// OverRanks returns the summary as if ranks−N further ranks had value 0
// (a context absent on a rank counts as zero there). Their identity is not
// kept, so ArgMin is -1 when a zero rank is the minimum.
func (s Summary) OverRanks(ranks uint64) Summary {
	if ranks <= s.N {
		return s
	}
	r := s
	r.N = ranks
	r.Min, r.ArgMin = 0, -1
	if s.N == 0 {
		r.Max, r.ArgMax = 0, -1
	}
	return r
}

// MS is one metric's summary.
type MS struct {
	ID MetricID
	S  Summary
}

// Summaries is a sparse set of summaries sorted by metric id.
type Summaries []MS

// Get returns the summary of m.
func (ss Summaries) Get(m MetricID) Summary {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].ID >= m })
	if i < len(ss) && ss[i].ID == m {
		return ss[i].S
	}
	return Summary{}
}

// MergeAll returns ss combined with o.
func (ss Summaries) MergeAll(o Summaries) Summaries {
	if len(o) == 0 {
		return ss
	}
	if len(ss) == 0 {
		return append(Summaries(nil), o...)
	}
	if len(ss) == len(o) {
		same := true
		for i := range ss {
			if ss[i].ID != o[i].ID {
				same = false
				break
			}
		}
		if same {
			for i := range ss {
				ss[i].S = ss[i].S.Merge(o[i].S)
			}
			return ss
		}
	}
	out := make(Summaries, 0, len(ss)+len(o))
	i, j := 0, 0
	for i < len(ss) || j < len(o) {
		switch {
		case j == len(o) || (i < len(ss) && ss[i].ID < o[j].ID):
			out = append(out, ss[i])
			i++
		case i == len(ss) || o[j].ID < ss[i].ID:
			out = append(out, o[j])
			j++
		default:
			out = append(out, MS{ss[i].ID, ss[i].S.Merge(o[j].S)})
			i++
			j++
		}
	}
	return out
}

// FromValues returns the summaries of one rank's values.
func FromValues(rank int32, vs Values) Summaries {
	out := make(Summaries, 0, len(vs))
	for _, v := range vs {
		if v.V != 0 {
			out = append(out, MS{v.ID, One(rank, v.V)})
		}
	}
	return out
}
