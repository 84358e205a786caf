package analysis

import (
	"fmt"
	"strings"
	"testing"

	"gpuprof/profile"
)

// onGPUs builds n ranks of one host, rank r on GPU r mod gpus (as MPI codes
// bind them by local rank), each running relax for time[r] × 10 ns over
// 10 launches; in PC sampling, the lowest rank of each GPU sampled it.
func onGPUs(t *testing.T, gpus int, time []uint64) *profile.Profile {
	t.Helper()
	return ranksMerged(t, int32(len(time)), func(p *profile.Profile, r int32) {
		ri := p.Rank(r)
		d := int(r) % gpus
		ri.Host, ri.GPU, ri.Device = "node0", "NVIDIA H100 80GB HBM3", fmt.Sprint(d)
		ri.GPUUUID = fmt.Sprintf("GPU-%08x-1111-2222-3333-444455556666", 0xa0+d)
		ri.Mode, ri.PCSampling = "pcsampling", "sampled"
		if int(r) >= gpus {
			ri.PCSampling = "kernel times only: another process PC-samples " + ri.GPUUUID
		}
		b := newKernel(p, "main", "_Z5relaxPfli")
		p.Add(b.k.ID, profile.GPUTime, time[r]*10)
		p.Add(b.k.ID, profile.GPULaunches, 10)
	})
}

func near(a, b float64) bool { return approx(a, b) }

// Ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1; the heavy ranks 1 and 2 sit
// one on each GPU (the multigpu run's plan): the GPUs' means agree and
// the spread is within each GPU.
func TestImbalanceWithinGPUs(t *testing.T) {
	p := onGPUs(t, 2, []uint64{1000, 2000, 2000, 1000})
	x := NewIndex(p)
	gs := GPUsOf(p)
	sp, ok := SplitByGPU(p, gs, x.Kernels[0], 1.1, 1.1)
	if !ok {
		t.Fatal("no split")
	}
	// μ = (10+20+20+10)k/4 = 15000; each GPU: sum 30000, mean 15000,
	// max 20000 (rank 2 on GPU 0, rank 1 on GPU 1), within 20000/15000.
	for i, want := range []struct {
		argmax int32
		heavy  int32
	}{{2, 2}, {1, 1}} {
		s := sp.Per[i]
		if s.Ranks != 2 || s.Sum != 30000 || s.Mean != 15000 || s.Max != 20000 || s.ArgMax != want.argmax || !near(s.Within, 4.0/3) ||
			len(s.Heavy) != 1 || s.Heavy[0] != want.heavy {
			t.Errorf("GPU %d: %+v", i, s)
		}
	}
	if sp.Mean != 15000 || sp.Slowest != 1 || sp.SlowestGPU != 1 || !near(sp.Ratio, 4.0/3) || !near(sp.Within, 4.0/3) || !near(sp.Between, 1) ||
		!near(sp.MeanRatio, 1) || !near(sp.LoadRatio, 1) || sp.Where != "within GPUs" {
		t.Fatalf("split %+v", sp)
	}
	as := Imbalance(x, DefaultImbalance)
	if len(as) != 1 {
		t.Fatalf("%d advice", len(as))
	}
	a := as[0]
	if fmt.Sprint(a.Ranks) != "[1 2]" || !strings.Contains(a.Hint, "among the ranks sharing a GPU (max/mean within GPU 0 1.33, GPU 1 1.33), not between GPUs (their mean per rank: max/mean 1.00)") ||
		!strings.Contains(a.Hint, "Heavy: rank 1 on GPU 1, rank 2 on GPU 0.") {
		t.Errorf("hint %q", a.Hint)
	}
	if !strings.Contains(a.Evidence, "GPU 0: 2 ranks, sum 30us, mean 15us, max 20us at rank 2, within 1.33") ||
		!strings.Contains(a.Evidence, "slowest rank 1: 1.33 = 1.33 within GPU 1 × 1.00 between") ||
		!strings.Contains(a.Evidence, "heavy rank 1 PC-sampled its GPU, which lengthens kernels, while 2 ranks gave kernel times only") {
		t.Errorf("evidence %q", a.Evidence)
	}
}

