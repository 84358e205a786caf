package analysis

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/sass"
)

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func findKind(t *testing.T, as []Advice, kind string) Advice {
	t.Helper()
	for _, a := range as {
		if a.Kind == kind {
			return a
		}
	}
	var kinds []string
	for _, a := range as {
		kinds = append(kinds, a.Kind)
	}
	t.Fatalf("no %q advice among %v", kind, kinds)
	return Advice{}
}

const mod1 = profile.ModuleHash(0x1234)

// Two global loads feed one add: the scoreboards name both producers, eq. 1
// splits the add's 100 stall samples 4/6 : 1/5, and code reordering hides
// them behind the work that can move in front of the add (item 45): the
// IMAD after it, independent of the loads, with its 5 active samples (the
// IADD3 already sits between the loads and the add), so 5 of the 100
// samples go: 110/105, and each hotspot keeps 5/100 of its share.
func TestAdviseBlamesThroughSASS(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 5
		LDG.E R2, desc[UR4][R10.64] {W0 S1}
		LDG.E R3, desc[UR4][R12.64] {W1 S1}
		IADD3 R5, R6, R7, RZ {S4}
		#line 6
		FADD R4, R2, R3 {B01 S4}
		IMAD R9, R6, R7, R5 {S1}
		STG.E desc[UR4][R14.64], R4 {S1}
		EXIT
	`)
	c := codeOf(m, m.Func("k"))
	deps := 0
	for _, d := range c.Model.Insts[3].Deps {
		for _, x := range d.Defs {
			if d.SB && x >= 0 {
				deps++
			}
		}
	}
	if deps != 2 || c.Model.Insts[0].Cycles != 1 || c.Model.Insts[2].Cycles != 4 {
		t.Fatalf("model of FADD: %+v (cycles %d %d)", c.Model.Insts[3].Deps, c.Model.Insts[0].Cycles, c.Model.Insts[2].Cycles)
	}
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x00, "selected", 4)
	s.stall(0x10, "selected", 1)
	s.stall(0x30, "long_scoreboard", 100)
	s.stall(0x40, "selected", 5)
	s.launches(1, 128, 1, 16) // 16 + 2 registers per thread: no occupancy lost (item 29)
	as := s.advise(t, m, Options{})
	a := findKind(t, as, OptCodeReordering)
	if want := 110.0 / 105; !approx(a.Speedup, want) || !approx(a.Importance, 5.0/110) {
		t.Fatalf("speedup %v importance %v, want %v and %v", a.Speedup, a.Importance, want, 5.0/110)
	}
	h := a.Hotspots[0]
	w0, w1 := 4.0/6, 1.0/5
	if h.Line != 5 || !strings.Contains(h.SASS, "LDG.E R2") || !approx(h.Amount, 5*w0/(w0+w1)) || h.Pair == nil || h.Pair.Line != 6 {
		t.Fatalf("hotspot %+v", h)
	}
	if !approx(a.Hotspots[1].Amount, 5*w1/(w0+w1)) {
		t.Fatalf("second hotspot %+v", a.Hotspots[1])
	}
}

// A load in a loop feeding the loop's add: loop unrolling's eq. 6 bounds
// the hidden latency by the loop's active samples.
func TestAdviseLoopUnrolling(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		MOV R4, RZ {S1}
		.L_x_1:
		#line 4
		LDG.E R2, desc[UR4][R10.64] {W0 S2}
		IADD3 R10, R10, 0x4, RZ {S1}
		FADD R4, R4, R2 {B0 S4}
		ISETP.NE.AND P1, PT, R10, R12, PT {S4}
		@P1 BRA `+"`(.L_x_1)"+` {S1}
		#line 6
		STG.E desc[UR4][R14.64], R4 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x10, "selected", 5)
	s.stall(0x30, "selected", 5)
	s.stall(0x30, "long_scoreboard", 80)
	s.stall(0x60, "selected", 10) // outside the loop
	s.launches(1, 128, 1, 16)
	as := s.advise(t, m, Options{})
	a := findKind(t, as, OptLoopUnrolling)
	T := 100.0
	if want := T / (T - 10); !approx(a.Speedup, want) { // min(A_loop = 10, M = 80)
		t.Fatalf("loop unrolling speedup %v, want %v (%s)", a.Speedup, want, a.Evidence)
	}
	if h := a.Hotspots[0]; h.Loop != "k.cu:4" || h.Line != 4 || h.Amount != 80 {
		t.Fatalf("hotspot %+v", h)
	}
	// Code reordering's scope is the kernel: A = 20.
	if cr := findKind(t, as, OptCodeReordering); !approx(cr.Speedup, T/(T-20)) {
		t.Fatalf("code reordering %v", cr.Speedup)
	}
}

// Item 50: the load waits sit in the inner loop (line 5); the outer loop
// (line 3) has none of its own. Unrolling the outer loop copies its body,
// whose inner loops still run one after the other: only the inner loop's
// unrolling is raised, with its waits: min(its 15 active samples, 3/4 of
// 80 (item 43)) = 15 hide, 100/85.
func TestOuterLoopUnrollingLeavesInnerWaits(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 3
		MOV R4, RZ {S1}
		.L_x_1:
		MOV R10, R16 {S1}
		.L_x_2:
		#line 5
		LDG.E R2, desc[UR4][R10.64] {W0 S2}
		IADD3 R10, R10, 0x4, RZ {S1}
		FADD R4, R4, R2 {B0 S4}
		ISETP.NE.AND P1, PT, R10, R12, PT {S4}
		@P1 BRA `+"`(.L_x_2)"+` {S1}
		#line 3
		IADD3 R16, R16, 0x100, RZ {S1}
		ISETP.NE.AND P2, PT, R16, R18, PT {S4}
		@P2 BRA `+"`(.L_x_1)"+` {S1}
		#line 7
		STG.E desc[UR4][R14.64], R4 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x20, "selected", 5)
	s.stall(0x40, "selected", 5)
	s.stall(0x40, "long_scoreboard", 80)
	s.stall(0x50, "selected", 5)
	s.stall(0x70, "selected", 5)
	s.launches(1, 128, 1, 16)
	var loops []string
	for _, a := range s.advise(t, m, Options{}) {
		if a.Kind == OptLoopUnrolling {
			loops = append(loops, a.Hotspots[0].Loop)
			if a.Hotspots[0].Loop == "k.cu:5" && !approx(a.Speedup, 100.0/85) {
				t.Errorf("inner loop's unrolling %v, want 100/85 (%s)", a.Speedup, a.Evidence)
			}
		}
	}
	if len(loops) != 1 || loops[0] != "k.cu:5" {
		t.Fatalf("loop unrolling raised for loops %v, want the inner one alone (k.cu:5)", loops)
	}
}

// Stalls on spilled values: register increase eliminates them (eq. 3).
// spilledKernel is a kernel whose FADD waits on a spill load: 60 samples,
// 40 of them the FADD's wait on the LDL, 10 selected.
func spilledKernel(t *testing.T) (*sass.Module, *sampled) {
	t.Helper()
	m := parseSASS(t, "k", `
		#line 7
		LDL R2, [R1+0x10] {W0 S1}
		FADD R4, R2, R3 {B0 S4}
		STL [R1+0x14], R4 {R1 S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x10, "long_scoreboard", 40)
	s.stall(0x00, "lg_throttle", 10)
	s.stall(0x20, "selected", 2)
	s.stall(0x30, "selected", 8)
	return m, s
}

