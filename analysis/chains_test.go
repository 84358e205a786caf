package analysis

import (
	"strings"
	"testing"

	"gpuprof/profile"
)

// A loop that chases pointers (LDG R6 from an address computed from the
// previous R6) and streams a strided array (LDG R12 from R14, advanced by
// an add): the chase's load is on a dependence cycle, the stream's is not.
// Both are divergent: the chase touches 32 sectors per warp access (4
// would do), the stream 16. The kernel is memory bound (80 of its 100
// samples wait on memory), so coalescing saves the excess traffic's share
// of them (item 1): the stream's 32 × (160 - 40) = 3840 of the 15360
// bytes, 20 samples, 100/80. The chase's excess is left out (item 20):
// with it the estimate was 80 × (3840 + 32 × 280) / 15360 = 66.7 samples,
// 3.0x. When the stream is coalesced, only the chase is divergent: n/a.
// Since item 31 the stream's saving also needs the instruction counts:
// the loop's 7 instructions run 10 times, the 2 after it once (72 issued
// over 20 selected samples, 3.6 cycles a sample), and from the stream's
// load to the add a warp spends (5 + 20) / 10 samples, 9 cycles, 4.5 ns at
// 1980 MHz: at most 9 / 1.98 / 398.4 of its accesses reached DRAM, and
// the 20 samples shrink to 0.23 (100/99.77).
func TestChainedLoadsLeaveTheTrafficModel(t *testing.T) {
	for _, streamSectors := range []uint64{160, 40} {
		m := parseSASS(t, "k", `
		.L_x_1:
		#line 4
		IMAD.WIDE R8, R6, 0x4, R10 {B0 S4}
		LDG.E R6, desc[UR4][R8.64] {W0 S1}
		LDG.E R12, desc[UR4][R14.64] {W1 S1}
		IADD3 R14, R14, 0x100, RZ {S1}
		FADD R16, R16, R12 {B1 S4}
		ISETP.NE.AND P0, PT, R6, RZ, PT {B0 S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		#line 5
		STG.E desc[UR4][R2.64], R16 {S1}
		EXIT
	`)
		f := m.Func("k")
		fv := &fnView{c: codeOf(m, f)}
		if !recurrentLoad(fv, 1) || recurrentLoad(fv, 2) {
			t.Fatalf("recurrent: chase %v, stream %v; want true, false", recurrentLoad(fv, 1), recurrentLoad(fv, 2))
		}
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x00, "long_scoreboard", 60)
		s.stall(0x10, "selected", 5)
		s.stall(0x20, "selected", 5)
		s.stall(0x30, "selected", 5)
		s.stall(0x40, "long_scoreboard", 20)
		s.stall(0x50, "selected", 5)
		for off := uint64(0); off <= 0x80; off += 0x10 {
			n := uint64(10)
			if off >= 0x70 {
				n = 1
			}
			s.p.Add(s.node[off], profile.InstExecuted, n)
		}
		for off, sectors := range map[uint64]uint64{0x10: 320, 0x20: streamSectors} {
			s.p.Add(s.node[off], profile.MemWarpAccess, 10)
			s.p.Add(s.node[off], profile.MemSectors, sectors)
			s.p.Add(s.node[off], profile.MemLoads, 320)
		}
		as := s.advise(t, m, Options{})
		a := findKind(t, as, OptGlobalAdjust)
		if streamSectors == 160 {
			want := StallElimination(100, 20*9/1.98/398.4)
			if !approx(a.Speedup, want) || !strings.Contains(a.Evidence, "dependent chain") {
				t.Errorf("chase and stream: speedup %v, want %v; %s", a.Speedup, want, a.Evidence)
			}
			continue
		}
		if a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "dependent chain") {
			t.Errorf("the chase alone: speedup %v, n/a %q", a.Speedup, a.SpeedupNA)
		}
	}
}

// A narrower type for the chased array keeps every load on the chain: its
// round trips stay whatever the width, so the estimate is n/a (item 20).
func TestNarrowerChainIsNA(t *testing.T) {
	m := parseSASS(t, "k", `
		.L_x_1:
		#line 4
		IMAD.WIDE R8, R6, 0x4, R10 {B0 S4}
		LDG.E R6, desc[UR4][R8.64] {W0 S1}
		ISETP.NE.AND P0, PT, R6, RZ, PT {B0 S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x00, "long_scoreboard", 90)
	s.stall(0x10, "selected", 10)
	ctx := s.p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "main", File: "main.cu", Line: 99})
	next := profile.ObjectIDOf(ctx.ID, 4096)
	s.p.Objects[next] = &profile.DataObject{ID: next, Context: ctx.ID, Size: 4096, Count: 1}
	pc := profile.PC{Func: profile.FuncIDOf(mod1, "k"), Offset: 0x10}
	id := s.node[0x10]
	s.p.Add(id, profile.MemLoads, 320)
	s.p.Add(id, profile.MemWarpAccess, 10)
	s.p.Add(id, profile.MemSectors, 320)
	s.p.PCStatOf(profile.PCKey{Context: s.k.ID, PC: pc, Access: profile.Load}).Accesses = 320
	os := s.p.ObjStatOf(profile.ObjectKey{Context: s.k.ID, Object: next, Access: profile.Load})
	os.Accesses = 320
	os.Values = profile.NewValueSketch(profile.ValInt, 32)
	for v := uint64(0); v < 4; v++ {
		os.Values.AddN(v, 80)
	}
	s.p.Spatial[profile.SpatialKey{Context: s.k.ID, Object: next, PC: pc, Access: profile.Load}] = 316
	as := s.advise(t, m, Options{})
	a := findKind(t, as, KindNarrowType)
	if a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "dependent chain") {
		t.Fatalf("narrower type on the chase: speedup %v, n/a %q; %s", a.Speedup, a.SpeedupNA, a.Evidence)
	}
}
