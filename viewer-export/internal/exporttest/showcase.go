package exporttest

import (
	"strings"

	"fmt"
	"math"

	"gpuprof/analysis"
	"gpuprof/profile"
)

// Showcase builds a plausible 8-rank profile of a conjugate-gradient heat
// solver (generated, so marked synthetic): five kernels from several
// launch sites, GPU functions with loops, inlined loads, lines and
// instructions with stall samples, temporal and spatial redundancy with
// value sketches, a slow rank 3 in the sparse matrix-vector product, fewer
// halo faces on the edge ranks 0 and 7, and dropped records on rank 5.
// The HTML report's test renders it and its screenshot documents the report.
func Showcase(ranks int) *profile.Profile {
	p := profile.New("heat3d-cg")
	for r := int32(0); r < int32(ranks); r++ {
		must(p.Merge(showcaseRank(r, int32(ranks))))
		done := profile.New("heat3d-cg")
		done.Rank(r).Batches = 1
		done.Synthetic = true
		must(done.AsItem(r, 1))
		must(p.Merge(done))
	}
	must(p.Validate())
	return p
}

// ShowcaseModule is the solver's GPU module.
const ShowcaseModule = profile.ModuleHash(0x9f3c2a7701d4e5b1)

type scKernel struct {
	mangled  string
	site     []profile.Frame // host frames below cg_iteration
	timeNS   uint64          // per launch
	launches uint64
	file     string
	loopLine uint32
	lines    []scLine
}

type scLine struct {
	line    uint32
	inlined string // inlined callee at this line ("" if none)
	insts   []scInst
}

type scInst struct {
	off     uint64
	samples uint64
	stall   map[string]uint64
	loads   uint64
	stores  uint64
	redT    uint64 // temporally redundant accesses
	redS    uint64 // spatially redundant accesses
}

var (
	scMain  = profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: "main", File: "heat3d.cc", Line: 212}
	scSolve = profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: "_Z8cg_solveR6Matrix", File: "cg.cc", Line: 88}
	scIter  = func(line uint32) profile.Frame {
		return profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: "_Z12cg_iterationR6MatrixR7Vectors", File: "cg.cc", Line: line}
	}
	scHalo = profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: "_Z13exchange_haloR7Vectorsi", File: "halo.cc", Line: 57}
)

func scKernels() []scKernel {
	ls := func(n uint64) map[string]uint64 { return map[string]uint64{"long_scoreboard": n} }
	return []scKernel{
		{mangled: "_Z12spmv_csr_f64iPKiS0_PKdS2_Pd", site: []profile.Frame{scIter(140)}, timeNS: 412000, launches: 200, file: "spmv.cu", loopLine: 31,
			lines: []scLine{
				{line: 28, insts: []scInst{{off: 0x80, samples: 900, stall: map[string]uint64{"wait": 500, "not_selected": 200}, loads: 40000}}},
				{line: 33, inlined: "_Z8load_rowPKdPKii", insts: []scInst{
					{off: 0x1a0, samples: 5200, stall: map[string]uint64{"long_scoreboard": 3900, "lg_throttle": 700}, loads: 800000, redT: 560000, redS: 300000},
					{off: 0x1c0, samples: 2100, stall: ls(1500), loads: 800000, redT: 96000}}},
				{line: 34, insts: []scInst{{off: 0x200, samples: 1400, stall: map[string]uint64{"math_pipe_throttle": 600, "short_scoreboard": 500}}}},
				{line: 37, insts: []scInst{{off: 0x2c0, samples: 300, stall: map[string]uint64{"drain": 150}, stores: 40000, redT: 12000}}},
			}},
		{mangled: "_Z18jacobi_precond_f64iPKdS0_Pd", site: []profile.Frame{scIter(150)}, timeNS: 96000, launches: 200, file: "precond.cu", loopLine: 12,
			lines: []scLine{{line: 14, insts: []scInst{
				{off: 0x60, samples: 800, stall: ls(560), loads: 400000, redS: 396000},
				{off: 0x90, samples: 500, stall: map[string]uint64{"mio_throttle": 300}, stores: 400000, redT: 20000}}}}},
		{mangled: "_Z14dot_reduce_f64iPKdS0_Pd", site: []profile.Frame{scIter(142)}, timeNS: 58000, launches: 400, file: "blas.cu", loopLine: 51,
			lines: []scLine{
				{line: 53, insts: []scInst{{off: 0x70, samples: 600, stall: ls(380), loads: 160000, redT: 8000}}},
				{line: 58, insts: []scInst{{off: 0x140, samples: 700, stall: map[string]uint64{"barrier": 560}}}},
			}},
		{mangled: "_Z9axpby_f64idPKddPd", site: []profile.Frame{scIter(144)}, timeNS: 34000, launches: 400, file: "blas.cu", loopLine: 22,
			lines: []scLine{{line: 23, insts: []scInst{{off: 0x50, samples: 500, stall: ls(350), loads: 160000, stores: 80000, redT: 6000}}}}},
		{mangled: "_Z14halo_pack_faceiiPKdPd", site: []profile.Frame{scIter(138), scHalo}, timeNS: 26000, launches: 1200, file: "halo.cu", loopLine: 9,
			lines: []scLine{{line: 10, insts: []scInst{{off: 0x40, samples: 300, stall: ls(200), loads: 24000, stores: 24000, redS: 9000}}}}},
	}
}

