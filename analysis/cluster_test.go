package analysis

import (
	"math"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/symname"
)

// Rank 1 of 4 gets twice the work of each other rank in one kernel.
func TestImbalanceNamesHeavyRank(t *testing.T) {
	merged := ranksMerged(t, 4, func(p *profile.Profile, r int32) {
		b := newKernel(p, "main", "_Z5relaxPfli")
		work := uint64(1000)
		if r == 1 {
			work = 2000
		}
		p.Add(b.k.ID, profile.GPUTime, work*10)
		p.Add(b.k.ID, profile.GPULaunches, 10)
		c := newKernel(p, "other", "_Z4tiny")
		p.Add(c.k.ID, profile.GPUTime, 5000)
	})
	x := NewIndex(merged)
	as := Imbalance(x, DefaultImbalance)
	if len(as) != 1 {
		t.Fatalf("%d imbalance advice, want 1: %+v", len(as), as)
	}
	a := as[0]
	// mean = (2000+1000*3)*10/4 = 12500; max = 20000.
	if symname.Short(a.Hotspots[0].Kernel) != "relax" || len(a.Ranks) != 1 || a.Ranks[0] != 1 || !approx(a.Speedup, 20000.0/12500) {
		t.Fatalf("advice %+v", a)
	}
	if !strings.Contains(a.Hint, "longer instances") || !approx(a.Importance, (20000-12500)/20000.0) {
		t.Fatalf("hint %q importance %v", a.Hint, a.Importance)
	}
	st := x.Stats(a.Hotspots[0].Context)
	if st.InstanceMean != 50000.0/40 || st.InstanceMax != 2000 || st.InstanceMin != 1000 || !approx(st.InstanceStddev, math.Sqrt(3)/4*1000) {
		t.Fatalf("stats %+v", st)
	}
}

// A rank's time per launch is over its timed launches: a merged profile
// also counts the launches of a pass that timed nothing (the instance
// histogram counts 3 of rank 0's 6), and without a histogram all launches.
func TestPerLaunchOverTimedLaunches(t *testing.T) {
	merged := ranksMerged(t, 2, func(p *profile.Profile, r int32) {
		b := newKernel(p, "main", "_Z5relaxPfli")
		p.Add(b.k.ID, profile.GPUTime, 300)
		p.Add(b.k.ID, profile.GPULaunches, 6)
		if r == 0 {
			p.Add(b.k.ID, profile.Metric(timeHistPrefix+"26"), 3)
		}
	})
	x := NewIndex(merged)
	st := x.Stats(x.Kernels[0])
	if st.PerLaunch[0] != 100 || st.PerLaunch[1] != 50 {
		t.Fatalf("per launch %v, want rank 0 100 ns (3 timed) and rank 1 50 ns (6 launches)", st.PerLaunch)
	}
}

func TestMemoryDivergence(t *testing.T) {
	p := profile.New("j")
	b := newKernel(p, "main", "_Z8push_aosP8Particlelf")
	id, pc := b.inst(b.body.ID, b.fid, 13, 0x80)
	b.access(id, pc, profile.Load, 0, profile.ValFloat, 32, 3200, func(i int) uint64 { return f32(float32(i)) })
	p.Add(id, profile.MemWarpAccess, 100)
	p.Add(id, profile.MemSectors, 3200) // every lane its own sector
	ok, pcOk := b.inst(b.body.ID, b.fid, 14, 0x90)
	b.access(ok, pcOk, profile.Load, 0, profile.ValFloat, 32, 3200, func(i int) uint64 { return f32(float32(i)) })
	p.Add(ok, profile.MemWarpAccess, 100)
	p.Add(ok, profile.MemSectors, 400)
	seal(t, p, 0)
	x := NewIndex(p)
	per, tot := MemoryDivergence(x, b.k.ID, nil)
	if len(per) != 2 || per[0].Degree != 32 || per[0].Ideal != 4 || per[0].Efficiency() != 0.125 || per[1].Efficiency() != 1 || tot.Degree != 18 {
		t.Fatalf("divergence %+v total %+v", per, tot)
	}
	as := Divergence(x, nil, Options{MinImportance: 0.01})
	a := findKind(t, as, OptGlobalAdjust)
	if a.Hotspots[0].Line != 13 || len(a.Hotspots) != 1 || a.Importance != 0.5 || a.Speedup != 0 {
		t.Fatalf("advice %+v", a)
	}
}

func TestBranchDivergenceFromThreadCounts(t *testing.T) {
	p := profile.New("j")
	b := newKernel(p, "main", "k")
	half, _ := b.inst(b.body.ID, b.fid, 20, 0x100)
	p.Add(half, profile.InstExecuted, 1000)
	p.Add(half, InstThreadExecuted, 16000) // 50% of the lanes
	full, _ := b.inst(b.body.ID, b.fid, 10, 0x10)
	p.Add(full, profile.InstExecuted, 1000)
	p.Add(full, InstThreadExecuted, 32000)
	seal(t, p, 0)
	as := Divergence(NewIndex(p), nil, Options{MinImportance: 0.01})
	a := findKind(t, as, OptBranchDivergence)
	if a.Hotspots[0].Line != 20 || a.Importance != 0.5 || !strings.Contains(a.Evidence, "thread/warp executions") {
		t.Fatalf("advice %+v", a)
	}
}

// Without thread counts, the lanes of the memory accesses at a kernel source
// line stand for the code inlined at that line.
func TestBranchDivergenceFromMemoryLanes(t *testing.T) {
	p := profile.New("j")
	b := newKernel(p, "main", "k")
	inl := p.Child(b.body.ID, profile.Frame{Kind: profile.KindInlined, Function: "path_odd", File: "k.cu", Line: 24})
	loop := b.loop(inl.ID, 12, 0x200)
	body, _ := b.inst(loop, b.fid, 12, 0x210)
	p.Add(body, profile.InstExecuted, 5000)
	st, pcSt := b.inst(b.body.ID, b.fid, 24, 0x300)
	b.access(st, pcSt, profile.Store, 0, profile.ValFloat, 32, 1600, func(i int) uint64 { return f32(float32(i)) })
	p.Add(st, profile.MemWarpAccess, 100) // 16 lanes per warp access
	p.Add(st, profile.InstExecuted, 100)
	seal(t, p, 0)
	x := NewIndex(p)
	eff, how := simt(x, b.k.ID, nil)
	if eff[body] != 0.5 || !strings.Contains(how, "memory accesses") {
		t.Fatalf("loop body efficiency %v (%s)", eff[body], how)
	}
	a := findKind(t, Divergence(x, nil, Options{MinImportance: 0.01}), OptBranchDivergence)
	if a.Hotspots[0].Line != 12 || a.Hotspots[0].Loop != "k.cu:12" {
		t.Fatalf("hotspot %+v", a.Hotspots[0])
	}
}

func TestEstimators(t *testing.T) {
	if StallElimination(100, 20) != 1.25 || LatencyHiding(100, 80, 20) != 1.25 || LatencyHiding(100, 10, 50) != 100.0/90 {
		t.Fatal("eq. 3/5")
	}
	// Eq. 9-11: halving the warps per scheduler (8 -> 4) at issue ratio 0.1.
	i8, i4 := 1-math.Pow(0.9, 8), 1-math.Pow(0.9, 4)
	if got, want := Parallelism(8, 4, 0.1, 1), (i4/i8)/(4.0/8); !approx(got, want) {
		t.Fatalf("eq. 11: %v want %v", got, want)
	}
}