func TestAdviseRegisterIncrease(t *testing.T) {
	m, s := spilledKernel(t)
	as := s.advise(t, m, Options{})
	a := findKind(t, as, OptRegisterIncrease)
	if want := 60.0 / (60 - 52); !approx(a.Speedup, want) || a.Hotspots[0].Line != 7 {
		t.Fatalf("register increase %v (want %v), hotspot %+v", a.Speedup, want, a.Hotspots[0])
	}
}

// GPUscout's checks on a hand-written kernel.
func TestStaticCheck(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 2
		LDC.64 R2, c[0x0][0x210]
		LDC.64 R4, c[0x0][0x218]
		#line 3
		LDG.E R6, desc[UR4][R2.64]
		LDG.E R7, desc[UR4][R2.64+0x4]
		LDG.E R8, desc[UR4][R2.64+0x8]
		LDG.E R9, desc[UR4][R2.64+0xc]
		#line 4
		I2F R10, R6
		FADD R11, R10, R7
		STG.E desc[UR4][R4.64], R11
		#line 5
		REDG.E.ADD.STRONG.GPU desc[UR4][R4.64], R8
		STL [R1], R9
		EXIT
	`)
	as := StaticCheck(m)
	got := map[string]int{}
	for _, a := range as {
		got[a.Kind] = len(a.Hotspots)
	}
	want := map[string]int{StaticVectorize: 4, StaticRestrict: 4, StaticTexture: 4, StaticConversion: 1, StaticAtomics: 1, StaticSpill: 1}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%s: %d hotspots, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("unexpected findings: %v", got)
	}
	v := findKind(t, as, StaticVectorize)
	if v.Hotspots[0].Line != 3 || !strings.Contains(v.Hotspots[0].SASS, "LDG.E R6") {
		t.Fatalf("vectorize hotspot %+v", v.Hotspots[0])
	}
}

// A kernel whose only loads go through a pointer it also writes is not
// read-only; a .CONSTANT load is already on the read-only path.
func TestStaticReadOnlyNegative(t *testing.T) {
	m := parseSASS(t, "k", `
		LDC.64 R2, c[0x0][0x210]
		LDC.64 R4, c[0x0][0x218]
		LDG.E R6, desc[UR4][R2.64]
		LDG.E.CONSTANT R7, desc[UR4][R4.64]
		FADD R8, R6, R7
		STG.E desc[UR4][R2.64+0x100], R8
		EXIT
	`)
	for _, a := range StaticCheck(m) {
		if a.Kind == StaticRestrict || a.Kind == StaticTexture {
			t.Fatalf("flagged %s: %+v", a.Kind, a.Hotspots)
		}
	}
}

// Scalar replacement: the loop reloads s[0] and y[i] and stores y[i] at
// loop-invariant addresses; the estimate removes what those three cost.
func TestScalarReplacementEstimate(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 7
		LDC.64 R2, c[0x0][0x218]
		LDC.64 R8, c[0x0][0x220]
		MOV R12, RZ
		.L_x_1:
		#line 8
		LDG.E R5, desc[UR4][R2.64] {W0 S1}
		LDG.E R6, desc[UR4][R8.64] {W1 S1}
		FFMA R6, R6, R5, 1 {B01 S4}
		STG.E desc[UR4][R8.64], R6 {R2 S1}
		IADD3 R12, R12, 0x1, RZ {S1}
		ISETP.NE.AND P0, PT, R12, R13, PT {S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		#line 9
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x30, "selected", 2)
	s.stall(0x40, "selected", 2)
	s.stall(0x50, "long_scoreboard", 60)
	s.stall(0x50, "selected", 4)
	s.stall(0x60, "lg_throttle", 6)
	s.stall(0x70, "selected", 6)
	s.stall(0x90, "selected", 20)
	a := scalarReplacement(t, s, m, 0x30, 0x40)
	// T = 100. The loads cost their issue samples and the 60 stall samples
	// blamed on them; the store its throttle samples; all three go.
	T, M := 100.0, 2+2+60+6.0
	if !approx(a.Speedup, T/(T-M)) || a.Hotspots[0].Line != 8 || a.Hotspots[0].Loop != "k.cu:8" {
		t.Fatalf("speedup %v want %v; hotspot %+v; %s", a.Speedup, T/(T-M), a.Hotspots[0], a.Evidence)
	}
}

// scalarReplacement gives the loads at offs 1000 accesses each, makes 990
// of the first one's temporally redundant, and returns the scalar
// replacement advice.
func scalarReplacement(t *testing.T, s *sampled, m *sass.Module, offs ...uint32) Advice {
	t.Helper()
	fid := profile.FuncIDOf(mod1, "k")
	for _, off := range offs {
		pc := profile.PC{Func: fid, Offset: off}
		s.p.PCStatOf(profile.PCKey{Context: s.k.ID, PC: pc, Access: profile.Load}).Accesses = 1000
		s.p.Add(s.node[uint64(off)], profile.MemLoads, 1000)
	}
	pc := profile.PC{Func: fid, Offset: offs[0]}
	s.p.Temporal[profile.TemporalKey{Context: s.k.ID, Old: pc, New: pc, Access: profile.Load}] = 990
	as := s.advise(t, m, Options{})
	return findKind(t, as, KindScalarRepl)
}

// Scalar replacement when the running value already lives in a register:
// the loop reloads s[0] and stores y[i] every iteration without loading
// it (loop_reload's code). The store to the invariant address leaves the
// loop too, unless a barrier in the loop lets other threads read it.
func TestScalarReplacementStoreOnly(t *testing.T) {
	for _, bar := range []bool{false, true} {
		sync := "NOP {S1}"
		if bar {
			sync = "BAR.SYNC.DEFER_BLOCKING 0x0 {S1}"
		}
		m := parseSASS(t, "k", `
		#line 7
		LDC.64 R2, c[0x0][0x218]
		LDC.64 R8, c[0x0][0x220]
		MOV R12, RZ
		.L_x_1:
		#line 8
		LDG.E R5, desc[UR4][R2.64] {W0 S1}
		FFMA R6, R6, R5, 1 {B0 S4}
		STG.E desc[UR4][R8.64], R6 {R2 S1}
		`+sync+`
		IADD3 R12, R12, 0x1, RZ {S1}
		ISETP.NE.AND P0, PT, R12, R13, PT {S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		#line 9
		EXIT
	`)
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x30, "selected", 2)
		s.stall(0x40, "long_scoreboard", 60)
		s.stall(0x40, "selected", 4)
		s.stall(0x50, "lg_throttle", 6)
		s.stall(0x60, "selected", 8)
		s.stall(0x90, "selected", 20)
		a := scalarReplacement(t, s, m, 0x30)
		// T = 100: the load's 2 samples and the 60 blamed on it go; the
		// store's 6 throttle samples go with it unless the loop has a
		// barrier, which keeps the store in the loop: then only the
		// throttle relief of the load's going (one of the loop's two LSU
		// instructions, half of the store's lg_throttle) is saved.
		T, M := 100.0, 2+60+6.0
		if bar {
			M = 2 + 60 + 3
		}
		if !approx(a.Speedup, T/(T-M)) {
			t.Fatalf("barrier %v: speedup %v want %v; %s", bar, a.Speedup, T/(T-M), a.Evidence)
		}
	}
}

// A store before the loop to the address the loop stores to every
// iteration (loop_reload's y[i] = x[i]) is dead once scalar replacement
// keeps the value in a register and stores it once after the loop, unless
// a barrier between them lets other threads read it. T = 100: the load's
// 2 samples and the 60 blamed on it, the loop's store (6) and the store
// before the loop (5) go; behind a barrier the store before the loop
// stays and only its throttle relief (the loop's two of the three LSU
// instructions, 2/3 of 5) goes.
func TestScalarReplacementDeadStoreBeforeLoop(t *testing.T) {
	for _, bar := range []bool{false, true} {
		sync := "NOP {S1}"
		if bar {
			sync = "BAR.SYNC.DEFER_BLOCKING 0x0 {S1}"
		}
		m := parseSASS(t, "k", `
		#line 7
		LDC.64 R2, c[0x0][0x218]
		LDC.64 R8, c[0x0][0x220]
		MOV R12, RZ
		STG.E desc[UR4][R8.64], R12 {S1}
		`+sync+`
		.L_x_1:
		#line 8
		LDG.E R5, desc[UR4][R2.64] {W0 S1}
		FFMA R6, R6, R5, 1 {B0 S4}
		STG.E desc[UR4][R8.64], R6 {R2 S1}
		IADD3 R12, R12, 0x1, RZ {S1}
		ISETP.NE.AND P0, PT, R12, R13, PT {S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		#line 9
		EXIT
	`)
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x30, "lg_throttle", 5)
		s.stall(0x50, "selected", 2)
		s.stall(0x60, "long_scoreboard", 60)
		s.stall(0x60, "selected", 4)
		s.stall(0x70, "lg_throttle", 6)
		s.stall(0x80, "selected", 8)
		s.stall(0xb0, "selected", 15)
		a := scalarReplacement(t, s, m, 0x50)
		T, M := 100.0, 2+60+6+5.0
		if bar {
			M = 2 + 60 + 6 + 5*2/3.0
		}
		if !approx(a.Speedup, T/(T-M)) {
			t.Fatalf("barrier %v: speedup %v want %v; %s", bar, a.Speedup, T/(T-M), a.Evidence)
		}
	}
}

// A memory-bound kernel loads x[i] and w[i] (a single-value object written
// by a fill kernel) and stores y[i]: constant replacement removes the fill
// kernel and w's third of the traffic, so a third of the memory stalls.
// When the profile shows only the fill kernel's stores of w, the advice
// removes all the work of the one kernel it touches, and the estimate is
// taken over the job's GPU time: 1500 / (1500 - 500).
func TestConstantReplacementTrafficEstimate(t *testing.T) {
	for _, scaleReadsW := range []bool{true, false} {
		constantReplacementTraffic(t, scaleReadsW)
	}
}

func constantReplacementTraffic(t *testing.T, scaleReadsW bool) {
	scale := parseSASS(t, "scale", `
		#line 12
		LDG.E R2, desc[UR4][R4.64] {W0 S1}
		LDG.E R3, desc[UR4][R6.64] {W1 S1}
		FMUL R8, R2, R3 {B01 S4}
		STG.E desc[UR4][R10.64], R8 {S1}
		EXIT
	`)
	fill := parseSASS(t, "fill", `
		#line 7
		STG.E desc[UR4][R10.64], R8 {S1}
		EXIT
	`)
	p := profile.New("j")
	const modS, modF = profile.ModuleHash(0x51), profile.ModuleHash(0xf1)
	sf := sampledKernelIn(t, p, fill, "fill", modF)
	ss := sampledKernelIn(t, p, scale, "scale", modS)
	p.Add(sf.k.ID, profile.GPUTime, 500)
	p.Add(ss.k.ID, profile.GPUTime, 1000)
	sf.stall(0x00, "drain", 40)
	sf.stall(0x10, "selected", 10)
	ss.stall(0x00, "selected", 5)
	ss.stall(0x10, "selected", 5)
	ss.stall(0x20, "long_scoreboard", 80)
	ss.stall(0x30, "lg_throttle", 10)
	// The object w, written by fill with one value and read back by scale.
	ctx := p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/app", Function: "main", File: "main.cu", Line: 99})
	w := profile.ObjectIDOf(ctx.ID, 4096)
	p.Objects[w] = &profile.DataObject{ID: w, Context: ctx.ID, Size: 4096, Count: 1}
	type acc struct {
		s   *sampled
		off uint32
		a   profile.Access
		obj profile.ObjectID
	}
	wInScale := w
	if !scaleReadsW {
		wInScale = 0
	}
	for _, x := range []acc{{sf, 0x00, profile.Store, w}, {ss, 0x00, profile.Load, 0}, {ss, 0x10, profile.Load, wInScale}, {ss, 0x30, profile.Store, 0}} {
		fid := profile.FuncIDOf(x.s.mod, x.s.p.Nodes[x.s.k.ID].Frame.Function)
		pc := profile.PC{Func: fid, Offset: x.off}
		id := x.s.node[uint64(x.off)]
		m := profile.MemLoads
		if x.a == profile.Store {
			m = profile.MemStores
		}
		p.Add(id, m, 3200)
		p.Add(id, profile.MemWarpAccess, 100)
		p.Add(id, profile.MemSectors, 400)
		st := p.PCStatOf(profile.PCKey{Context: x.s.k.ID, PC: pc, Access: x.a})
		st.Accesses = 3200
		if x.obj != 0 {
			os := p.ObjStatOf(profile.ObjectKey{Context: x.s.k.ID, Object: w, Access: x.a})
			os.Accesses = 3200
			os.Values = profile.NewValueSketch(profile.ValFloat, 32)
			os.Values.AddN(uint64(math.Float32bits(0.5)), 3200)
			p.Spatial[profile.SpatialKey{Context: x.s.k.ID, Object: w, PC: pc, Access: x.a}] = 3199
		}
	}
	as, err := Advise(p, Modules{modS: scale, modF: fill}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := findKind(t, as, KindConstant)
	if !scaleReadsW {
		if want := 1500.0 / (1500 - 500); !approx(a.Speedup, want) || len(a.Hotspots) != 1 || a.KernelShare != 1 || !approx(a.JobGain(), 500.0/1500) {
			t.Fatalf("fill alone: speedup %v, want %v over the job; %d hotspots, kernel share %v; %s", a.Speedup, want, len(a.Hotspots), a.KernelShare, a.Evidence)
		}
		return
	}
	// fill goes away; scale keeps 1 - (90 memory samples × 1/3 of the bytes)/100.
	want := (500.0 + 1000) / (1000 * (1 - 30.0/100))
	if !approx(a.Speedup, want) || len(a.Hotspots) != 2 {
		t.Fatalf("speedup %v, want %v; %d hotspots; %s", a.Speedup, want, len(a.Hotspots), a.Evidence)
	}
}

// A shared load after a barrier takes 4 passes where 1 would do. Its cost
// is its own samples less the 30 barrier samples (they wait for the other
// warps, sampled at the instruction after BAR) plus the 16 blamed on it:
// 26, of which 3/4 are extra passes. The extra 30 wavefronts are 30/70 of
// the MIO queue's work (LDS 40 wavefronts, STS 10, LDG and STG 10 warp
// executions each), so 30/70 of the S2R's and the STS's 30 mio_throttle
// samples go too. GPA's rule alone counts the whole cost 56 × 3/4.
func TestSharedAdjustBarrierAndMIO(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 7
		S2R R0, SR_TID.X {S1}
		LDG.E R2, desc[UR4][R4.64] {W0 S1}
		STS [R6], R2 {B0 S1}
		BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
		#line 9
		LDS R8, [R7] {W1 S1}
		FADD R9, R8, 1 {B1 S4}
		STG.E desc[UR4][R10.64], R9 {S1}
		EXIT
	`)
	for _, gpa := range []bool{false, true} {
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x00, "mio_throttle", 20)
		s.stall(0x20, "mio_throttle", 10)
		s.stall(0x40, "barrier", 30)
		s.stall(0x40, "mio_throttle", 8)
		s.stall(0x40, "selected", 2)
		s.stall(0x50, "short_scoreboard", 16)
		s.stall(0x60, "selected", 4)
		s.stall(0x70, "selected", 10)
		s.p.Add(s.node[0x40], mSharedWarps, 10)
		s.p.Add(s.node[0x40], mSharedWavefronts, 40)
		s.p.Add(s.node[0x40], mSharedIdeal, 10)
		s.p.Add(s.node[0x20], mSharedWarps, 10)
		s.p.Add(s.node[0x20], mSharedWavefronts, 10)
		s.p.Add(s.node[0x20], mSharedIdeal, 10)
		s.p.Add(s.node[0x10], profile.MemWarpAccess, 10)
		s.p.Add(s.node[0x60], profile.MemWarpAccess, 10)
		as := s.advise(t, m, Options{GPAOnly: gpa})
		a := findKind(t, as, OptSharedAdjust)
		M := (40-30+16)*0.75 + 30*30/70.0
		if gpa {
			M = (40 + 16) * 0.75
		}
		if want := 100 / (100 - M); !approx(a.Speedup, want) || a.Hotspots[0].Line != 9 {
			t.Fatalf("GPA only %v: speedup %v, want %v; hotspot %+v; %s", gpa, a.Speedup, want, a.Hotspots[0], a.Evidence)
		}
	}
}