// The ranks of GPU 0 take three times those of GPU 1, alike on each GPU.
func TestImbalanceBetweenGPUs(t *testing.T) {
	p := onGPUs(t, 2, []uint64{3000, 1000, 3000, 1000})
	x := NewIndex(p)
	gs := GPUsOf(p)
	sp, _ := SplitByGPU(p, gs, x.Kernels[0], 1.1, 1.1)
	// μ = 20000; GPU 0 mean 30000 (within 1), GPU 1 mean 10000;
	// loads 60000 and 20000 against 40000.
	if sp.Mean != 20000 || sp.Slowest != 0 || sp.SlowestGPU != 0 || !near(sp.Ratio, 1.5) || !near(sp.Within, 1) || !near(sp.Between, 1.5) ||
		!near(sp.MeanRatio, 1.5) || !near(sp.LoadRatio, 1.5) || !near(sp.WithinMax, 1) || sp.Where != "between GPUs" {
		t.Fatalf("split %+v", sp)
	}
	if h := sp.HeavyOn(gs); h != "ranks 0,2 on GPU 0" {
		t.Errorf("heavy %q", h)
	}
	a := Imbalance(x, DefaultImbalance)[0]
	if !strings.Contains(a.Hint, "between GPUs: the ranks of GPU 0 take 1.50× the job's mean (load max/mean over the GPUs 1.50)") {
		t.Errorf("hint %q", a.Hint)
	}
}

// Rank 0 is heavy on a GPU whose ranks are heavier than the job's: the
// slowest rank's 2.00 = 1.33 within GPU 0 × 1.50 between.
func TestImbalanceWithinAndBetweenGPUs(t *testing.T) {
	p := onGPUs(t, 2, []uint64{4000, 1000, 2000, 1000})
	x := NewIndex(p)
	gs := GPUsOf(p)
	sp, _ := SplitByGPU(p, gs, x.Kernels[0], 1.1, 1.1)
	if sp.Slowest != 0 || !near(sp.Ratio, 2) || !near(sp.Within, 4.0/3) || !near(sp.Between, 1.5) || !near(sp.Ratio, sp.Within*sp.Between) ||
		sp.Where != "within and between GPUs" || len(sp.Per[0].Heavy) != 1 || len(sp.Per[1].Heavy) != 0 {
		t.Fatalf("split %+v", sp)
	}
	if s := sp.Sentence(gs); !strings.Contains(s, "2.00× = 1.33 within GPU 0 × 1.50") {
		t.Errorf("sentence %q", s)
	}
}

// Balanced ranks on GPUs serving different numbers of ranks: no advice,
// but GPU 0 carries twice GPU 1's load.
func TestGPULoadWithBalancedRanks(t *testing.T) {
	p := onGPUs(t, 2, []uint64{1000, 1000, 1000})
	x := NewIndex(p)
	if as := Imbalance(x, DefaultImbalance); len(as) != 0 {
		t.Fatalf("advice on balanced ranks: %+v", as)
	}
	sp, _ := SplitByGPU(p, GPUsOf(p), x.Kernels[0], 1.1, 1.1)
	if sp.Where != "" || !near(sp.MeanRatio, 1) || !near(sp.LoadRatio, 20000/15000.0) || sp.Per[0].Ranks != 2 || sp.Per[1].Ranks != 1 {
		t.Fatalf("split %+v", sp)
	}
}

func TestGPUsOfGroupsAndSampling(t *testing.T) {
	p := profile.New("j")
	for _, c := range []struct {
		r         int32
		host, dev string
		uuid, pcs string
	}{
		{0, "b", "1", "GPU-bbbb0001-x", "sampled"},
		{1, "a", "0", "GPU-aaaa0000-x", "sampled"},
		{2, "b", "0", "GPU-bbbb0000-x", "sampled"},
		{3, "b", "1", "GPU-bbbb0001-x", "kernel times only: another process PC-samples GPU-bbbb0001-x"},
		{4, "a", "0", "GPU-aaaa0000-x", "kernel times only: another process PC-samples GPU-aaaa0000-x+sampled"}, // a second pass sampled
		{5, "b", "10", "", ""},
	} {
		ri := p.Rank(c.r)
		ri.Host, ri.Device, ri.GPUUUID, ri.PCSampling, ri.GPU = c.host, c.dev, c.uuid, c.pcs, "H100"
	}
	gs := GPUsOf(p)
	var got []string
	for i, g := range gs.List {
		got = append(got, fmt.Sprintf("%s|%v|%v|%v", gs.Describe(i), g.Ranks, g.Sampled, g.TimesOnly))
	}
	want := []string{
		"GPU 0 on b (GPU-bbbb0000, H100)|[2]|[2]|[]",
		"GPU 1 on b (GPU-bbbb0001, H100)|[0 3]|[0]|[3]",
		"GPU 10 on b (H100)|[5]|[]|[]",
		"GPU 0 on a (GPU-aaaa0000, H100)|[1 4]|[1 4]|[]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || !gs.Known || gs.Hosts != 2 || !gs.Shared() || gs.Of[3] != 1 {
		t.Fatalf("GPUs:\n%s\nwant:\n%s\n%+v", strings.Join(got, "\n"), strings.Join(want, "\n"), gs)
	}
	if n := gs.SamplingNote(); n != "one process per GPU is PC-sampled: ranks 2 (GPU 0 on b), 0 (GPU 1 on b), 1 (GPU 0 on a), 4 (GPU 0 on a) sampled; 1 other rank gave kernel times only, as the policy has it, not a failure (ranks 3)" {
		t.Errorf("note %q", n)
	}
	p.Rank(6).Host = "a"
	if gs := GPUsOf(p); gs.Known || gs.Grouped() {
		t.Errorf("rank 6 has no GPU identity, yet the GPUs are known")
	}
	if ShortUUID("GPU-3f2a1b9c-1111-2222") != "GPU-3f2a1b9c" || ShortUUID("MIG-abc-1") != "MIG-abc" || ShortUUID("x") != "x" {
		t.Error("ShortUUID")
	}
}

