// Package synth writes realistic raw record streams (docs/wire.md) without a
// GPU: a program shaped like testdata/sass/probe/k.cu, run by N MPI ranks,
// with several kernels launched from several host call paths, allocations,
// warp-level access records whose values follow chosen patterns, PC samples
// with CUPTI's stall reason names or instruction counts, and kernel ends
// with sampled and total block counts. Streams are marked synthetic (HELLO
// flag bit 0) and are a pure function of the options and the rank.
package synth

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"gpuprof/collector/rawstream"
)

// Pattern says how generated values are chosen.
type Pattern uint8

const (
	PatternDefault  Pattern = iota // each object and store keeps the program's own pattern
	PatternSingle                  // one value everywhere
	PatternDominant                // one value 90% of the time
	PatternFew                     // eight distinct values
	PatternClose                   // floats within 1e-3 of each other
	PatternRandom                  // uniformly random bits
	PatternIndex                   // the element index
	PatternPlanted                 // PlantedInt and PlantedFloat everywhere: a value tests look for in outputs
)

// The planted values: distinctive bit patterns, unlikely anywhere else in
// a profile or report (tests of --no-values look for them byte by byte).
const (
	PlantedInt   = 0x5EC2E7ED
	PlantedFloat = 4242.4242
)

var patternNames = [...]string{"default", "single", "dominant", "few", "close", "random", "index", "planted"}

func (p Pattern) String() string {
	if int(p) < len(patternNames) {
		return patternNames[p]
	}
	return fmt.Sprintf("pattern(%d)", uint8(p))
}

// ParsePattern is the inverse of Pattern.String.
func ParsePattern(s string) (Pattern, error) {
	for i, n := range patternNames {
		if n == s {
			return Pattern(i), nil
		}
	}
	return 0, fmt.Errorf("synth: unknown value pattern %q (want one of %s)", s, strings.Join(patternNames[:], ", "))
}

// Options shape the generated job. Zero values take the defaults.
type Options struct {
	Ranks          int            // default 8
	Seed           uint64         // everything is a function of Seed and the rank
	Mode           rawstream.Mode // default redundancy
	Iterations     int            // iterations of the program's main loop (default 4)
	Imbalance      float64        // the heavy ranks (rank 0 unless Heavy) run (1+Imbalance)× the iterations of the others
	Heavy          []int          // the heavy ranks (default: rank 0)
	BlockSampling  uint32         // P (default 8)
	KernelSampling uint32         // K (default 2)
	Scale          int            // multiplies every grid (default 1)
	Pattern        Pattern        // overrides every value pattern if set
	FrameRecords   int            // access records per ACCESS frame (default 512)
	ExitCode       int32          // written into END
	// RanksPerHost: consecutive ranks per host (default 4), each host's
	// ranks numbered from local rank 0.
	RanksPerHost int
	// GPUs spreads each host's ranks over that many GPUs by local rank
	// (device = local rank mod GPUs, one UUID per host and device), as MPI
	// codes bind them; in pcsampling mode the lowest local rank of each GPU
	// samples it and the others say in HELLO (flag bit 1) that another
	// process samples it and carry no PC samples, as the injection library
	// does (docs/inject.md "One process per GPU"). 0: a GPU of its own per
	// rank.
	GPUs int
}