// Two copies of one loop, each a chain of dependent FFMAs (an unrolled
// outer loop, as in stall_exec): reordering hides the 130 waits on
// arithmetic (one eligible warp per scheduler, eq. 4) and fuses the two
// copies, so one of the two copies' loop control goes: the samples at the
// IADD3, ISETP and BRA other than the ISETP's wait (already hidden), and
// the branch_resolving and no_instructions samples, 21 per copy. T = 200,
// M = 130 + 21. When the second copy starts from the first's result the
// loops are not independent, nothing is fused, and M = 130.
func TestCodeReorderingFusesLoopCopies(t *testing.T) {
	for _, dependent := range []bool{false, true} {
		start := "FADD R10, R4, 1 {S4}"
		if dependent {
			start = "FADD R10, R6, 1 {S4}"
		}
		m := parseSASS(t, "k", `
		#line 7
		MOV R9, 0x3f7ffcb9 {S1}
		MOV R6, R4 {S1}
		MOV R7, R13 {S1}
		.L_x_1:
		#line 8
		FFMA R6, R6, R9, 0.25 {S4}
		FFMA R6, R6, R9, 0.25 {S4}
		IADD3 R7, R7, -0x1, RZ {S1}
		ISETP.NE.AND P0, PT, R7, RZ, PT {S4}
		@P0 BRA `+"`(.L_x_1)"+` {S1}
		#line 9
		MOV R8, R13 {S1}
		`+start+`
		.L_x_2:
		#line 10
		FFMA R10, R10, R9, 0.25 {S4}
		FFMA R10, R10, R9, 0.25 {S4}
		IADD3 R8, R8, -0x1, RZ {S1}
		ISETP.NE.AND P0, PT, R8, RZ, PT {S4}
		@P0 BRA `+"`(.L_x_2)"+` {S1}
		#line 11
		FADD R11, R6, R10 {S4}
		STG.E desc[UR4][R2.64], R11 {S1}
		EXIT
	`)
		s := sampledKernel(t, m, "k", mod1)
		for _, base := range []uint64{0x30, 0xa0} {
			s.stall(base, "wait", 30)
			s.stall(base+0x10, "wait", 30)
			s.stall(base+0x30, "wait", 5)
			for i := uint64(0); i < 5; i++ {
				s.stall(base+0x10*i, "selected", 5)
			}
			s.stall(base, "branch_resolving", 4)
			s.stall(base, "no_instructions", 2)
		}
		s.stall(0xf0, "selected", 4)
		s.stall(0x100, "selected", 4)
		as := s.advise(t, m, Options{})
		a := findKind(t, as, OptCodeReordering)
		T, M := 200.0, 130.0+21
		if dependent {
			M = 130
		}
		if !approx(a.Speedup, T/(T-M)) || strings.Contains(a.Hint, "fuse") == dependent {
			t.Fatalf("dependent %v: speedup %v, want %v; %s; %s", dependent, a.Speedup, T/(T-M), a.Hint, a.Evidence)
		}
	}
}

