package blame

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

// edge returns the samples blamed from src to dst for reason.
func edge(r *Result, src, dst int, reason string) float64 {
	v := 0.0
	for _, e := range r.Edges {
		if e.Src == src && e.Dst == dst && e.Reason == reason {
			v += e.Samples
		}
	}
	return v
}

// Two loads feed one add through scoreboards: eq. 1 splits the stall by
// issue samples over path length.
func TestApportionEq1(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10] {W0 S1}
		LDG R3, [R12] {W1 S1}
		IADD3 R5, R6, R7 {S4}
		FADD R4, R2, R3 {B01 S4}
		EXIT
	`)
	s := smp(5, 0, "selected", 4, 1, "selected", 1, 3, "long_scoreboard", 100)
	r := Blame(f, s, Options{})
	// Distances in issue cycles: 0->3 is 1+1+4 = 6, 1->3 is 1+4 = 5.
	w0, w1 := 4.0/6, 1.0/5
	if got, want := edge(r, 0, 3, "long_scoreboard"), 100*w0/(w0+w1); !near(got, want) {
		t.Fatalf("LDG0 blamed %v, want %v", got, want)
	}
	if got, want := edge(r, 1, 3, "long_scoreboard"), 100*w1/(w0+w1); !near(got, want) {
		t.Fatalf("LDG1 blamed %v, want %v", got, want)
	}
	if len(r.Edges) != 2 || r.Edges[0].Class != "memory dependency: global memory" {
		t.Fatalf("edges %+v", r.Edges)
	}
	if r.Stalled != 1 || r.Single != 0 {
		t.Fatalf("coverage %d/%d", r.Single, r.Stalled)
	}
}

// Hybrid mode weighs sources by executed instructions (eq. 2).
func TestApportionEq2(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10] {W0 S1}
		LDG R3, [R12] {W1 S1}
		FADD R4, R2, R3 {B01 S4}
		EXIT
	`)
	s := smp(4, 0, "selected", 4, 1, "selected", 1, 2, "long_scoreboard", 60)
	s[0].Executed, s[1].Executed, s[2].Executed = 10, 30, 10
	r := Blame(f, s, Options{Hybrid: true})
	w0, w1 := 10.0/2, 30.0/1
	if got, want := edge(r, 1, 2, "long_scoreboard"), 60*w1/(w0+w1); !near(got, want) {
		t.Fatalf("LDG1 blamed %v, want %v", got, want)
	}
}

// Without control bits the blamer follows registers. IMAD's result is not
// a memory result (opcode rule, GPA Fig. 2c); the second use of R2 is
// dominated by the first one (dominator rule).
func TestPruneOpcodeAndDominator(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10]
		IMAD R3, R8, R9
		FADD R4, R2, R3
		FMUL R5, R2, R4
		EXIT
	`)
	s := smp(5, 2, "long_scoreboard", 50, 3, "long_scoreboard", 30, 0, "selected", 1, 1, "selected", 1)
	r := Blame(f, s, Options{})
	if got := edge(r, 0, 2, "long_scoreboard"); got != 50 {
		t.Fatalf("FADD's stall on LDG = %v, want all 50", got)
	}
	if edge(r, 1, 2, "long_scoreboard") != 0 {
		t.Fatal("a memory stall was blamed on IMAD")
	}
	if edge(r, 0, 3, "long_scoreboard") != 0 {
		t.Fatal("FMUL's stall blamed on LDG although FADD read R2 first")
	}
	// FMUL's own wait has no source left: it stays as a scheduler stall.
	if r.Self[3]["long_scoreboard"] != 30 || r.SelfClass[3]["long_scoreboard"] != "scheduler" {
		t.Fatalf("self %v %v", r.Self[3], r.SelfClass[3])
	}
	// Opcode rule: IMAD -> FADD and FADD -> FMUL (R4); dominator rule: LDG -> FMUL.
	if r.Pruned.Opcode != 2 || r.Pruned.Dominator != 1 {
		t.Fatalf("pruned %+v, want 2 by opcode and 1 by dominator", r.Pruned)
	}
}

// A guarded first use does not dominate; a use on one branch only does not
// lie on every path.
func TestDominatorNeedsEveryPath(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10]
		ISETP P0, R1, R1
		@P0 FADD R4, R2, R2
		FMUL R5, R2, R4
		@P0 BRA L1
		FADD R6, R2, R2
	L1:	FMUL R7, R2, R6
		EXIT
	`)
	s := smp(8, 3, "long_scoreboard", 10, 6, "long_scoreboard", 20)
	r := Blame(f, s, Options{})
	if edge(r, 0, 3, "long_scoreboard") != 10 {
		t.Fatalf("guarded use pruned the edge: %+v", r.Edges)
	}
	// FMUL (3) is unguarded and lies on every path from LDG to 6, so that
	// edge goes; the branch-local use (5) alone would not have pruned it.
	if edge(r, 0, 6, "long_scoreboard") != 0 || r.Pruned.Dominator != 1 {
		t.Fatalf("edges %+v pruned %+v", r.Edges, r.Pruned)
	}
	g := prog(t, `
		LDG R2, [R10]
		ISETP P0, R1, R1
		@P0 BRA L1
		FADD R6, R2, R2
	L1:	FMUL R7, R2, R6
		EXIT
	`)
	r = Blame(g, smp(6, 4, "long_scoreboard", 20), Options{})
	if edge(r, 0, 4, "long_scoreboard") != 20 || r.Pruned.Dominator != 0 {
		t.Fatalf("a use on one branch pruned the edge: %+v %+v", r.Edges, r.Pruned)
	}
}