// Advice built from PC samples names the ranks whose samples it rests on
// when others ran the kernel with kernel times only; imbalance advice
// rests on kernel times, not samples.
func TestSampledRanksNote(t *testing.T) {
	p := ranksMerged(t, 4, func(p *profile.Profile, r int32) {
		ri := p.Rank(r)
		ri.Host, ri.Device, ri.GPUUUID = "n", fmt.Sprint(r%2), fmt.Sprintf("GPU-%d", r%2)
		ri.PCSampling = "sampled"
		b := newKernel(p, "main", "k")
		p.Add(b.k.ID, profile.GPUTime, 100)
		if r >= 2 {
			ri.PCSampling = "kernel times only: another process PC-samples " + ri.GPUUUID
			return
		}
		id, _ := b.inst(b.body.ID, b.fid, 3, 0x10)
		p.Add(id, profile.InstSamples, 50)
	})
	x := NewIndex(p)
	gs := GPUsOf(p)
	k := x.Kernels[0]
	stall := Advice{Category: CatStall, Hotspots: []Where{{Context: k}}, Evidence: "e"}
	noteSampledRanks(x, gs, &stall)
	if fmt.Sprint(stall.SampledRanks) != "[0 1]" ||
		stall.Evidence != "e; rests on the PC samples of ranks 0 (GPU 0), 1 (GPU 1); ranks 2, 3 ran the kernel with kernel times only (one process per GPU is sampled)" {
		t.Errorf("stall advice %+v", stall)
	}
	imb := Advice{Category: CatImbalance, Hotspots: []Where{{Context: k}}, Evidence: "e"}
	noteSampledRanks(x, gs, &imb)
	if imb.SampledRanks != nil || imb.Evidence != "e" {
		t.Errorf("imbalance advice %+v", imb)
	}
}

func TestRankSet(t *testing.T) {
	for _, c := range []struct {
		in   []int32
		want string
	}{
		{nil, ""}, {[]int32{3}, "3"}, {[]int32{1, 0}, "0,1"}, {[]int32{0, 1, 2, 3}, "0-3"},
		{[]int32{0, 2, 4, 6, 8}, "0-8/2"}, {[]int32{1, 3, 5, 6, 7, 8}, "1-5/2,6-8"}, {[]int32{0, 5, 9}, "0,5,9"},
	} {
		if got := RankSet(c.in); got != c.want {
			t.Errorf("RankSet(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Kernel times of the value-tracing pass alone, with ranks sharing GPUs,
// are host-timed under contention: the advice says so and names no ranks
// and no speedup; with one rank per GPU it keeps its estimate.
func TestHostTimedSharedGPUsNameNoRanks(t *testing.T) {
	redundancy := func(p *profile.Profile) {
		for _, ri := range p.Ranks {
			ri.Mode, ri.PCSampling = "redundancy", ""
		}
	}
	shared := onGPUs(t, 2, []uint64{1000, 2000, 2000, 1000})
	redundancy(shared)
	as := Imbalance(NewIndex(shared), DefaultImbalance)
	if len(as) != 1 || as[0].Speedup != 0 || as[0].Ranks != nil || !strings.Contains(as[0].SpeedupNA, "up to 2 ranks share a GPU") ||
		!strings.Contains(as[0].Hint, "cannot tell which ranks are heavy") {
		t.Fatalf("shared GPUs, value tracing only: %+v", as)
	}
	own := onGPUs(t, 4, []uint64{1000, 2000, 2000, 1000})
	redundancy(own)
	as = Imbalance(NewIndex(own), DefaultImbalance)
	if len(as) != 1 || !near(as[0].Speedup, 4.0/3) || fmt.Sprint(as[0].Ranks) != "[1 2]" {
		t.Fatalf("one rank per GPU, value tracing only: %+v", as)
	}
}