// Warps waiting at a barrier are sampled at the instruction after BAR:
// here 30 samples at the LDS and 5 at the BAR itself (a warp that has not
// yet issued it), of T = 100. Warp balance matches all 35 and names the
// BAR, at line 8, as the hotspot; without instruction counts the slowest
// warp's path is not known, so the estimate is n/a (item 28), where GPA's
// rules give eq. 3's 100/65.
func TestWarpBalanceAfterBarrier(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 7
		STS [R6], R2 {S1}
		#line 8
		BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
		#line 9
		LDS R8, [R7] {W1 S1}
		FADD R9, R8, 1 {B1 S4}
		STG.E desc[UR4][R10.64], R9 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x00, "selected", 10)
	s.stall(0x10, "barrier", 5)
	s.stall(0x20, "barrier", 30)
	s.stall(0x20, "selected", 5)
	s.stall(0x30, "selected", 40)
	s.stall(0x40, "selected", 10)
	for _, gpa := range []bool{false, true} {
		as := s.advise(t, m, Options{GPAOnly: gpa})
		a := findKind(t, as, OptWarpBalance)
		if len(a.Hotspots) != 1 || a.Hotspots[0].Line != 8 || a.Hotspots[0].Amount != 35 || !approx(a.Importance, 0.35) {
			t.Fatalf("GPA only %v: hotspots %+v, importance %v; %s", gpa, a.Hotspots, a.Importance, a.Evidence)
		}
		if want := 100.0 / (100 - 35); gpa && !approx(a.Speedup, want) {
			t.Fatalf("GPA only: speedup %v, want %v; %s", a.Speedup, want, a.Evidence)
		}
		if !gpa && (a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "instruction counts")) {
			t.Fatalf("speedup %v (%q), want n/a without instruction counts", a.Speedup, a.SpeedupNA)
		}
	}
}