// A fixed-latency producer farther than its latency cannot cause a wait.
func TestPruneLatency(t *testing.T) {
	f := prog(t, `
		IADD3 R2, R0, R1 {S1}
		IADD3 R3, R0, R1 {S1}
		MOV R8, R9 {S1}
		MOV R8, R9 {S1}
		MOV R8, R9 {S1}
		FADD R4, R2, R3 {S1}
		EXIT
	`)
	// 0->5 is 5 cycles (> latency 4): pruned; 1->5 is 4 cycles: kept.
	r := Blame(f, smp(7, 5, "wait", 12), Options{})
	if edge(r, 1, 5, "wait") != 12 || edge(r, 0, 5, "wait") != 0 || r.Pruned.Latency != 1 {
		t.Fatalf("edges %+v pruned %+v", r.Edges, r.Pruned)
	}
	if r.Edges[0].Class != "execution dependency: arithmetic" {
		t.Fatalf("class %q", r.Edges[0].Class)
	}
}

// GPA Fig. 2a: the slice continues past a predicated load to the local
// load before it; both are sources.
func TestPredicatedSliceContinues(t *testing.T) {
	f := prog(t, `
		LDL R2, [R1] {W0 S2}
		ISETP P0, R3, R4 {S4}
		@!P0 BRA L2
		@P0 LDG R2, [R6] {W0 S2}
	L2:	IADD3 R5, R2, R7 {B0 S4}
		EXIT
	`)
	s := smp(6, 0, "selected", 2, 3, "selected", 6, 4, "long_scoreboard", 90)
	r := Blame(f, s, Options{})
	// Distances: LDL 0->4 over the taken path 2+4+1 = 7 and the fall-through
	// 2+4+1+2 = 9: mean 8. LDG 3->4: 2.
	wL, wG := 2.0/8, 6.0/2
	if got, want := edge(r, 0, 4, "long_scoreboard"), 90*wL/(wL+wG); !near(got, want) {
		t.Fatalf("LDL blamed %v, want %v (edges %+v)", got, want, r.Edges)
	}
	if got, want := edge(r, 3, 4, "long_scoreboard"), 90*wG/(wL+wG); !near(got, want) {
		t.Fatalf("LDG blamed %v, want %v", got, want)
	}
	classes := map[string]bool{}
	for _, e := range r.Edges {
		classes[e.Class] = true
	}
	if !classes["memory dependency: local memory"] || !classes["memory dependency: global memory"] {
		t.Fatalf("classes %v", classes)
	}
}

