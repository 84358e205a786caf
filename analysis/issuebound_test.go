package analysis

import (
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/sass"
)

// coefLoop is a loop loading coef[k & 7] (0x60) and accumulating it into
// R8 (0x70), with the loop's address arithmetic at 0x20-0x50 and its
// control at 0x80-0xa0.
const coefLoop = `
		#line 7
		LDC.64 R2, c[0x0][0x218]
		MOV R12, RZ
		.L_x_1:
		#line 8
		SHF.L.U32 R4, R12, 0x2, RZ
		LOP3.LUT R4, R4, 0x1c, RZ, 0xc0, !PT
		IADD3 R6, P1, R4, R2, RZ
		IADD3.X R7, RZ, R3, RZ, P1, !PT
		LDG.E R5, desc[UR4][R6.64] {W0 S1}
		FFMA R8, R8, R5, 1 {B0 S4}
		IADD3 R12, R12, 0x1, RZ {S1}
		ISETP.NE.AND P0, PT, R12, R13, PT {S4}
		@P0 BRA ` + "`(.L_x_1)" + ` {S1}
		#line 9
		EXIT
`

// coefLoopLaunch is coefLoop's kernel in one launch of 132 blocks of 128
// threads taking 1000 ns, with instruction counts for 100 warps: each
// instruction outside the loop once a warp, each in it loop times in all
// (0: no counts).
func coefLoopLaunch(t *testing.T, m *sass.Module, loop uint64) *sampled {
	t.Helper()
	s := sampledKernel(t, m, "k", mod1)
	s.p.Add(s.k.ID, profile.Metric(timeHistPrefix+"10"), 1)
	s.launches(1, 128, 132, 32)
	if loop == 0 {
		return s
	}
	for off := uint64(0); off <= 0xb0; off += 0x10 {
		n := loop
		if off < 0x20 || off == 0xb0 {
			n = 100
		}
		s.p.Add(s.node[off], profile.InstExecuted, n)
	}
	return s
}

// Scalar replacement in an issue-bound loop (reload_compute's shape): the
// loop reloads coef[k & 7] every iteration. Keeping the 8 values in
// registers needs the loop unrolled by 8, so all but 8 of the 64 loads per
// warp go with the 4 instructions that only compute their address, and
// 7/8 of the loop control (counter, compare, branch). From the counts (100
// warps counted; one launch of 132 blocks of 4 warps in 1000 ns at 1.98
// GHz on 528 schedulers) the schedulers issue in u = 528 × 579 / (528 ×
// 1.98 × 1000) of the cycles, and the share of the instructions removed,
// (5 × 6400 × 7/8 + 3 × 6400 × 7/8) / 57900, saves that share of u of the
// samples. Without the loaded values the period is unknown and eq. 3
// stands: the load's 2 samples and the 10 blamed on it, × 0.99 redundant.
func TestScalarReplacementIssueBound(t *testing.T) {
	for _, values := range []bool{true, false} {
		m := parseSASS(t, "k", coefLoop)
		s := coefLoopLaunch(t, m, 6400)
		k := s.k.ID
		s.stall(0x60, "selected", 2)
		s.stall(0x70, "long_scoreboard", 10)
		s.stall(0x70, "selected", 8)
		s.stall(0x80, "selected", 30)
		s.stall(0x90, "selected", 30)
		s.stall(0xb0, "selected", 20)
		if values {
			vs := profile.NewValueSketch(profile.ValFloat, 32)
			for v := uint64(0); v < 8; v++ {
				vs.AddN(0x3f000000+v, 125)
			}
			pc := profile.PC{Func: profile.FuncIDOf(mod1, "k"), Offset: 0x60}
			s.p.PCStatOf(profile.PCKey{Context: k, PC: pc, Access: profile.Load}).Values = vs
		}
		a := scalarReplacement(t, s, m, 0x60)
		M := 0.99 * 12
		if values {
			u := 528 * 579 / (528 * 1.98 * 1000)
			M = 100 * u * (5*6400*7/8.0 + 3*6400*7/8.0) / 57900
		}
		if want := 100 / (100 - M); !approx(a.Speedup, want) {
			t.Errorf("values %v: speedup %v, want %v (M = %.2f); %s", values, a.Speedup, want, M, a.Evidence)
		}
	}
}

// Latency hiding cannot outrun issue (item 41): the loop's FFMA waits 40
// samples for its load, behind 60 issued samples, so code reordering
// prices T/(T-min(A, M)) well above 1.25x. The counts say each of the 100
// counted warps issued 1,587 instructions (3 outside the loop, 9 × 17,600
// / 100 inside); one launch of 132 blocks of 4 warps on 528 schedulers in
// 1000 ns at 1.98 GHz issues in u = 1587 / 1980 of the cycles, so no
// reordering makes it more than 1980 / 1587 = 1.248x faster. Without the
// counts the estimate stands.
func TestLatencyHidingIssueBound(t *testing.T) {
	for _, counts := range []bool{true, false} {
		m := parseSASS(t, "k", coefLoop)
		loop := uint64(0) // no instruction counts
		if counts {
			loop = 17600
		}
		s := coefLoopLaunch(t, m, loop)
		s.stall(0x70, "long_scoreboard", 40)
		for _, o := range []uint64{0x20, 0x30, 0x40, 0x50, 0x60, 0x80} {
			s.stall(o, "selected", 10)
		}
		a := find(s.advise(t, m, Options{}), OptCodeReordering)
		if a == nil {
			t.Fatalf("counts %v: no code reordering", counts)
		}
		capped := strings.Contains(a.Evidence, "item 41")
		switch {
		case counts && (!capped || !approx(a.Speedup, 1980.0/1587)):
			t.Errorf("counts: code reordering %v, want the issue bound %v; %s", a.Speedup, 1980.0/1587, a.Evidence)
		case !counts && (capped || a.Speedup <= 1980.0/1587):
			t.Errorf("no counts: code reordering %v, want its own estimate above %v; %s", a.Speedup, 1980.0/1587, a.Evidence)
		}
	}
}