func (o *Options) defaults() {
	if o.Ranks <= 0 {
		o.Ranks = 8
	}
	if o.Mode == 0 {
		o.Mode = rawstream.ModeRedundancy
	}
	if o.Iterations <= 0 {
		o.Iterations = 4
	}
	if o.BlockSampling == 0 {
		o.BlockSampling = 8
	}
	if o.KernelSampling == 0 {
		o.KernelSampling = 2
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if o.FrameRecords <= 0 {
		o.FrameRecords = 512
	}
	if o.RanksPerHost <= 0 {
		o.RanksPerHost = 4
	}
}

// device is rank r's host, CUDA device ordinal and GPU UUID, and whether
// its process PC-samples the GPU (in pcsampling mode).
func (o *Options) device(r int) (host string, dev int, uuid string, samples bool) {
	h, local := r/o.RanksPerHost, r%o.RanksPerHost
	host = fmt.Sprintf("synth%02d", h)
	if o.GPUs <= 0 {
		// A GPU per rank.
		return host, local, fmt.Sprintf("GPU-5e17%04x-0000-0000-0000-%012x", r, o.Seed&0xffffffffffff), true
	}
	dev = local % o.GPUs
	return host, dev, fmt.Sprintf("GPU-5e17%02x%02x-0000-0000-0000-%012x", h%256, dev%256, o.Seed&0xffffffffffff), local < o.GPUs
}

func (o *Options) heavy(r int) bool {
	if o.Heavy == nil {
		return r == 0
	}
	for _, h := range o.Heavy {
		if h == r {
			return true
		}
	}
	return false
}

// Stats counts what was written.
type Stats struct {
	Frames   uint64
	Bytes    int64
	Records  uint64 // access records (warp level)
	Launches uint64
}

// FileName is the name WriteFiles gives rank r's stream.
func FileName(rank int) string { return fmt.Sprintf("rank%04d.gpraw", rank) }

// WriteFiles writes one stream per rank into dir and returns their paths.
func WriteFiles(dir string, o Options) ([]string, error) {
	o.defaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for r := 0; r < o.Ranks; r++ {
		p := filepath.Join(dir, FileName(r))
		f, err := os.Create(p)
		if err != nil {
			return paths, err
		}
		_, err = WriteRank(f, r, o)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("synth: rank %d: %w", r, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Host-side layout of the generated program. Virtual addresses in the
// executable (file vaddr); return addresses are base + vaddr.
const (
	exePath     = "/opt/probe/bin/probe"
	vaMain      = 0x1520 // return address in main after a call
	vaSetup     = 0x1870 // in setup(), after cudaMalloc
	vaSolver    = 0x2134 // in solver_step(), after a launch
	vaCkpt      = 0x2388 // in checkpoint(), after a launch
	vaFinish    = 0x24a0 // in finish(), after a launch
	vaStubBase  = 0x1a40 // __device_stub__ of each kernel, 0x40 apart
	exeTextSize = 0x4000
)

// hostLib is a shared object of the generated process.
type hostLib struct {
	path, buildID string
	base, size    uint64
}

type gen struct {
	o       Options
	rank    int
	pcs     bool // the stream carries PC samples (pcsampling, and its process samples its GPU)
	w       *rawstream.Writer
	bw      *bufio.Writer
	rng     *rand.Rand
	st      Stats
	exeBase uint64
	libs    []hostLib // inject, libcuda, libcudart, libc
	funcPC  [4]uint64
	objs    []*object
	launch  uint64
	clock   uint64
	ctxSeen map[string]uint64
	acc     rawstream.Access
	err     error
}

// object is a device allocation and its contents (a byte-exact memory
// model, so loads return what earlier stores wrote).
type object struct {
	name string
	addr uint64
	mem  []byte
}

// WriteRank writes rank's stream to w.
func WriteRank(w io.Writer, rank int, o Options) (Stats, error) {
	o.defaults()
	g := &gen{o: o, rank: rank, ctxSeen: map[string]uint64{}}
	g.bw = bufio.NewWriterSize(w, 1<<20)
	g.w = rawstream.NewWriter(g.bw)
	g.rng = rand.New(rand.NewPCG(o.Seed, uint64(rank)*0x9e3779b97f4a7c15+1))
	g.run()
	if g.err == nil {
		g.err = g.bw.Flush()
	}
	g.st.Frames = g.w.Frames()
	g.st.Bytes = g.w.Bytes()
	return g.st, g.err
}

func (g *gen) put(f rawstream.Frame) {
	if g.err == nil {
		g.err = g.w.Write(f)
	}
}

func (g *gen) run() {
	o := &g.o
	host, dev, uuid, samples := o.device(g.rank)
	flags := uint16(rawstream.HelloSynthetic)
	if o.Mode == rawstream.ModePCSampling && !samples {
		flags |= rawstream.HelloPCSElsewhere
	}
	g.pcs = o.Mode == rawstream.ModePCSampling && samples
	g.put(&rawstream.Hello{Version: rawstream.Version, Flags: flags, Rank: int32(g.rank),
		PID: uint32(10000 + g.rank*7), Mode: o.Mode, BlockSampling: o.BlockSampling, KernelSampling: o.KernelSampling,
		StartNS: 1_760_000_000_000_000_000 + o.Seed%1000*1_000_000_000, Host: host,
		GPU: "NVIDIA H100 80GB HBM3", GPUUUID: uuid, Device: int32(dev),
		Driver: "580.95.05", CUDA: "13.0", SM: 90})
	// Address space layout randomisation differs per rank.
	aslr := uint64(g.rng.IntN(1<<16)) << 20
	g.exeBase = 0x55d000000000 + aslr
	g.put(&rawstream.HostModule{Base: g.exeBase, Path: exePath, BuildID: "5a17e7c0ffee0000000000000000000000000001",
		Segments: []rawstream.Segment{{Start: g.exeBase + 0x1000, Size: exeTextSize}}})
	libBase := 0x7f3a00000000 + aslr
	for i, l := range []struct{ path, id string }{
		{"/opt/gpuprof/lib/libgpuprof_inject.so", "7a11"},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "c0da"},
		{"/usr/local/cuda/lib64/libcudart.so.13", "c0de"},
		{"/usr/lib/x86_64-linux-gnu/libc.so.6", "1bc6"},
	} {
		b := libBase + uint64(i)<<28
		g.libs = append(g.libs, hostLib{path: l.path, buildID: l.id, base: b, size: 0x200000})
		g.put(&rawstream.HostModule{Base: b, Path: l.path, BuildID: l.id, Segments: []rawstream.Segment{{Start: b + 0x10000, Size: 0x200000}}})
	}
	if g.pcs {
		sr := &rawstream.StallReasons{}
		for i, n := range stallReasons {
			sr.Reasons = append(sr.Reasons, rawstream.StallReason{Index: uint32(i), Name: n})
		}
		g.put(sr)
	}
	cubin := moduleBytes()
	g.put(&rawstream.Module{ModuleID: 1, ContentKey: fnv1a(cubin), Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin})
	devBase := uint64(0x7ffe40000000) + uint64(g.rank)<<24
	pc := devBase
	for i, k := range probeKernels {
		g.funcPC[i] = pc
		g.put(&rawstream.Function{FunctionID: uint32(i + 1), ModuleID: 1, PC: pc, Size: k.size, Name: k.name})
		pc += uint64(k.size+127) &^ 127
	}
	// Allocations (float a[4096], b[4096]; double d[4096]; short s[4096];
	// int o[256]), made in setup() called from main.
	heap := uint64(0x7f2c00000000) + uint64(g.rank)<<32
	for i, spec := range []struct {
		name string
		size int
	}{{"a", 4096 * 4}, {"b", 4096 * 4}, {"d", 4096 * 8}, {"s", 8192}, {"o", 1024}} {
		ob := &object{name: spec.name, addr: heap, mem: make([]byte, spec.size)}
		heap += uint64(spec.size+511) &^ 511
		g.objs = append(g.objs, ob)
		g.put(&rawstream.Alloc{AllocID: uint64(i + 1), Address: ob.addr, Size: uint64(spec.size), Memory: rawstream.AllocDevice,
			Host: g.stack(vaSetup+uint64(i)*0x18, vaMain)})
	}
	g.initContents()

	iters := o.Iterations
	if o.heavy(g.rank) && o.Imbalance > 0 {
		iters = int(math.Round(float64(iters) * (1 + o.Imbalance)))
	}
	for it := 0; it < iters; it++ {
		g.kernel(0, vaSolver, it) // reload from solver_step
		g.kernel(1, vaSolver+0x30, it)
		if it%2 == 0 {
			g.kernel(0, vaCkpt, it) // reload again, from checkpoint: another context
		}
		g.kernel(2, vaSolver+0x60, it)
	}
	g.kernel(3, vaFinish, iters)
	for _, ob := range g.objs {
		g.put(&rawstream.Free{Address: ob.addr})
	}
	g.put(&rawstream.End{ExitCode: o.ExitCode})
}

// stack returns raw return addresses of a call from the program's vaCall
// (itself called from main at vaMain), innermost first, with the library
// frames a real unwind inside the injection callback shows.
func (g *gen) stack(vaCall, vaCaller uint64, stub ...uint64) []uint64 {
	var s []uint64
	s = append(s, g.libs[0].base+0x11234, g.libs[1].base+0x2a1f0, g.libs[2].base+0x4c8e0)
	for _, v := range stub {
		s = append(s, g.exeBase+v)
	}
	s = append(s, g.exeBase+vaCall, g.exeBase+vaCaller, g.libs[3].base+0x29d90)
	return s
}

func (g *gen) pattern(def Pattern) Pattern {
	if g.o.Pattern != PatternDefault {
		return g.o.Pattern
	}
	return def
}

// value returns the bits of element i under pattern p for a unit; salt
// separates independent streams of values.
func (g *gen) value(p Pattern, u unit, i uint64, salt uint64) uint64 {
	h := mix(g.o.Seed ^ salt*0x9e3779b97f4a7c15 ^ i*0xbf58476d1ce4e5b9 ^ uint64(g.rank)<<56)
	var f float64
	var n int64
	switch p {
	case PatternSingle:
		f, n = 0.5, 7
	case PatternDominant:
		if h%10 != 0 {
			f, n = 1.0, 1
		} else {
			f, n = float64(h%1000)/8, int64(h%1000)
		}
	case PatternFew:
		f, n = float64(h%8)+0.25, int64(h%8)*3
	case PatternClose:
		f, n = 1.0+float64(h%1000)*1e-6, 100+int64(h%3)
	case PatternRandom:
		if u.float {
			f = float64(int64(h>>11)) / float64(1<<40)
		}
		n = int64(h)
	case PatternIndex:
		f, n = float64(i), int64(i)
	case PatternPlanted:
		f, n = PlantedFloat, PlantedInt
	}
	if u.float {
		if u.bits == 32 {
			return uint64(math.Float32bits(float32(f)))
		}
		return math.Float64bits(f)
	}
	return uint64(n) & (1<<u.bits - 1)
}

func mix(x uint64) uint64 { // splitmix64
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (g *gen) initContents() {
	a, b := g.objs[0], g.objs[1]
	for i := 0; i < len(a.mem)/4; i++ {
		binary.LittleEndian.PutUint32(a.mem[4*i:], uint32(g.value(g.pattern(PatternDominant), f32, uint64(i), 1)))
		binary.LittleEndian.PutUint32(b.mem[4*i:], uint32(g.value(g.pattern(PatternClose), f32, uint64(i), 2)))
	}
}

// kernel launches probe kernel k from the host call site va in iteration it.
func (g *gen) kernel(k int, va uint64, it int) {
	def := probeKernels[k]
	grids := [4]uint32{32, 32, 8, 2}
	grid := grids[k] * uint32(g.o.Scale)
	const block = 256
	g.launch++
	ctx := fmt.Sprintf("%d@%x", k, va)
	inst := g.ctxSeen[ctx]
	g.ctxSeen[ctx]++
	instrumented := inst%uint64(g.o.KernelSampling) == 0
	r := uint32(g.rng.IntN(int(g.o.BlockSampling)))
	l := &rawstream.Launch{LaunchID: g.launch, FunctionID: uint32(k + 1), Grid: [3]uint32{grid, 1, 1}, Block: [3]uint32{block, 1, 1},
		Stream: 0, Instrumented: instrumented, BlockOffset: r, Host: g.stack(va, vaMain, vaStubBase+uint64(k)*0x40)}
	if k == 3 {
		l.SharedBytes = 0
	}
	g.put(l)
	g.st.Launches++
	var traced []uint32
	for b := uint32(0); b < grid; b++ {
		if (b+r)%g.o.BlockSampling == 0 {
			traced = append(traced, b)
		}
	}
	var recs uint64
	warps := uint64(block/32) * uint64(grid)
	switch {
	case g.o.Mode == rawstream.ModeRedundancy && instrumented:
		recs = g.accesses(k, grid, block, traced, it)
	case g.pcs && instrumented:
		g.pcSamples(k, def, warps)
	case g.o.Mode == rawstream.ModeHybrid && instrumented:
		g.instrCounts(k, def, warps)
	}
	// Time: per-block cost with noise; rank 0's extra iterations are its
	// imbalance, not slower kernels.
	dur := uint64(grid) * uint64(1500+g.rng.IntN(300)) * uint64(1+len(def.insts))
	start := g.clock + 2000
	g.clock = start + dur
	ke := &rawstream.KernelEnd{LaunchID: g.launch, StartNS: start, EndNS: start + dur, BlocksTotal: grid, Records: recs}
	if instrumented && g.o.Mode == rawstream.ModeRedundancy {
		ke.BlocksSampled = uint32(len(traced))
	}
	g.put(ke)
}

func (g *gen) flushAccess() {
	if g.acc.Count > 0 {
		g.put(&g.acc)
		g.acc.Reset(g.launch)
	}
}

// warpUnit is one warp of a resident block.
type warpUnit struct {
	block uint32
	warp  uint16
}

// accesses emits the records of the traced blocks of one launch. Blocks run
// four at a time and their warps interleave instruction by instruction, as
// a device buffer delivers them.
func (g *gen) accesses(k int, grid, block uint32, traced []uint32, it int) uint64 {
	g.acc.Reset(g.launch)
	var n uint64
	const resident = 4
	for i := 0; i < len(traced); i += resident {
		var units []warpUnit
		for _, b := range traced[i:min(i+resident, len(traced))] {
			for w := uint16(0); w < uint16(block/32); w++ {
				units = append(units, warpUnit{b, w})
			}
		}
		shared := map[uint32][]byte{}
		for _, u := range units {
			n += g.record(k, u, 0, -1, grid, block, it, rawstream.FlagBlockEnter, nil)
		}
		steps := g.steps(k)
		for s := range steps {
			for _, u := range units {
				if shared[u.block] == nil {
					shared[u.block] = make([]byte, 1024)
				}
				n += g.record(k, u, steps[s].inst, steps[s].k, grid, block, it, 0, shared[u.block])
			}
		}
		for _, u := range units {
			n += g.record(k, u, 0, -1, grid, block, it, rawstream.FlagBlockExit, nil)
		}
	}
	g.flushAccess()
	g.st.Records += n
	return n
}

type step struct {
	inst int // index into the kernel's insts
	k    int // loop iteration
}

// reloadLoop is how many times the generated reload kernel's loop calls
// helper(); helper reads a[k%2], so each thread revisits two addresses and
// temporal load redundancy appears.
const reloadLoop = 4

func (g *gen) steps(k int) []step {
	switch k {
	case 0:
		s := []step{{0, 0}, {1, 0}}
		for i := 0; i < reloadLoop; i++ {
			s = append(s, step{2, i})
		}
		return append(s, step{3, 0})
	case 1:
		return []step{{0, 0}}
	case 2:
		return []step{{0, 0}, {1, 0}, {2, 0}, {3, 0}}
	default:
		return []step{{0, 0}, {1, 0}, {2, 0}}
	}
}

// record emits one warp record (an instruction, or a block event when flag
// is set) and updates the memory model.
func (g *gen) record(k int, u warpUnit, inst, iter int, grid, block uint32, it int, event rawstream.Flags, shm []byte) uint64 {
	def := probeKernels[k]
	fpc := g.funcPC[k]
	if event != 0 {
		off := uint64(0)
		if event == rawstream.FlagBlockExit {
			off = uint64(def.last - 0x10) // the EXIT before the final BRA
		}
		g.acc.AppendRecord(fpc+off, u.block, u.warp, rawstream.SpaceNone, event, 0xffffffff, 0)
		g.maybeFlush()
		return 1
	}
	mi := def.insts[inst]
	active := uint32(0xffffffff)
	if mi.flags&rawstream.FlagAtomic != 0 {
		active = 1 // the leader lane of the warp-aggregated atomic
	}
	g.acc.AppendRecord(fpc+uint64(mi.off), u.block, u.warp, mi.space, mi.flags, active, mi.size)
	a, b, d, s, o := g.objs[0], g.objs[1], g.objs[2], g.objs[3], g.objs[4]
	var val [16]byte
	for lane := 0; lane < 32; lane++ {
		if active&(1<<lane) == 0 {
			continue
		}
		tid := uint32(u.warp)*32 + uint32(lane)
		i := u.block*block + tid
		var addr uint64
		var ob *object
		var shOff uint32
		switch k<<8 | int(mi.off) {
		case 0<<8 | 0x100, 0<<8 | 0x580: // b[i]
			ob, addr = b, b.addr+uint64(i%4096)*4
			if mi.flags&rawstream.FlagWrite != 0 {
				v := g.value(g.pattern(PatternClose), f32, uint64(i), uint64(100+it))
				binary.LittleEndian.PutUint32(val[:], uint32(v))
			}
		case 0<<8 | 0x140: // a[0]
			ob, addr = a, a.addr
		case 0<<8 | 0x5e0: // helper: a[k % 2]
			ob, addr = a, a.addr+uint64(iter%2)*4
		case 1<<8 | 0xd0: // d[i] = 3.0 (or the chosen pattern)
			ob, addr = d, d.addr+uint64(i%4096)*8
			v := math.Float64bits(3.0)
			if g.o.Pattern != PatternDefault {
				v = g.value(g.o.Pattern, f64, uint64(i), uint64(200+it))
			}
			binary.LittleEndian.PutUint64(val[:], v)
		case 2<<8 | 0xe0: // v = a4[i]
			ob, addr = a, a.addr+uint64(i%1024)*16
		case 2<<8 | 0x170: // b4[i] = (v.x+1, v.y, v.z, v.w)
			ob, addr = b, b.addr+uint64(i%1024)*16
			copy(val[:16], a.mem[(i%1024)*16:])
			x := math.Float32frombits(binary.LittleEndian.Uint32(val[:]))
			binary.LittleEndian.PutUint32(val[:], math.Float32bits(x+1))
		case 2<<8 | 0x180: // s[i] = (short)i
			ob, addr = s, s.addr+uint64(i%4096)*2
			binary.LittleEndian.PutUint16(val[:], uint16(i))
		case 2<<8 | 0x190: // atomicAdd((int*)&b[0], popc(active)); the record carries the old value
			ob, addr = b, b.addr
		case 3<<8 | 0xa0: // t[tid*2 % 256] = tid
			shOff = tid * 2 % 256 * 4
			binary.LittleEndian.PutUint32(val[:], tid)
		case 3<<8 | 0xd0: // t[(tid+1) % 256]
			shOff = (tid + 1) % 256 * 4
		case 3<<8 | 0xf0: // out[tid] = loaded
			ob, addr = o, o.addr+uint64(tid%256)*4
			copy(val[:4], shm[(tid+1)%256*4:])
		}
		size := int(mi.size)
		if mi.space == rawstream.SpaceShared {
			addr = uint64(shOff)
			if mi.flags&rawstream.FlagWrite != 0 {
				copy(shm[shOff:], val[:size])
			} else {
				copy(val[:size], shm[shOff:])
			}
		} else {
			off := addr - ob.addr
			switch {
			case mi.flags&rawstream.FlagAtomic != 0:
				old := binary.LittleEndian.Uint32(ob.mem[off:])
				binary.LittleEndian.PutUint32(val[:], old)
				binary.LittleEndian.PutUint32(ob.mem[off:], old+32)
			case mi.flags&rawstream.FlagWrite != 0:
				copy(ob.mem[off:], val[:size])
			default:
				copy(val[:size], ob.mem[off:])
			}
		}
		g.acc.AppendLane(addr, val[:size])
	}
	g.maybeFlush()
	return 1
}

func (g *gen) maybeFlush() {
	if int(g.acc.Count) >= g.o.FrameRecords {
		g.flushAccess()
	}
}

// pcSamples emits PC samples for one launch: memory loads stall on
// long_scoreboard, stores on lg_throttle, the barrier of shm on barrier,
// other instructions are mostly selected or waiting.
func (g *gen) pcSamples(k int, def kernelDef, warps uint64) {
	mem := map[uint32]memInst{}
	for _, m := range def.insts {
		mem[m.off] = m
	}
	idx := func(name string) uint32 {
		for i, n := range stallReasons {
			if strings.HasSuffix(n, "_"+name) {
				return uint32(i)
			}
		}
		panic("synth: no stall reason " + name)
	}
	ps := &rawstream.PCSamples{LaunchID: g.launch}
	for off := uint32(0); off <= def.last; off += 0x10 {
		base := uint32(warps/8) + 1
		var st []rawstream.StallCount
		add := func(name string, n uint32) {
			if n > 0 {
				st = append(st, rawstream.StallCount{Reason: idx(name), Samples: n})
			}
		}
		add("selected", base/2+uint32(g.rng.IntN(3)))
		add("not_selected", uint32(g.rng.IntN(int(base/4+1))))
		if m, ok := mem[off]; ok {
			if m.flags&rawstream.FlagRead != 0 {
				add("long_scoreboard", base*6+uint32(g.rng.IntN(int(base)+1)))
			} else {
				add("lg_throttle", base*2)
			}
		} else {
			add("wait", base/2)
			add("short_scoreboard", uint32(g.rng.IntN(int(base/2+1))))
		}
		if k == 3 && off == 0xb0 {
			add("barrier", base*4)
		}
		ps.PCs = append(ps.PCs, rawstream.PCSample{FunctionID: uint32(k + 1), Offset: off, Stalls: st})
	}
	g.put(ps)
}

// instrCounts emits exact instruction counts for one launch (the loop of
// reload and its helper run reloadLoop times per warp).
func (g *gen) instrCounts(k int, def kernelDef, warps uint64) {
	ic := &rawstream.InstrCounts{LaunchID: g.launch}
	for off := uint32(0); off <= def.last; off += 0x10 {
		n := warps
		if k == 0 && off >= 0x1e0 && off < 0x490 {
			n *= reloadLoop / 4
		}
		if k == 0 && off >= 0x5a0 {
			n *= reloadLoop
		}
		ic.Counts = append(ic.Counts, rawstream.InstrCount{FunctionID: uint32(k + 1), Offset: off, Executed: n, ThreadExecuted: n * 32})
	}
	g.put(ic)
}

// moduleBytes returns the generated program's stand-in cubin: an ELF64
// header for EM_CUDA (190) with sm_90 flags, then the kernel names. It is
// the same on every rank, so every rank computes the same content hash.
func moduleBytes() []byte {
	b := make([]byte, 64)
	copy(b, "\x7fELF\x02\x01\x01\x33\x07")
	binary.LittleEndian.PutUint16(b[16:], 2)   // ET_EXEC
	binary.LittleEndian.PutUint16(b[18:], 190) // EM_CUDA
	binary.LittleEndian.PutUint32(b[20:], 128) // version
	binary.LittleEndian.PutUint32(b[48:], 0x5a0590)
	binary.LittleEndian.PutUint16(b[52:], 64)
	for _, k := range probeKernels {
		b = append(b, ".text."+k.name+"\x00"...)
	}
	for len(b)%128 != 0 {
		b = append(b, 0)
	}
	return b
}

// fnv1a is the library's module dedup key.
func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
