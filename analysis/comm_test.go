package analysis

import (
	"strconv"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/sass"
)

func TestCommLibrary(t *testing.T) {
	for name, want := range map[string]string{
		"ncclDevKernel_AllReduce_Sum_f32_RING_LL":      "NCCL",
		"_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LLv": "NCCL",
		"ncclKernel_AllGather_RING_LL_Sum_int8_t":      "NCCL",
		"nvshmemi_barrier_kernel":                      "NVSHMEM",
		"at::native::vectorized_elementwise_kernel<4>": "",
		"_Z5relaxPfli":    "",
		"mylib::ncclLike": "", // a namespace: not the library's
	} {
		if got := CommLibrary(name); got != want {
			t.Errorf("CommLibrary(%q) = %q, want %q", name, got, want)
		}
	}
}

// Rank 0 spends 80 ms in an all-reduce, ranks 1 and 2 50 ms, rank 3 10 ms:
// rank 3 arrives last and the others wait for it. The spread is no load
// imbalance on rank 0; the late rank is named, with no speedup.
func TestCollectiveWaitsNameTheLateRank(t *testing.T) {
	merged := ranksMerged(t, 4, func(p *profile.Profile, r int32) {
		k := newKernel(p, "main", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
		p.Add(k.k.ID, profile.GPUTime, []uint64{80, 50, 50, 10}[r]*1000000)
		p.Add(k.k.ID, profile.GPULaunches, 10)
		c := newKernel(p, "main", "_Z4stepPf")
		p.Add(c.k.ID, profile.GPUTime, 100*1000000)
	})
	x := NewIndex(merged)
	as := CollectiveWaits(x, DefaultImbalance)
	if len(as) != 1 {
		t.Fatalf("%d collective waits, want 1: %+v", len(as), as)
	}
	a := as[0]
	// mean 47.5 ms, min 10 ms: (47.5-10)/47.5 of the mean time is waiting.
	if a.Kind != KindCollectiveWait || len(a.Ranks) != 1 || a.Ranks[0] != 3 || a.Speedup != 0 || a.SpeedupNA == "" || !approx(a.Importance, 37.5/47.5) {
		t.Fatalf("advice %+v", a)
	}
	if !strings.Contains(a.Hint, "rank 0 spends 80ms in it, rank 3 10ms") || !strings.Contains(a.Hint, "(3) arrives last") {
		t.Fatalf("hint %q", a.Hint)
	}
	// Advise: a note on the kernel, the wait, no load imbalance on it.
	all, err := Advise(merged, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, a := range all {
		kinds = append(kinds, a.Kind)
	}
	got := strings.Join(kinds, ",")
	if !strings.Contains(got, KindCommunication) || !strings.Contains(got, KindCollectiveWait) || strings.Contains(got, "load imbalance") {
		t.Fatalf("advice kinds %s", got)
	}
}

// The static checks' walk from an address back to the kernel parameters
// expands each (instruction, register) once: on a ladder of n steps where
// every register has two reaching definitions the paths number 2^n (as on
// NCCL's kernels, where the walk used to take minutes).
func TestParamsWalkIsLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString("MOV R2, c[0x0][0x210]\nMOV R3, c[0x0][0x218]\n")
	const n = 10 // within maxParamDepth, so the top definitions are found
	for i := 0; i < n; i++ {
		// R2 gets one of two definitions, both from the previous R2 and R3.
		b.WriteString("ISETP.NE.AND P0, PT, R4, RZ, PT\n@P0 BRA `(.L_a" + strconv.Itoa(i) + ")\n")
		b.WriteString("IADD3 R2, R2, R3, RZ\nBRA `(.L_b" + strconv.Itoa(i) + ")\n")
		b.WriteString(".L_a" + strconv.Itoa(i) + ":\nIMAD.IADD R2, R3, 0x1, R2\n.L_b" + strconv.Itoa(i) + ":\n")
	}
	b.WriteString("LDG.E R5, desc[UR4][R2.64]\nEXIT\n")
	m, err := sass.Parse([]byte(sassText("ladder", b.String())))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Functions[0]
	ld := len(f.Insts) - 2
	out := map[int64]bool{}
	w := paramWalk{f: f, du: f.DefUse(), base: 0x210, out: out, seen: map[paramNode]int{}}
	w.walk(ld, sass.MakeReg(sass.KindR, 2), 0)
	if !out[0x210] || !out[0x218] {
		t.Fatalf("parameters %v, want 0x210 and 0x218", out)
	}
	if len(w.seen) > 4*len(f.Insts) {
		t.Fatalf("%d nodes expanded for %d instructions", len(w.seen), len(f.Insts))
	}
}