func showcaseRank(r, ranks int32) *profile.Profile {
	p := profile.New("heat3d-cg")
	ri := p.Rank(r)
	ri.Host = fmt.Sprintf("gpu%03d", 17+r/4)
	ri.GPU = "NVIDIA H100 80GB HBM3"
	ri.GPUUUID = fmt.Sprintf("GPU-7c1e%04x", 0x100+r)
	ri.Driver, ri.CUDA = "550.54.15", "12.4"
	ri.Mode = "hybrid"
	ri.Source = "synthetic"
	ri.BlockP, ri.KernelK = 20, 10
	ri.Records = 2400000
	if r == 5 {
		ri.Dropped = 3100
	}
	p.Synthetic = true
	p.AddModule(profile.Module{Hash: ShowcaseModule, Size: 3 << 20, Name: "/opt/heat3d/bin/heat3d.cubin", SM: 90})
	alloc := func(fn string, line uint32, size uint64) (profile.ObjectID, profile.NodeID) {
		n := p.Path(scMain, profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: fn, File: "matrix.cc", Line: line})
		p.Add(n.ID, profile.AllocBytes, size)
		p.Add(n.ID, profile.AllocCount, 1)
		id := profile.ObjectIDOf(n.ID, size)
		p.Objects[id] = &profile.DataObject{ID: id, Context: n.ID, Size: size, Count: 1}
		return id, n.ID
	}
	xVec, _ := alloc("_Z10alloc_xvecm", 63, 96<<20)
	diag, _ := alloc("_Z10alloc_diagm", 71, 96<<20)
	for _, k := range scKernels() {
		scale := 1.0
		switch {
		case k.mangled[:8] == "_Z12spmv" && r == 3:
			scale = 1.9 // rank 3 owns the densest rows
		case k.mangled[:8] == "_Z14halo" && (r == 0 || r == ranks-1):
			scale = 0.5 // edge ranks pack one face, not two
		}
		jitter := 1 + 0.01*float64((int(r)*7+len(k.mangled))%5)
		frames := append([]profile.Frame{scMain, scSolve}, k.site...)
		frames = append(frames, profile.Frame{Kind: profile.KindKernel, Module: ShowcaseModule.String(), Function: k.mangled})
		kn := p.Path(frames...)
		launches := k.launches
		p.Add(kn.ID, profile.GPUTime, uint64(float64(k.timeNS*launches)*scale*jitter))
		p.Add(kn.ID, profile.GPULaunches, launches)
		p.Add(kn.ID, profile.GPUTraced, launches/10)
		ri.Launches += launches
		ri.LaunchesTraced += launches / 10
		fid := p.AddFunc(ShowcaseModule, k.mangled)
		body := p.Child(kn.ID, profile.Frame{Kind: profile.KindGPUFunction, Module: ShowcaseModule.String(), Function: k.mangled})
		loop := p.Child(body.ID, profile.Frame{Kind: profile.KindLoop, File: k.file, Line: k.loopLine, Offset: k.lines[0].insts[0].off})
		var prev *profile.PC
		for _, l := range k.lines {
			parent := loop.ID
			if l.line < k.loopLine {
				parent = body.ID
			}
			fn := fid
			if l.inlined != "" {
				inl := p.Child(parent, profile.Frame{Kind: profile.KindInlined, Function: l.inlined, File: k.file, Line: l.line})
				parent = p.Child(inl.ID, profile.Frame{Kind: profile.KindLine, File: "load.cuh", Line: 17}).ID
				fn = p.AddFunc(ShowcaseModule, l.inlined)
			} else {
				parent = p.Child(parent, profile.Frame{Kind: profile.KindLine, File: k.file, Line: l.line}).ID
			}
			for _, in := range l.insts {
				node := p.Child(parent, profile.Frame{Kind: profile.KindInstruction, Offset: in.off})
				s := scale * jitter
				add := func(m profile.MetricID, v uint64) { p.Add(node.ID, m, uint64(float64(v)*s)) }
				add(profile.InstSamples, in.samples)
				for reason, v := range in.stall {
					add(profile.StallMetric(reason), v)
				}
				add(profile.MemLoads, in.loads)
				add(profile.MemStores, in.stores)
				access := profile.Load
				acc := in.loads
				if in.loads > 0 {
					add(profile.RedTempLoad, in.redT)
					add(profile.RedSpatLoad, in.redS)
				} else if in.stores > 0 {
					add(profile.RedTempStore, in.redT)
					add(profile.RedSpatStore, in.redS)
					access, acc = profile.Store, in.stores
				}
				if acc == 0 {
					continue
				}
				pc := profile.PC{Func: fn, Offset: uint32(in.off)}
				st := p.PCStatOf(profile.PCKey{Context: kn.ID, PC: pc, Access: access})
				st.Accesses += uint64(float64(acc) * s)
				st.Values = profile.NewValueSketch(profile.ValFloat, 64)
				fill(st.Values, uint64(float64(acc)*s), in.redT, acc, k.mangled)
				if in.redT > 0 {
					old := pc
					if prev != nil && in.redT < acc/4 {
						old = *prev // a second load of what the previous one read
					}
					p.Temporal[profile.TemporalKey{Context: kn.ID, Old: old, New: pc, Access: access}] += uint64(float64(in.redT) * s)
				}
				if in.redS > 0 {
					obj := xVec
					if k.mangled[:8] == "_Z18jaco" {
						obj = diag
					}
					p.Spatial[profile.SpatialKey{Context: kn.ID, Object: obj, PC: pc, Access: access}] += uint64(float64(in.redS) * s)
					ost := p.ObjStatOf(profile.ObjectKey{Context: kn.ID, Object: obj, Access: access})
					ost.Accesses += uint64(float64(acc) * s)
					if ost.Values == nil {
						ost.Values = profile.NewValueSketch(profile.ValFloat, 64)
					}
					fill(ost.Values, uint64(float64(acc)*s), in.redS, acc, k.mangled)
				}
				pcCopy := pc
				prev = &pcCopy
			}
		}
	}
	must(p.AsItem(r, 0))
	return p
}