// Sources that never issued lose their edge while another issued; if none
// did, each counts as one sample.
func TestColdEdges(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10] {W0 S1}
		LDG R3, [R12] {W1 S1}
		FADD R4, R2, R3 {B01 S1}
		EXIT
	`)
	r := Blame(f, smp(4, 1, "selected", 3, 2, "long_scoreboard", 40), Options{})
	if edge(r, 1, 2, "long_scoreboard") != 40 || r.Pruned.Cold != 1 {
		t.Fatalf("edges %+v pruned %+v", r.Edges, r.Pruned)
	}
	r = Blame(f, smp(4, 2, "long_scoreboard", 40), Options{})
	// Both count one sample: split by path length 2 vs 1.
	if got, want := edge(r, 1, 2, "long_scoreboard"), 40*1.0/(1+0.5); !near(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

// A load at the end of a loop body feeds the next iteration's use.
func TestLoopCarried(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10] {W0 S1}
	L1:	FFMA R4, R2, R4, R4 {B0 S4}
		IADD3 R10, R10, R11 {S2}
		LDG R2, [R10] {W0 S1}
		ISETP P0, R10, R12 {S4}
		@P0 BRA L1 {S1}
		EXIT
	`)
	s := smp(7, 0, "selected", 1, 3, "selected", 9, 1, "long_scoreboard", 100)
	r := Blame(f, s, Options{})
	// Sources: 0 (distance 1) and 3 around the back edge (1+4+1 = 6).
	w0, w3 := 1.0/1, 9.0/6
	if got, want := edge(r, 3, 1, "long_scoreboard"), 100*w3/(w0+w3); !near(got, want) {
		t.Fatalf("loop-carried share %v, want %v (%+v)", got, want, r.Edges)
	}
}

// Non-dependency reasons and active samples stay where they were sampled;
// an indirect memory access without a producer is address calculation.
func TestSelfAndAddressCalculation(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10] {S1}
		BAR {S1}
		EXIT
	`)
	s := smp(3, 0, "wait", 7, 0, "lg_throttle", 5, 1, "barrier", 9, 1, "selected", 2)
	r := Blame(f, s, Options{})
	if len(r.Edges) != 0 || r.Self[0]["lg_throttle"] != 5 || r.Self[1]["barrier"] != 9 || r.Self[1]["selected"] != 2 {
		t.Fatalf("self %v edges %v", r.Self, r.Edges)
	}
	if r.SelfClass[0]["wait"] != "address calculation" {
		t.Fatalf("class %v", r.SelfClass[0])
	}
}

// Conservation: every dependency stall is either blamed or kept.
func TestSamplesConserved(t *testing.T) {
	f := prog(t, `
		LDG R2, [R10] {W0 S1}
		LDS R3, [R12] {W1 S1}
		MUFU R6, R3 {B1 W2 S1}
		FADD R4, R2, R6 {B02 S4}
		STG [R14], R4 {R3 S1}
		MOV R4, R9 {B3 S1}
		EXIT
	`)
	s := smp(7, 0, "selected", 2, 1, "selected", 1, 2, "short_scoreboard", 13, 3, "long_scoreboard", 40,
		3, "short_scoreboard", 11, 5, "long_scoreboard", 7, 2, "selected", 3)
	r := Blame(f, s, Options{})
	var total, kept float64
	for _, x := range s {
		total += x.Total()
	}
	for _, m := range r.Self {
		for _, v := range m {
			kept += v
		}
	}
	for _, e := range r.Edges {
		kept += e.Samples
	}
	if !near(kept, total) {
		t.Fatalf("samples: %v in, %v out", total, kept)
	}
	if edge(r, 1, 2, "short_scoreboard") != 13 || edge(r, 2, 3, "short_scoreboard") != 11 || edge(r, 0, 3, "long_scoreboard") != 40 {
		t.Fatalf("edges %+v", r.Edges)
	}
	war := false
	for _, e := range r.Edges {
		if e.Src == 4 && e.Dst == 5 && e.Class == "execution dependency: write after read" {
			war = true
		}
	}
	if !war {
		t.Fatalf("STG's read scoreboard wait not classified write-after-read: %+v", r.Edges)
	}
}