// The active samples that fusion removes no longer cover hidden latency:
// of A = 50, 40 go with the loop control, so only 10 of the 80 memory
// waits hide: M = 20 (arithmetic, eq. 4) + 10 + 10 fused of T = 200.
func TestFusedActiveSamplesLeaveTheBound(t *testing.T) {
	m := match{est: estHiding, starved: true, M: 100, Mexec: 20, A: 50, Mfused: 10, Afused: 40}
	if got, want := m.speedup(200), 200.0/(200-40); !approx(got, want) {
		t.Fatalf("speedup %v, want %v", got, want)
	}
	m.starved = false // eq. 5: min(A - Afused, M) + Mfused = 10 + 10
	if got, want := m.speedup(200), 200.0/(200-20); !approx(got, want) {
		t.Fatalf("not starved: speedup %v, want %v", got, want)
	}
}

// With instruction counts the register increase's issue floor counts the
// instructions left rather than reading them off the selected samples:
// 528 blocks of 4 warps (one full wave at 4 blocks per SM, limited by 128
// registers), 2 warp instructions left per warp (FADD, EXIT) over 132 × 4
// schedulers issuing every cycle (rI = 8/8) is 8 cycles, 8/1.98 ns at the
// H100's top clock, which at the kernel's 60 samples in 11 ns is 22.0
// samples: S = 60 / (8/1.98 × 60/11) = 11 × 1.98 / 8. Read off the 8
// selected samples left at 4 warps per scheduler, the floor is 32 samples.
//
// GPUscout's register spilling names the same fix (keep the spilled values
// in registers), so it gets the same estimate (item 17), where eq. 3 alone
// on the LDL's and STL's cost (the LDL's 10 samples, the FADD's 40 blamed
// on it, the STL's 2) gave it 60/(60-52) = 7.5.
func TestRegisterIncreaseCountFloor(t *testing.T) {
	for _, counted := range []bool{false, true} {
		m, s := spilledKernel(t)
		k := s.k.ID
		s.p.Nodes[k].Metrics = nil
		s.p.Add(k, profile.GPUTime, 11)
		s.p.Add(k, profile.Metric(timeHistPrefix+"14"), 1)
		s.launches(1, 128, 528, 128)
		if counted {
			for off := uint64(0); off <= 0x30; off += 0x10 {
				s.p.Add(s.node[off], profile.InstExecuted, 2112)
			}
		}
		as := s.advise(t, m, Options{Static: true})
		a, st := findKind(t, as, OptRegisterIncrease), findKind(t, as, StaticSpill)
		want := 60.0 / 32
		if counted {
			want = 11 * 1.98 / 8
		}
		if !approx(a.Speedup, want) || !approx(st.Speedup, want) {
			t.Fatalf("counted %v: register increase %v, register spilling %v, want both %v; %s; %s", counted, a.Speedup, st.Speedup, want, a.Evidence, st.Evidence)
		}
		if !strings.Contains(st.Evidence, "52 of the kernel's 60 samples") {
			t.Fatalf("evidence %q", st.Evidence)
		}
	}
}