// fill adds total values to a sketch: the redundant share concentrated on
// a few values (0.0 halo cells for the solver vectors, 4.0 on the
// diagonal), the rest spread.
func fill(s *profile.ValueSketch, total, red, acc uint64, kernel string) {
	f64 := func(v float64) uint64 { return math.Float64bits(v) }
	share := float64(red) / float64(acc)
	hot := uint64(float64(total) * share)
	if kernel[:8] == "_Z18jaco" {
		s.AddN(f64(4.0), hot)
	} else {
		s.AddN(f64(0), hot*7/10)
		s.AddN(f64(1), hot*2/10)
		s.AddN(f64(-1), hot-hot*7/10-hot*2/10)
	}
	rest := total - hot
	for i := uint64(0); i < 40 && rest > 0; i++ {
		n := rest / (40 - i)
		s.AddN(f64(0.5+float64(i)*0.125), n)
		rest -= n
	}
}

// ShowcaseAdvice is advice as the analysis would give for Showcase.
func ShowcaseAdvice(p *profile.Profile) []analysis.Advice {
	find := func(prefix string) (profile.NodeID, profile.FuncID) {
		for id, n := range p.Nodes {
			if n.Frame.Kind == profile.KindKernel && len(n.Frame.Function) >= len(prefix) && n.Frame.Function[:len(prefix)] == prefix {
				return id, profile.FuncIDOf(ShowcaseModule, n.Frame.Function)
			}
		}
		return 0, 0
	}
	spmv, sf := find("_Z12spmv")
	jac, _ := find("_Z18jaco")
	halo, _ := find("_Z14halo")
	load := profile.FuncIDOf(ShowcaseModule, "_Z8load_rowPKdPKii")
	var diag profile.ObjectID
	for id, o := range p.Objects {
		if n := p.Nodes[o.Context]; n != nil && n.Frame.Function == "_Z10alloc_diagm" {
			diag = id
		}
	}
	pcA := profile.PC{Func: load, Offset: 0x1a0}
	pcB := profile.PC{Func: sf, Offset: 0x200}
	return []analysis.Advice{
		{Kind: "redundant load elimination", Category: "redundancy", Importance: 0.46, Speedup: 1.38,
			Hint:     "x[col_idx[j]] in load_row (inlined at spmv.cu:33) re-reads the value the previous row read in 70% of its executions; cache the halo of x in shared memory per block.",
			Hotspots: []analysis.Where{{Context: spmv, Kernel: "spmv_csr_f64", Function: "load_row", File: "load.cuh", Line: 17, Loop: "spmv.cu:31", PC: &pcA, SASS: "LDG.E.64.CONSTANT R8, [R4.64]"}},
			Evidence: "temporal load redundancy 70% at <load_row+0x1a0, load_row+0x1a0>; 0.0 is 49% of loaded values"},
		{Kind: "constant replacement", Category: "redundancy", Importance: 0.31, Speedup: 1.21,
			Hint:     "diag (96 MiB, matrix.cc:71) holds 4.0 in 99% of the words jacobi_precond loads; pass the constant instead of the array.",
			Hotspots: []analysis.Where{{Context: jac, Kernel: "jacobi_precond_f64", File: "precond.cu", Line: 14, Object: &diag}},
			Evidence: "spatial load redundancy 99% of diag; 1 distinct value"},
		{Kind: "load imbalance", Category: "imbalance", Importance: 0.22, Speedup: 1.17, Ranks: []int32{3},
			Hint:     "Rank 3 spends 1.9x the median time in spmv_csr_f64: its rows are denser; rebalance the partition by nonzeros, not rows.",
			Hotspots: []analysis.Where{{Context: spmv, Kernel: "spmv_csr_f64"}},
			Evidence: "gpu.time_ns max/mean 1.72 at rank 3 (82.6 ms vs 48.0 ms mean)"},
		{Kind: "stall: long scoreboard", Category: "stall", Importance: 0.38, Speedup: 1.12,
			Hint:     "The multiply at spmv.cu:34 waits on global loads issued one iteration earlier; unroll the row loop by 2 so loads overlap.",
			Hotspots: []analysis.Where{{Context: spmv, Kernel: "spmv_csr_f64", File: "spmv.cu", Line: 34, Loop: "spmv.cu:31", PC: &pcB}},
			Evidence: "long_scoreboard 54% of spmv_csr_f64's samples"},
		{Kind: "small kernel launches", Category: "static", Importance: 0.05, Speedup: 0,
			Hint:     "halo_pack_face runs 1200 launches of 26 us; fuse the six faces into one launch.",
			Hotspots: []analysis.Where{{Context: halo, Kernel: "halo_pack_face"}},
			Evidence: "1200 launches, 26 us each"},
	}
}

// SiblingSpmv launches the showcase's spmv kernel from a second call site
// too (main > restart_step, 1000 ns of GPU time) and returns its two
// kernel contexts: the same code at sibling contexts.
func SiblingSpmv(p *profile.Profile) []profile.NodeID {
	for _, id := range p.SortedNodeIDs() {
		if n := p.Nodes[id]; n.Frame.Kind == profile.KindKernel && strings.HasPrefix(n.Frame.Function, "_Z12spmv") {
			main := profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: "main", File: "heat3d.cc", Line: 212}
			restart := profile.Frame{Kind: profile.KindHostFrame, Module: "/opt/heat3d/bin/heat3d", Function: "_Z12restart_stepv", File: "restart.cc", Line: 9}
			other := p.Path(main, restart, n.Frame)
			p.Add(other.ID, profile.GPUTime, 1000)
			return []profile.NodeID{id, other.ID}
		}
	}
	return nil
}
