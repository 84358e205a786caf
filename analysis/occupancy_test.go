package analysis

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/sass"
)

// Occupancy by number on the H100 (sm_90), as the CUDA occupancy
// calculator gives it.
func TestOccupancyH100(t *testing.T) {
	for _, tc := range []struct {
		threads, regs, shared int
		blocks, warps         int
		limiter               string
	}{
		// 64 registers × 32 lanes = 2048 per warp: 32 warps fit, 4 blocks of 8.
		{256, 64, 0, 4, 32, LimitRegisters},
		{256, 32, 0, 8, 64, LimitThreads},
		// 50 registers round up to 56 per thread (256 per warp): 1792 per warp, 36 warps, 4 blocks of 8.
		{256, 50, 0, 4, 32, LimitRegisters},
		// 32-thread blocks: the 32-blocks-per-SM limit leaves 32 warps.
		{32, 16, 0, 32, 32, LimitBlocks},
		// 48 KB of shared memory (+1 KB reserved) per block: 4 blocks in 228 KB.
		{128, 16, 48 << 10, 4, 16, LimitShared},
		{1024, 255, 0, 0, 0, LimitRegisters},
	} {
		o, err := H100.Occupancy(tc.threads, tc.regs, tc.shared)
		if err != nil {
			t.Fatal(err)
		}
		if o.BlocksPerSM != tc.blocks || o.WarpsPerSM != tc.warps || o.Limiter != tc.limiter {
			t.Errorf("%d threads, %d regs, %d B shared: %d blocks, %d warps, %s; want %d, %d, %s", tc.threads, tc.regs, tc.shared, o.BlocksPerSM, o.WarpsPerSM, o.Limiter, tc.blocks, tc.warps, tc.limiter)
		}
	}
	for _, bad := range [][3]int{{0, 32, 0}, {2048, 32, 0}, {256, 300, 0}, {256, 32, 300 << 10}} {
		if _, err := H100.Occupancy(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// The scheduler model: filling idle SMs scales by the busy SMs; more warps
// help only while the issue probability leaves idle cycles.
func TestSchedulerModel(t *testing.T) {
	m := schedulerModel{g: H100, rI: 0.1}
	// 66 blocks of 8 warps on 132 SMs, one block each at most: doubling the
	// grid to 132 blocks doubles the busy SMs.
	if s := m.rate(132, 8, 1) / m.rate(66, 8, 1); math.Abs(s-2) > 1e-9 {
		t.Errorf("block increase 66 -> 132 blocks: %.3f, want 2", s)
	}
	// 2 warps per scheduler with rI = 0.1 issue 19% of cycles, 16 warps 81%.
	s := m.rate(1e5, 8, 1) / m.rate(1e5, 8, 8)
	want := IssueRate(0.1, 2) / IssueRate(0.1, 16)
	if math.Abs(s-want) > 1e-9 {
		t.Errorf("occupancy 8 -> 64 warps: %.4f, want %.4f", 1/s, 1/want)
	}
	// A busy scheduler (rI near 1) gains nothing from more warps.
	busy := schedulerModel{g: H100, rI: 0.99}
	if s := busy.rate(1e5, 8, 8) / busy.rate(1e5, 8, 4); s > 1.001 {
		t.Errorf("issue-bound kernel gains %.3f from twice the warps", s)
	}
}

// The issue floor averages over the grid's waves: 1320 blocks of 8 warps
// on the H100's 132 SMs. With 8 blocks per SM they run one full wave of
// 1056 blocks (16 warps per scheduler) and a tail of 264 (2 blocks per SM,
// 4 warps per scheduler): a selected sample stands for 0.8×16 + 0.2×4 =
// 13.6 warps' issue, not 16. With 4 blocks per SM the same grid runs two
// full waves (1056 blocks at 8 warps per scheduler) and the same tail; at
// rI = 1/2, I(8) = 255/256 and I(4) = 15/16, so 100 selected samples need
// 100 × 13.6 × (0.8×256/255 + 0.2×16/15) = 1382.4 samples, where a full
// wave's 16 and 8 warps gave 100 × 16 × 256/255 = 1606.3.
func TestIssueFloorWaves(t *testing.T) {
	ws := waves(1320, 8, 132)
	if len(ws) != 2 || !approx(ws[0].share, 0.8) || ws[0].blocks != 8 || !approx(ws[1].share, 0.2) || !approx(ws[1].blocks, 2) {
		t.Fatalf("waves %+v, want 0.8 at 8 blocks per SM and 0.2 at 2", ws)
	}
	// A grid smaller than the SMs: one partial wave, one block per busy SM.
	if ws := waves(66, 8, 132); len(ws) != 1 || !approx(ws[0].share, 1) || ws[0].blocks != 1 {
		t.Fatalf("66 blocks: %+v", ws)
	}
	p := &par{cfg: LaunchConfig{Threads: 256, GridBlocks: 1320}, g: H100, occ: Occupancy{BlocksPerSM: 8}}
	want := 100 * 13.6 * (0.8*256/255 + 0.2*16/15.0)
	if got := p.issueSamples(100, 0.5, 4); !approx(got, want) {
		t.Fatalf("issue samples %v, want %v", got, want)
	}
}

// occupancyKernel is a kernel of 256-thread blocks at 39 registers (6
// blocks, 12 warps per scheduler, limited by registers; 8 blocks need at
// most 32). Its code names R36 at most, so 2 registers are reserved (39 =
// 36 + 1 + 2). With wide true, eight 128-bit loads keep R4..R35 and the
// address R2, R3 live at once: 34 values, 36 registers. Otherwise two
// loads and a sum keep 4 live.
func occupancyKernel(t *testing.T, wide bool) (*sass.Module, *sampled) {
	t.Helper()
	var b strings.Builder
	b.WriteString("#line 3\n")
	if wide {
		for r := 4; r < 36; r += 4 {
			fmt.Fprintf(&b, "LDG.E.128 R%d, desc[UR4][R2.64+0x%x] {W0 S1}\n", r, 4*(r-4))
		}
		b.WriteString("FADD R36, R4, R5 {B0 S4}\n")
		for r := 6; r < 36; r++ {
			fmt.Fprintf(&b, "FADD R36, R36, R%d {S4}\n", r)
		}
	} else {
		b.WriteString("LDG.E R35, desc[UR4][R2.64] {W0 S1}\nLDG.E R36, desc[UR4][R2.64+0x4] {W0 S1}\nFADD R36, R35, R36 {B0 S4}\n")
	}
	b.WriteString("STG.E desc[UR4][R2.64], R36 {S1}\nEXIT\n")
	m := parseSASS(t, "k", b.String())
	s := sampledKernel(t, m, "k", mod1)
	s.launches(1, 256, 10560, 39)
	return m, s
}

// Occupancy increase (item 19). With R_I = 10/100 the scheduler model
// gives I(16)/I(12) = (1-0.9^16)/(1-0.9^12) = 1.1353. That stands when 80
// of the samples are latency no warp hid (bound 100/20 = 5). When 85 of
// the 90 idle samples wait on a full LSU queue, more warps can fill 5 at
// most (bound 100/95): n/a. And when the code keeps 34 values live, 32
// registers per thread cannot hold them without spills: n/a whatever the
// samples.
func TestOccupancyIncreaseBounds(t *testing.T) {
	model := (1 - math.Pow(0.9, 16)) / (1 - math.Pow(0.9, 12))
	for _, c := range []struct {
		wide       bool
		lsb, throt uint64
		na         string
	}{
		{false, 80, 10, ""},
		{false, 5, 85, "more resident warps can give: in 5 of the kernel's 100 samples"},
		{true, 80, 10, "the code keeps 34 values live at once, 36 registers with the 2 the compiler reserves: at most 32"},
	} {
		m, s := occupancyKernel(t, c.wide)
		s.stall(0x00, "selected", 10)
		s.stall(0x10, "long_scoreboard", c.lsb)
		s.stall(0x10, "long_scoreboard_not_issued", c.lsb)
		s.stall(0x00, "lg_throttle", c.throt)
		s.stall(0x00, "lg_throttle_not_issued", c.throt)
		as := s.advise(t, m, Options{})
		a := findKind(t, as, OptOccupancyIncrease)
		switch {
		case c.na == "" && (!approx(a.Speedup, model) || a.SpeedupNA != ""):
			t.Errorf("%+v: speedup %v (n/a %q), want %v", c, a.Speedup, a.SpeedupNA, model)
		case c.na != "" && (a.Speedup != 0 || !strings.Contains(a.SpeedupNA, c.na)):
			t.Errorf("%+v: speedup %v, n/a %q, want n/a with %q", c, a.Speedup, a.SpeedupNA, c.na)
		}
	}
}

// Thread increase (item 19): blocks of 32 threads stop at 32 blocks per
// SM, 8 warps per scheduler; 64-thread blocks at 39 registers fit 25 (50
// warps, 12.5 per scheduler): I(12.5)/I(8) at R_I = 0.1. With 80 of the
// 90 idle samples latency the bound is 5 and the model stands. When they
// are barrier waits, the new warps join the same blocks and wait at the
// same barriers: nothing to fill, n/a. (An occupancy increase adds other
// blocks, whose warps do not wait there.)
func TestThreadIncreaseBarrierWaits(t *testing.T) {
	model := IssueRate(0.1, 12.5) / IssueRate(0.1, 8)
	for _, reason := range []string{"long_scoreboard", "barrier"} {
		m, s := occupancyKernel(t, false)
		s.p.Nodes[s.k.ID].Metrics = nil
		s.p.Add(s.k.ID, profile.GPUTime, 1000)
		s.launches(1, 32, 42240, 39)
		s.stall(0x00, "selected", 10)
		s.stall(0x10, reason, 80)
		s.stall(0x10, reason+"_not_issued", 80)
		s.stall(0x00, "lg_throttle", 10)
		s.stall(0x00, "lg_throttle_not_issued", 10)
		as := s.advise(t, m, Options{})
		a := findKind(t, as, OptThreadIncrease)
		if reason == "long_scoreboard" && (!approx(a.Speedup, model) || a.SpeedupNA != "") {
			t.Errorf("latency: speedup %v (n/a %q), want %v", a.Speedup, a.SpeedupNA, model)
		}
		if reason == "barrier" && (a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "in 0 of the kernel's 100 samples")) {
			t.Errorf("barrier waits: speedup %v, n/a %q", a.Speedup, a.SpeedupNA)
		}
	}
}
