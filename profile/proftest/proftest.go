// Package proftest builds random but realistic profiles for tests and
// benchmarks of every stage: SPMD-like items whose contexts are mostly shared
// between ranks, with some rank-specific ones.
package proftest

import (
	"fmt"
	"math/rand/v2"

	"gpuprof/profile"
)

// Shape sets the size of generated items.
type Shape struct {
	Kernels    int // kernels (launch contexts) per rank
	HostDepth  int // host frames above each kernel
	Lines      int // GPU source lines per kernel
	InstPer    int // instructions per line
	Pairs      int // temporal pairs per kernel
	Objects    int // data objects
	RankUnique int // percent of contexts that are rank-specific
	Sketches   bool
}

// Small is a shape for unit tests.
var Small = Shape{Kernels: 3, HostDepth: 3, Lines: 4, InstPer: 3, Pairs: 6, Objects: 3, RankUnique: 20, Sketches: true}

// Realistic approaches the scale benchmarks' per-rank size (~20k nodes, ~100k pairs per rank when called with Items=1).
var Realistic = Shape{Kernels: 40, HostDepth: 6, Lines: 60, InstPer: 8, Pairs: 2500, Objects: 200, RankUnique: 5, Sketches: true}

// Item returns item (rank, seq) of job, drawn from a generator seeded by
// (seed, rank, seq). done makes it the rank's done item after `batches`
// data items (it carries the batch count and no data).
func Item(job string, seed uint64, s Shape, rank int32, seq uint32, done bool, batches int64) *profile.Profile {
	p := profile.New(job)
	ri := p.Rank(rank)
	ri.Host = fmt.Sprintf("node%02d", rank/8)
	ri.GPU = "NVIDIA H100 80GB HBM3"
	ri.Mode = "redundancy"
	ri.Source = "synthetic"
	ri.BlockP, ri.KernelK, ri.ReuseP = 50, 10, 4
	p.Synthetic = true
	if done {
		ri.Batches = batches
		ri.ExitCode = 0
		if err := p.AsItem(rank, seq); err != nil {
			panic(err)
		}
		return p
	}
	rng := rand.New(rand.NewPCG(seed^uint64(rank)<<32, uint64(seq)+1))
	shared := rand.New(rand.NewPCG(seed, 7)) // same choices on every rank
	mod := profile.ModuleHash(0xc0be0000 + seed%16)
	p.AddModule(profile.Module{Hash: mod, Size: 1 << 16, Name: "app.cubin", SM: 90})
	ri.Launches = uint64(s.Kernels * 3)
	ri.LaunchesTraced = uint64(s.Kernels)
	for k := 0; k < s.Kernels; k++ {
		unique := shared.IntN(100) < s.RankUnique
		frames := []profile.Frame{}
		for d := 0; d < s.HostDepth; d++ {
			fn := fmt.Sprintf("host_fn_%d_%d", k%5, d)
			if unique && d == s.HostDepth-1 {
				fn = fmt.Sprintf("rank_path_%d", rank)
			}
			frames = append(frames, profile.Frame{Kind: profile.KindHostFrame, Module: "/app/bin/app", Function: fn, File: "app.cc", Line: uint32(10 + d + k)})
		}
		kname := fmt.Sprintf("_Z6kernel%di", k)
		frames = append(frames, profile.Frame{Kind: profile.KindKernel, Module: mod.String(), Function: kname})
		kn := p.Path(frames...)
		fid := p.AddFunc(mod, kname)
		p.Add(kn.ID, profile.GPUTime, uint64(1000+rng.IntN(1000))*uint64(1+rank%3))
		p.Add(kn.ID, profile.GPULaunches, 3)
		fn := p.Child(kn.ID, profile.Frame{Kind: profile.KindGPUFunction, Module: mod.String(), Function: kname})
		var pcs []profile.PC
		for l := 0; l < s.Lines; l++ {
			parent := fn.ID
			if l%4 == 0 {
				parent = p.Child(fn.ID, profile.Frame{Kind: profile.KindLoop, File: "k.cu", Line: uint32(20 + l), Offset: uint64(l * 0x40)}).ID
			}
			ln := p.Child(parent, profile.Frame{Kind: profile.KindLine, File: "k.cu", Line: uint32(20 + l)})
			for i := 0; i < s.InstPer; i++ {
				off := uint32((l*s.InstPer + i) * 16)
				in := p.Child(ln.ID, profile.Frame{Kind: profile.KindInstruction, Offset: uint64(off)})
				pc := profile.PC{Func: fid, Offset: off}
				pcs = append(pcs, pc)
				loads := uint64(rng.IntN(64))
				p.Add(in.ID, profile.MemLoads, loads)
				p.Add(in.ID, profile.RedTempLoad, loads/2)
				p.Add(in.ID, profile.StallMetric("long_scoreboard"), uint64(rng.IntN(10)))
				if loads > 0 {
					st := p.PCStatOf(profile.PCKey{Context: kn.ID, PC: pc, Access: profile.Load})
					st.Accesses += loads
					if s.Sketches {
						if st.Values == nil {
							st.Values = profile.NewValueSketch(profile.ValFloat, 32)
						}
						for v := 0; v < 4; v++ {
							st.Values.AddN(uint64(0x3f800000+v*shared.IntN(3)), loads/4+1)
						}
					}
				}
			}
		}
		for q := 0; q < s.Pairs && len(pcs) > 1; q++ {
			a, b := pcs[shared.IntN(len(pcs))], pcs[shared.IntN(len(pcs))]
			p.Temporal[profile.TemporalKey{Context: kn.ID, Old: a, New: b, Access: profile.Access(q % 2)}] += uint64(1 + rng.IntN(100))
		}
		for o := 0; o < s.Objects; o++ {
			actx := p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/app/bin/app", Function: "alloc_site", File: "app.cc", Line: uint32(100 + o)})
			oid := profile.ObjectIDOf(actx.ID, uint64(4096*(o+1)))
			if _, ok := p.Objects[oid]; !ok {
				p.Objects[oid] = &profile.DataObject{ID: oid, Context: actx.ID, Size: uint64(4096 * (o + 1)), Count: 1}
			}
			if len(pcs) > 0 && o%3 == k%3 {
				p.Spatial[profile.SpatialKey{Context: kn.ID, Object: oid, PC: pcs[o%len(pcs)], Access: profile.Store}] += uint64(1 + rng.IntN(50))
				p.ObjStatOf(profile.ObjectKey{Context: kn.ID, Object: oid, Access: profile.Store}).Accesses += 100
			}
		}
	}
	if err := p.AsItem(rank, seq); err != nil {
		panic(err)
	}
	return p
}

// Rank returns every item of one rank: `batches` data items and the done item.
func Rank(job string, seed uint64, s Shape, rank int32, batches int) []*profile.Profile {
	var out []*profile.Profile
	for q := 0; q < batches; q++ {
		out = append(out, Item(job, seed, s, rank, uint32(q), false, 0))
	}
	return append(out, Item(job, seed, s, rank, uint32(batches), true, int64(batches)))
}
