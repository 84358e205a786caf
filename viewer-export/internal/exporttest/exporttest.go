// Package exporttest builds the multi-rank profiles and advice the
// exporters' tests use: proftest's SPMD items plus an item per rank with
// every frame kind (unsymbolised host frame, device function, inlined
// frame, loop) and redundancy tables with value sketches.
package exporttest

import (
	"fmt"
	"math"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// Shape is a small shape that keeps the hpcviewer database and the HTML
// report quick to check while exercising every table.
var Shape = proftest.Shape{Kernels: 4, HostDepth: 3, Lines: 5, InstPer: 3, Pairs: 12, Objects: 4, RankUnique: 20, Sketches: true}

// Job is the job name of the profiles built here.
const Job = "stencil-8"

// StencilKernel is the mangled name of the kernel the extra item adds.
const StencilKernel = "_Z10stencil_2dPKfPfii"

// AppModule is the GPU module of the extra item's kernels.
const AppModule = profile.ModuleHash(0x5eed00000000beef)

// Profile returns the merged, sealed profile of ranks 0..ranks-1, each with
// `batches` proftest data items and one extra item.
func Profile(ranks int, batches int, s proftest.Shape) *profile.Profile {
	p := profile.New(Job)
	for r := int32(0); r < int32(ranks); r++ {
		for q := 0; q < batches; q++ {
			must(p.Merge(proftest.Item(Job, 7, s, r, uint32(q), false, 0)))
		}
		must(p.Merge(Extra(r, uint32(batches))))
		must(p.Merge(proftest.Item(Job, 7, s, r, uint32(batches+1), true, int64(batches+1))))
	}
	must(p.Validate())
	return p
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Frames of the extra item.
var (
	Main   = profile.Frame{Kind: profile.KindHostFrame, Module: "/app/bin/stencil", Function: "main", File: "main.cc", Line: 42}
	Step   = profile.Frame{Kind: profile.KindHostFrame, Module: "/app/bin/stencil", Function: "_Z11solver_stepi", File: "solver.cc", Line: 88}
	Kernel = profile.Frame{Kind: profile.KindKernel, Module: AppModule.String(), Function: StencilKernel}
	Body   = profile.Frame{Kind: profile.KindGPUFunction, Module: AppModule.String(), Function: StencilKernel}
	Loop   = profile.Frame{Kind: profile.KindLoop, File: "stencil.cu", Line: 30, Offset: 0x100}
	Line31 = profile.Frame{Kind: profile.KindLine, File: "stencil.cu", Line: 31}
	Inl    = profile.Frame{Kind: profile.KindInlined, Function: "_Z4loadPKfi", File: "stencil.cu", Line: 32}
	Line12 = profile.Frame{Kind: profile.KindLine, File: "load.cuh", Line: 12}
	Reduce = profile.Frame{Kind: profile.KindGPUFunction, Module: AppModule.String(), Function: "_Z6reducePf"}
	Line5  = profile.Frame{Kind: profile.KindLine, File: "reduce.cu", Line: 5}
	// An unsymbolised library frame launching the same kernel.
	Lib = profile.Frame{Kind: profile.KindHostFrame, Module: "/usr/lib/libhalo.so", Offset: 0x1a2b}
)

// Extra returns rank r's extra item (sequence seq): rank 3 is slow, so the
// kernel shows imbalance.
func Extra(r int32, seq uint32) *profile.Profile {
	slow := uint64(1)
	if r == 3 {
		slow = 3
	}
	return extra(r, seq, slow)
}

// MultiGPU returns the merged, sealed profile of ranks 0..ranks-1 on
// `hosts` hosts (consecutive ranks per host, as mpirun fills slots), each
// host's ranks spread over its gpus GPUs by local rank (GPU = local rank
// mod gpus, as MPI codes bind them), measured in PC sampling (and
// redundancy): the lowest local rank of each GPU sampled it, the others
// gave kernel times only (one process per GPU). The heavy ranks take
// three times the others' time in the stencil kernel.
func MultiGPU(ranks, hosts, gpus int, heavy ...int32) *profile.Profile {
	p := profile.New(Job)
	perHost := (ranks + hosts - 1) / hosts
	for r := int32(0); r < int32(ranks); r++ {
		must(p.Merge(proftest.Item(Job, 7, Shape, r, 0, false, 0)))
		slow := uint64(1)
		for _, h := range heavy {
			if h == r {
				slow = 3
			}
		}
		x := extra(r, 1, slow)
		ri := x.Ranks[r]
		h, local := int(r)/perHost, int(r)%perHost
		d := local % gpus
		ri.Device = fmt.Sprint(d)
		ri.GPUUUID = GPUUUID(h, d)
		ri.Mode = "pcsampling+redundancy"
		ri.PCSampling = "sampled"
		if local >= gpus {
			ri.PCSampling = "kernel times only: another process PC-samples " + ri.GPUUUID
		}
		must(p.Merge(x))
		must(p.Merge(proftest.Item(Job, 7, Shape, r, 2, true, 2)))
		p.Ranks[r].Host = fmt.Sprintf("gpu%02d", h) // the items' hosts follow another layout
	}
	must(p.Validate())
	return p
}

// GPUUUID is the UUID MultiGPU gives GPU d of host h.
func GPUUUID(h, d int) string {
	return fmt.Sprintf("GPU-%08x-5e17-4c3a-9d1e-%012x", 0x3f2a1b90+16*h+d, d)
}

func extra(r int32, seq uint32, slow uint64) *profile.Profile {
	p := profile.New(Job)
	ri := p.Rank(r)
	ri.Host = fmt.Sprintf("node%02d", r/8) // as proftest names the ranks' other items
	ri.GPU = "NVIDIA H100 80GB HBM3"
	ri.GPUUUID = fmt.Sprintf("GPU-%08x", 0xabc0+r)
	ri.Mode = "redundancy"
	ri.Source = "synthetic"
	ri.BlockP, ri.KernelK = 50, 10
	ri.Launches, ri.LaunchesTraced = 20, 2
	ri.Records = 100000
	if r == 5 {
		ri.Dropped = 1200
	}
	p.Synthetic = true
	p.AddModule(profile.Module{Hash: AppModule, Size: 1 << 20, Name: "/app/bin/stencil.cubin", SM: 90})
	kfn := p.AddFunc(AppModule, StencilKernel)
	lfn := p.AddFunc(AppModule, "_Z4loadPKfi")
	rfn := p.AddFunc(AppModule, "_Z6reducePf")
	k := p.Path(Main, Step, Kernel)
	p.Add(k.ID, profile.GPUTime, 50000*slow+uint64(r)*100)
	p.Add(k.ID, profile.GPULaunches, 10)
	p.Add(k.ID, profile.GPUTraced, 1)
	body := p.Child(k.ID, Body)
	loop := p.Child(body.ID, Loop)
	l31 := p.Child(loop.ID, Line31)
	stall := profile.StallMetric("smsp__pcsamp_warps_issue_stalled_long_scoreboard")
	mio := profile.StallMetric("smsp__pcsamp_warps_issue_stalled_mio_throttle")
	for i, off := range []uint64{0x110, 0x120} {
		in := p.Child(l31.ID, profile.Frame{Kind: profile.KindInstruction, Offset: off})
		p.Add(in.ID, profile.InstSamples, 300*slow+uint64(i*50))
		p.Add(in.ID, stall, 200*slow)
		p.Add(in.ID, mio, 40+uint64(i))
		p.Add(in.ID, profile.MemLoads, 4096)
		p.Add(in.ID, profile.RedTempLoad, 3000+uint64(i)*500)
		p.Add(in.ID, profile.RedSpatLoad, 1024)
	}
	inl := p.Child(loop.ID, Inl)
	l12 := p.Child(inl.ID, Line12)
	in := p.Child(l12.ID, profile.Frame{Kind: profile.KindInstruction, Offset: 0x140})
	p.Add(in.ID, profile.InstSamples, 120)
	p.Add(in.ID, stall, 90)
	p.Add(in.ID, profile.MemStores, 2048)
	p.Add(in.ID, profile.RedTempStore, 1900)
	p.Add(in.ID, profile.RedSpatStore, 512)
	red := p.Child(body.ID, Reduce)
	l5 := p.Child(red.ID, Line5)
	in5 := p.Child(l5.ID, profile.Frame{Kind: profile.KindInstruction, Offset: 0x10})
	p.Add(in5.ID, profile.InstSamples, 60)
	p.Add(in5.ID, profile.StallMetric("smsp__pcsamp_warps_issue_stalled_barrier"), 55)

	lk := p.Path(Lib, Kernel)
	p.Add(lk.ID, profile.GPUTime, 7000)
	p.Add(lk.ID, profile.GPULaunches, 2)

	pcA := profile.PC{Func: kfn, Offset: 0x110}
	pcB := profile.PC{Func: kfn, Offset: 0x120}
	pcS := profile.PC{Func: lfn, Offset: 0x140}
	_ = rfn
	p.Temporal[profile.TemporalKey{Context: k.ID, Old: pcA, New: pcA, Access: profile.Load}] += 3000
	p.Temporal[profile.TemporalKey{Context: k.ID, Old: pcA, New: pcB, Access: profile.Load}] += 500
	p.Temporal[profile.TemporalKey{Context: k.ID, Old: pcS, New: pcS, Access: profile.Store}] += 1900
	for _, pc := range []profile.PC{pcA, pcB} {
		st := p.PCStatOf(profile.PCKey{Context: k.ID, PC: pc, Access: profile.Load})
		st.Accesses += 4096
		st.Values = profile.NewValueSketch(profile.ValFloat, 32)
		st.Values.AddN(uint64(math.Float32bits(0)), 3000)
		st.Values.AddN(uint64(math.Float32bits(1)), 600)
		for v := 0; v < 40; v++ {
			st.Values.AddN(uint64(math.Float32bits(float32(v)*0.25+2)), 12)
		}
	}
	sst := p.PCStatOf(profile.PCKey{Context: k.ID, PC: pcS, Access: profile.Store})
	sst.Accesses += 2048
	sst.Values = profile.NewValueSketch(profile.ValInt, 32)
	sst.Values.AddN(0, 1900)
	sst.Values.AddN(7, 148)

	alloc := p.Path(Main, profile.Frame{Kind: profile.KindHostFrame, Module: "/app/bin/stencil", Function: "_Z10alloc_gridm", File: "grid.cc", Line: 17})
	p.Add(alloc.ID, profile.AllocBytes, 1<<24)
	p.Add(alloc.ID, profile.AllocCount, 1)
	grid := profile.ObjectIDOf(alloc.ID, 1<<24)
	p.Objects[grid] = &profile.DataObject{ID: grid, Context: alloc.ID, Size: 1 << 24, Count: 1}
	p.Spatial[profile.SpatialKey{Context: k.ID, Object: grid, PC: pcA, Access: profile.Load}] += 1024
	p.Spatial[profile.SpatialKey{Context: k.ID, Object: grid, PC: pcS, Access: profile.Store}] += 512
	for _, a := range []profile.Access{profile.Load, profile.Store} {
		ost := p.ObjStatOf(profile.ObjectKey{Context: k.ID, Object: grid, Access: a})
		ost.Accesses += 4096
		ost.Values = profile.NewValueSketch(profile.ValFloat, 32)
		ost.Values.AddN(uint64(math.Float32bits(0)), 2500)
		ost.Values.AddN(uint64(math.Float32bits(1.5)), 900)
		ost.Values.AddN(uint64(math.Float32bits(-3)), 696)
	}
	must(p.AsItem(r, seq))
	return p
}

// KernelNode returns the stencil kernel's node under main/solver_step.
func KernelNode(p *profile.Profile) profile.NodeID {
	return profile.ChildID(profile.ChildID(profile.ChildID(profile.RootID, Main), Step), Kernel)
}

// Advice returns advice as the analysis would give it for Profile.
func Advice(p *profile.Profile) []analysis.Advice {
	k := KernelNode(p)
	kfn := profile.FuncIDOf(AppModule, StencilKernel)
	pc := profile.PC{Func: kfn, Offset: 0x110}
	grid := profile.ObjectID(0)
	for id, o := range p.Objects {
		if o.Size == 1<<24 {
			grid = id
		}
	}
	loopNode := profile.ChildID(profile.ChildID(k, Body), Loop)
	return []analysis.Advice{
		{
			Kind: "redundant load elimination", Category: "redundancy",
			Hint:       "The load at stencil.cu:31 reads the same value it read before in 73% of its executions; keep it in a register across loop iterations.",
			Importance: 0.41, Speedup: 1.32,
			Hotspots: []analysis.Where{{Context: profile.ChildID(loopNode, Line31), Kernel: "stencil_2d", Function: "stencil_2d", File: "stencil.cu", Line: 31, Loop: "stencil.cu:30", PC: &pc, SASS: "LDG.E R4, [R2.64]"}},
			Evidence: "temporal load redundancy 3500/8192 = 43% at <0x110,0x110>; 0.0 is 73% of the values",
		},
		{
			Kind: "constant replacement", Category: "redundancy",
			Hint:       "grid (16 MiB, grid.cc:17) holds 0.0 in 61% of the loaded words; skip the zero halo or store it sparsely.",
			Importance: 0.22, Speedup: 1.12,
			Hotspots: []analysis.Where{{Context: k, Kernel: "stencil_2d", Object: &grid}},
			Evidence: "spatial redundancy 1024/4096 loads of grid",
		},
		{
			Kind: "load imbalance", Category: "imbalance",
			Hint:       "Rank 3 spends 3.0x the mean kernel time in stencil_2d; rebalance the domain decomposition.",
			Importance: 0.18, Speedup: 1.45,
			Hotspots: []analysis.Where{{Context: k, Kernel: "stencil_2d"}},
			Ranks:    []int32{3},
			Evidence: "gpu.time_ns max/mean = 2.33 (rank 3)",
		},
		{
			Kind: "stall: long scoreboard", Category: "stall",
			Hint:       "Global loads at stencil.cu:31 stall dependent instructions; prefetch into shared memory.",
			Importance: 0.35, Speedup: 1.2,
			Hotspots: []analysis.Where{{Context: profile.ChildID(loopNode, Line31), Kernel: "stencil_2d", File: "stencil.cu", Line: 31}},
			Evidence: "long_scoreboard 62% of the kernel's samples",
		},
	}
}