// A warpgroup waiting at WARPGROUP.DEPBAR for its own asynchronous
// tensor-core operations is not waiting for other warps: of T = 100, the
// 40 warpgroup_arrive samples there are left out of warp balance, and the
// 20 barrier samples after the BAR.SYNC are its M, which GPA's rules give
// 100/80 (without instruction counts the default says n/a, item 28).
func TestWarpBalanceLeavesAsyncMMAWaits(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 7
		BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
		#line 8
		LDS R8, [R7] {W1 S1}
		#line 9
		WARPGROUP.ARRIVE {S1}
		WARPGROUP.DEPBAR.LE gsb0, 0x0 {S1}
		FADD R9, R8, 1 {B1 S4}
		STG.E desc[UR4][R10.64], R9 {S1}
		EXIT
	`)
	s := sampledKernel(t, m, "k", mod1)
	s.stall(0x10, "barrier", 20)
	s.stall(0x30, "warpgroup_arrive", 40)
	s.stall(0x40, "selected", 30)
	s.stall(0x50, "selected", 10)
	as := s.advise(t, m, Options{GPAOnly: true})
	a := findKind(t, as, OptWarpBalance)
	if want := 100.0 / (100 - 20); !approx(a.Speedup, want) || len(a.Hotspots) != 1 || a.Hotspots[0].Line != 7 || a.Hotspots[0].Amount != 20 {
		t.Fatalf("speedup %v, want %v; hotspots %+v; %s", a.Speedup, want, a.Hotspots, a.Evidence)
	}
	as = s.advise(t, m, Options{})
	if a := findKind(t, as, OptWarpBalance); !approx(a.Importance, 0.2) || a.SpeedupNA == "" {
		t.Fatalf("importance %v, speedup %v (%q), want 0.2 and n/a", a.Importance, a.Speedup, a.SpeedupNA)
	}
}

// A stencil's straight-line body: the addresses, then every load, then the
// arithmetic that needs them. Each instruction after the first wait
// depends on a load and each one before the loads computes their
// addresses, so no work can be moved between a load and its use: code
// reordering is not raised, where eq. 5 alone gave 200/(200-50) (M = 150
// latency samples behind A = 50 active ones). With independent work after
// the wait (an index for the next row, whose 10 active samples the store
// had), it is raised again with eq. 5's bound: 200/(200-50).
func TestReorderingNeedsWorkToMove(t *testing.T) {
	for _, independent := range []bool{false, true} {
		body := `
		#line 3
		S2R R0, SR_TID.X {S1}
		IMAD.WIDE R2, R0, 0x4, R8 {S4}
		#line 4
		LDG.E R4, desc[UR4][R2.64] {W0 S1}
		LDG.E R5, desc[UR4][R2.64+0x4] {W1 S1}
		LDG.E R6, desc[UR4][R2.64+0x8] {W2 S1}
		#line 5
		FADD R7, R4, R5 {B01 S4}
		FADD R7, R7, R6 {B2 S4}
		STG.E desc[UR4][R2.64], R7 {S1}
		EXIT`
		if independent {
			body = strings.Replace(body, "STG.E", "IADD3 R10, R0, 0x100, RZ {S4}\n\t\tSTG.E", 1)
		}
		m := parseSASS(t, "k", body)
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x00, "selected", 10)
		s.stall(0x10, "selected", 10)
		s.stall(0x20, "selected", 5)
		s.stall(0x30, "selected", 5)
		s.stall(0x40, "selected", 5)
		s.stall(0x50, "long_scoreboard", 150)
		s.stall(0x60, "selected", 5)
		s.stall(0x70, "selected", 10)
		s.launches(1, 128, 1, 16)
		as := s.advise(t, m, Options{})
		a := find(as, OptCodeReordering)
		if !independent {
			if a != nil {
				t.Fatalf("code reordering raised with nothing to move: %v (%s)", a.Speedup, a.Evidence)
			}
			continue
		}
		if a == nil {
			t.Fatal("code reordering not raised with independent work after the wait")
		}
		// Only the IADD3's 10 active samples can move into the wait
		// (item 45): 10 of its 150 samples go.
		if want := 200.0 / (200 - 10); !approx(a.Speedup, want) {
			t.Fatalf("speedup %v, want %v (%s)", a.Speedup, want, a.Evidence)
		}
	}
}

// A store to memory the compiler cannot prove apart keeps the next load
// below it: two round trips one after the other, 100 and 60 samples of
// waits. Loading both first puts them in flight together, and the waits
// become the longer one: 60 go, 200/140 (item 45). With the second
// load's address taken from the first load's value, the round trips
// cannot overlap, nothing can move in, and the advice is not raised.
func TestReorderingOverlapsRoundTripsAcrossStores(t *testing.T) {
	for _, chained := range []bool{false, true} {
		addr := "R2.64+0x200"
		if chained {
			addr = "R4.64"
		}
		m := parseSASS(t, "k", `
		#line 3
		S2R R0, SR_TID.X {S1}
		IMAD.WIDE R2, R0, 0x4, R8 {S4}
		#line 4
		LDG.E.64 R4, desc[UR4][R2.64] {W0 S1}
		FADD R5, R4, 1 {B0 S4}
		STG.E desc[UR4][R2.64+0x100], R5 {S1}
		#line 5
		LDG.E R6, desc[UR4][`+addr+`] {W1 S1}
		FADD R7, R6, 1 {B1 S4}
		STG.E desc[UR4][R2.64+0x300], R7 {S1}
		EXIT`)
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x00, "selected", 10)
		s.stall(0x10, "selected", 10)
		s.stall(0x20, "selected", 5)
		s.stall(0x30, "long_scoreboard", 100)
		s.stall(0x40, "selected", 5)
		s.stall(0x50, "selected", 5)
		s.stall(0x60, "long_scoreboard", 60)
		s.stall(0x70, "selected", 5)
		s.launches(1, 128, 1, 16)
		as := s.advise(t, m, Options{})
		a := find(as, OptCodeReordering)
		if chained {
			if a != nil {
				t.Fatalf("code reordering raised for a chain of round trips: %v (%s)", a.Speedup, a.Evidence)
			}
			continue
		}
		if a == nil {
			t.Fatal("code reordering not raised for round trips a store keeps apart")
		}
		if want := 200.0 / 140; !approx(a.Speedup, want) {
			t.Fatalf("speedup %v, want %v (%s)", a.Speedup, want, a.Evidence)
		}
	}
}

// Transaction reduction widens accesses to 128 bits at most: of 80
// throttle samples at a 32-bit load, 1 - 32/128 = 60 go (200/140); at a
// 128-bit load there is nothing wider to issue and the advice is not
// raised.
func TestTransactionReductionByWidth(t *testing.T) {
	for _, tc := range []struct {
		op   string
		want float64 // 0: not raised
	}{{"LDG.E", 200.0 / 140}, {"LDG.E.64", 200.0 / 160}, {"LDG.E.128", 0}} {
		m := parseSASS(t, "k", `
			#line 4
			`+tc.op+` R4, desc[UR4][R2.64] {W0 S1}
			#line 5
			FADD R7, R4, 1 {B0 S4}
			STG.E desc[UR4][R2.64], R7 {S1}
			EXIT`)
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x00, "lg_throttle", 80)
		s.stall(0x00, "selected", 20)
		s.stall(0x10, "selected", 50)
		s.stall(0x20, "selected", 50)
		as := s.advise(t, m, Options{})
		a := find(as, OptGlobalTransactions)
		switch {
		case tc.want == 0 && a != nil:
			t.Errorf("%s: raised at %v with nothing wider to issue", tc.op, a.Speedup)
		case tc.want != 0 && a == nil:
			t.Errorf("%s: not raised", tc.op)
		case tc.want != 0 && !approx(a.Speedup, tc.want):
			t.Errorf("%s: speedup %v, want %v (%s)", tc.op, a.Speedup, tc.want, a.Evidence)
		}
	}
}

// Shared memory transactions widen to 128 bits at most (item 34), and
// only where the thread's neighbouring accesses are there to merge (item
// 42): four adjacent 32-bit loads, two adjacent 64-bit loads or two
// 128-bit loads, the MIO throttle samples at the first (80 of T = 200).
// At 32 bits 60 of them go, 200 / 140; at 64 bits 40, 200 / 160; 128-bit
// loads have nothing wider to issue. The 20 samples of the FADD waiting
// on the first load shrink alike: with them, 200 / (200 - 60 - 15) at 32
// bits. One 32-bit load alone has no neighbour to merge with: not raised.
func TestSharedTransactionsByWidth(t *testing.T) {
	for _, tc := range []struct {
		op    string
		n     int // adjacent loads
		waits bool
		want  float64 // 0: not raised
	}{{"LDS", 4, false, 200.0 / 140}, {"LDS.64", 2, false, 200.0 / 160}, {"LDS.128", 2, false, 0}, {"LDS", 4, true, 200.0 / 125}, {"LDS", 1, false, 0}} {
		step := map[string]int{"LDS": 4, "LDS.64": 8, "LDS.128": 16}[tc.op]
		loads := ""
		for k := 0; k < tc.n; k++ {
			loads += fmt.Sprintf("%s R%d, [R2+0x%x] {W0 S1}\n", tc.op, 20+4*k, k*step)
		}
		m := parseSASS(t, "k", `
			#line 4
			`+loads+`
			#line 5
			FADD R7, R20, 1 {B0 S4}
			STG.E desc[UR4][R8.64], R7 {S1}
			EXIT`)
		fadd := uint64(0x10 * tc.n)
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x00, "mio_throttle", 80)
		s.stall(0x00, "selected", 20)
		if tc.waits {
			s.stall(fadd, "short_scoreboard", 20)
			s.stall(fadd, "selected", 30)
		} else {
			s.stall(fadd, "selected", 50)
		}
		s.stall(fadd+0x10, "selected", 50)
		a := find(s.advise(t, m, Options{}), OptSharedTransactions)
		switch {
		case tc.want == 0 && a != nil:
			t.Errorf("%d x %s: raised at %v with nothing wider to issue", tc.n, tc.op, a.Speedup)
		case tc.want != 0 && a == nil:
			t.Errorf("%d x %s (waits %v): not raised", tc.n, tc.op, tc.waits)
		case tc.want != 0 && !approx(a.Speedup, tc.want):
			t.Errorf("%d x %s (waits %v): speedup %v, want %v (%s)", tc.n, tc.op, tc.waits, a.Speedup, tc.want, a.Evidence)
		}
	}
}

// At the register ceiling (item 26): 248 registers per thread and a
// 64-byte frame need 248 + 16 = 264 registers to keep the spilled values,
// more than the H100's 255, so register increase and register spilling
// say n/a; with 200 registers (216 needed) both keep their estimate.
func TestRegisterIncreaseAtCeiling(t *testing.T) {
	for _, regs := range []uint64{248, 200} {
		m, s := spilledKernel(t)
		s.launches(1, 128, 132, regs)
		s.p.Add(s.k.ID, profile.LaunchFrameBytes, 64)
		as := s.advise(t, m, Options{Static: true})
		a, st := findKind(t, as, OptRegisterIncrease), findKind(t, as, StaticSpill)
		if regs == 248 {
			if a.Speedup != 0 || !strings.Contains(a.SpeedupNA, "about 264, more than the 255") || st.Speedup != 0 || st.SpeedupNA != a.SpeedupNA {
				t.Fatalf("248 registers: register increase %v %q, register spilling %v %q", a.Speedup, a.SpeedupNA, st.Speedup, st.SpeedupNA)
			}
			continue
		}
		if a.Speedup <= 1 || a.SpeedupNA != "" || st.Speedup != a.Speedup {
			t.Fatalf("200 registers: register increase %v %q, register spilling %v", a.Speedup, a.SpeedupNA, st.Speedup)
		}
	}
}

// Item 51: unrolling by 4 groups 8 passes in two full groups (all of
// them), 10 in two groups and a remainder of 2 (8 of 10), 3.1 in none
// (the remainder loop runs them all).
func TestGroupedShare(t *testing.T) {
	for _, tc := range []struct{ trips, want float64 }{{8, 1}, {10, 0.8}, {3.1, 0}, {4, 1}, {0, 0}} {
		if got := groupedShare(tc.trips, 4); !approx(got, tc.want) {
			t.Errorf("groupedShare(%v, 4) = %v, want %v", tc.trips, got, tc.want)
		}
	}
}

// Two conflicted shared loads: one at a stride of 32 words from the
// thread's index (4 passes where 1 would do), one probing a table at an
// index each step moves by the comparison of the thread's own loaded x
// with the last probe (a binary search: 3 passes where 1 would do). The
// stride's conflicts go with padding: 20 samples × 3/4 = 15 of T = 100.
// The search's 30 × 2/3 do not: its lanes meet on the banks the data
// picks (item 55). With the strided load conflict-free, nothing padding
// removes is left and the advice is n/a. GPA's rule counts both.
func TestSharedAdjustDataChosenAddresses(t *testing.T) {
	m := parseSASS(t, "k", `
		#line 7
		S2R R0, SR_TID.X {S1}
		IMAD.WIDE R4, R0, 0x4, c[0x0][0x210] {S4}
		LDG.E R2, desc[UR4][R4.64] {W0 S1}
		#line 8
		IMAD.SHL.U32 R12, R0, 0x80, RZ {S4}
		LDS R13, [R12] {W1 S1}
		#line 9
		MOV R6, 0x1fc {S1}
		MOV R7, 0x7 {S1}
		.L_x_0:
		LDS R8, [R6] {W2 S1}
		FSETP.GT.AND P0, PT, R2, R8, PT {B0 B2 S4}
		SEL R9, 0x40, -0x40, P0 {S4}
		IADD3 R6, R6, R9, RZ {S4}
		IADD3 R7, R7, -0x1, RZ {S1}
		ISETP.NE.AND P1, PT, R7, RZ, PT {S4}
		@P1 BRA `+"`(.L_x_0)"+` {S1}
		#line 10
		FADD R14, R13, R8 {B1 S4}
		STG.E desc[UR4][R4.64], R14 {S1}
		EXIT
	`)
	for _, c := range []struct {
		strided, gpa bool
		want         float64 // M; 0: n/a
	}{
		{strided: true, want: 15},
		{strided: true, gpa: true, want: 15 + 20},
		{strided: false, want: 0},
	} {
		s := sampledKernel(t, m, "k", mod1)
		s.stall(0x40, "selected", 20)
		s.stall(0x70, "selected", 30)
		s.stall(0xe0, "selected", 50)
		s.p.Add(s.node[0x40], mSharedWarps, 10)
		s.p.Add(s.node[0x40], mSharedWavefronts, 40)
		if c.strided {
			s.p.Add(s.node[0x40], mSharedIdeal, 10)
		} else {
			s.p.Add(s.node[0x40], mSharedIdeal, 40)
		}
		s.p.Add(s.node[0x70], mSharedWarps, 20)
		s.p.Add(s.node[0x70], mSharedWavefronts, 60)
		s.p.Add(s.node[0x70], mSharedIdeal, 20)
		a := findKind(t, s.advise(t, m, Options{GPAOnly: c.gpa}), OptSharedAdjust)
		if c.want == 0 {
			if a.SpeedupNA == "" || a.Hotspots[0].Line != 9 {
				t.Fatalf("search alone: speedup %v, want n/a; hotspot %+v; %s", a.Speedup, a.Hotspots[0], a.Evidence)
			}
			continue
		}
		if want := 100 / (100 - c.want); a.SpeedupNA != "" || !approx(a.Speedup, want) || a.Hotspots[0].Line != 8 && !c.gpa {
			t.Fatalf("strided, GPA only %v: speedup %v (n/a %q), want %v; hotspot %+v; %s", c.gpa, a.Speedup, a.SpeedupNA, want, a.Hotspots[0], a.Evidence)
		}
	}
}
