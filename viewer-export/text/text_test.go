package text

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs at line %d:\n got: %q\nwant: %q\n(go test -update rewrites it)", file, i+1, g, w)
			}
		}
	}
}

// TestReportGolden renders the 8-rank profile's report (slow rank 3,
// drops on rank 5) and compares it with testdata/report.golden.
func TestReportGolden(t *testing.T) {
	p := exporttest.Profile(8, 2, exporttest.Shape)
	got := String(p, exporttest.Advice(p))
	golden(t, "report.golden", got)
	for _, want := range []string{
		"SYNTHETIC DATA", "8 merged of 8 expected (0-7)", "rank 5: 1200", "Top advice", "speedup 1.45x",
		"stencil.cu:31", "Top GPU kernels by time", "Top GPU kernels by memory accesses", "eq. 1", "eq. 2",
		"Top temporal pairs", "Top data objects", "alloc_grid", "Per-rank imbalance", "(3)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// An incomplete job: rank 2 never sealed, rank 6 missing, 8 expected.
func TestReportIncomplete(t *testing.T) {
	p := profile.New(exporttest.Job)
	for _, r := range []int32{0, 1, 3, 4, 5, 7} {
		for _, it := range []*profile.Profile{exporttest.Extra(r, 0)} {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
		if r != 2 {
			done := profile.New(exporttest.Job)
			done.Rank(r).Batches = 1
			if err := done.AsItem(r, 1); err != nil {
				t.Fatal(err)
			}
			if err := p.Merge(done); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Merge(exporttest.Extra(2, 0)); err != nil {
		t.Fatal(err)
	}
	p.SealAll("deadline passed")
	var b strings.Builder
	if err := Write(&b, p, nil, Options{ExpectedRanks: 8, Top: 3}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	golden(t, "incomplete.golden", got)
	for _, want := range []string{"7 merged of 8 expected (0-5,7)", "Missing ranks:  6", "rank 2 (deadline passed)", "No advice"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

func TestReportEmpty(t *testing.T) {
	got := String(profile.New("empty"), nil)
	for _, want := range []string{"job empty", "No kernel time measured", "No per-rank kernel time"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// The verdict line: said when the best estimated advice saves under
// analysis.NoGainShare of the job's GPU time, not otherwise.
func TestNoGainLine(t *testing.T) {
	small := []analysis.Advice{
		{Kind: "constant replacement", Speedup: 1.01, KernelShare: 1},
		{Kind: "code reordering", Speedup: 1.8, KernelShare: 0.02}, // fast, but on a kernel that hardly runs
	}
	l := NoGainLine(small)
	if !strings.Contains(l, "Nothing big to gain") || !strings.Contains(l, "constant replacement") { // 1% of the job against 0.9%
		t.Errorf("%q", l)
	}
	big := append(small, analysis.Advice{Kind: "register increase", Speedup: 1.3, KernelShare: 0.5})
	if l := NoGainLine(big); l != "" {
		t.Errorf("a 1.3x speedup of half the job: %q", l)
	}
	// The order across the job follows the time saved.
	if s := SortAdvice(big); s[0].Kind != "register increase" || s[len(s)-1].Kind != "code reordering" {
		t.Errorf("order %s, %s, %s", s[0].Kind, s[1].Kind, s[2].Kind)
	}
}

// The reuse section says when the histograms were measured in some blocks
// only.
func TestReuseSectionNamesSampling(t *testing.T) {
	for _, c := range []struct {
		period uint32
		want   string
	}{{4, "measured in 1 traced block in 4, scaled to all"}, {1, "(CUDAAdvisor, per block) and"}} {
		p := profile.New("j")
		ri := p.Rank(0)
		ri.Mode, ri.ReuseP = "redundancy", c.period
		k := p.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"}, profile.Frame{Kind: profile.KindKernel, Module: "m", Function: "_Z1kv"})
		p.Add(k.ID, profile.Metric("reuse.elem.b3"), 30)
		p.Add(k.ID, profile.Metric("reuse.elem.inf"), 70)
		got := String(p, nil)
		if !strings.Contains(got, c.want) || !strings.Contains(got, "30.0%") {
			t.Errorf("reuse period %d: the report lacks %q or the 30%% share:\n%s", c.period, c.want, got)
		}
	}
}

// The redundancy section says when spatial first occurrences were
// estimated from a sample of values, and how sparse it got; the profile's
// text says it per rank.
func TestRedundancyNamesSpatialSampling(t *testing.T) {
	for _, level := range []uint32{0, 3} {
		p := profile.New("j")
		ri := p.Rank(0)
		ri.Mode, ri.SpatialLevel = "redundancy", level
		k := p.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"}, profile.Frame{Kind: profile.KindKernel, Module: "m", Function: "_Z1kv"})
		p.Add(k.ID, profile.Metric("gpu.loads"), 100)
		p.Add(k.ID, profile.RedSpatLoad, 40)
		got := String(p, nil)
		note := strings.Contains(got, "values sampled by hash, down to 1 in 8")
		if note != (level > 0) {
			t.Errorf("level %d: the sampling note shown %v:\n%s", level, note, got)
		}
		if tag := strings.Contains(p.String(), " spatial_level=3"); tag != (level > 0) {
			t.Errorf("level %d: the profile's text shows spatial_level %v", level, tag)
		}
	}
}

// The JAX program's report (exporttest.Framework): whole kernel names,
// folded framework frames, the waiting DelayKernel apart with no advice,
// advice on the autotuner's kernel after the program's, and code without
// line information named so.
func TestFrameworkReportGolden(t *testing.T) {
	p, mods := exporttest.Framework()
	adv, err := analysis.Advise(p, mods, analysis.Options{Static: true})
	if err != nil {
		t.Fatal(err)
	}
	got := String(p, adv)
	golden(t, "framework.golden", got)
	for _, want := range []string{
		"stream_executor::gpu::(anonymous namespace)::DelayKernel [waiting]",
		"Waiting and communication kernels",
		"polls system-visible memory and the clock",
		"`/*0050*/ LDG.E.STRONG.SYS",
		"… 6 frames in xla_cuda_plugin.so, libc.so.6 …",
		"… 2 frames in python3.12 … > <module> (matmul.py:18) > step (matmul.py:11) > … 4 frames in jax, python3.12, libjax_common.so and 1 more …",
		"(in the framework's autotuning)",
		"gemm_fusion_dot_general_1 [autotuning]",
		"no line information",
		"waiting in 1 kernel context that polls",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, bad := range []string{"stream_executor::gpu:: ", ":0,", "loop :", "at  ", "_0E9_M_invoke"} {
		if strings.Contains(got, bad) {
			t.Errorf("report has %q", bad)
		}
	}
	// No advice on DelayKernel, and the first is on the program's kernel.
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "    at stream_executor") && !strings.Contains(got[:strings.Index(got, line)], "Waiting and communication kernels") {
			t.Errorf("advice on DelayKernel: %q", line)
		}
	}
	first := strings.Index(got, " 1. [")
	if first < 0 || strings.Contains(got[first:strings.Index(got[first:], "\n")+first], "autotuning") {
		t.Errorf("first advice is not on the program's own work")
	}
}

// Four ranks on two GPUs (ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1), one
// PC-sampled per GPU, heavy ranks 1 and 2 (one per GPU): the report groups
// the ranks by host and GPU, says who was sampled, and finds the
// imbalance within the GPUs.
func TestReportMultiGPU(t *testing.T) {
	p := exporttest.MultiGPU(4, 1, 2, 1, 2)
	adv, err := analysis.Advise(p, nil, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := String(p, adv)
	golden(t, "multigpu.golden", got)
	for _, want := range []string{
		"2 GPUs on 1 host, 2 ranks each",
		"one process per GPU is PC-sampled: ranks 0 (GPU 0), 1 (GPU 1) sampled; 2 other ranks gave kernel times only, as the policy has it, not a failure (ranks 2,3)",
		"gpu00  0    GPU-3f2a1b90  NVIDIA H100 80GB HBM3  0,2 (2)  rank 0 sampled, rank 2 kernel times only",
		"gpu00  1    GPU-3f2a1b91  NVIDIA H100 80GB HBM3  1,3 (2)  rank 1 sampled, rank 3 kernel times only",
		"stencil_2d   within GPUs              GPU 0  0,2",
		"stencil_2d: slowest rank 2: 1.50 = 1.50 within GPU 0 × 1.00 between",
		"heavy: rank 1 on GPU 1, rank 2 on GPU 0",
		"The imbalance is among the ranks sharing a GPU",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// A sketch past its 16 heavy hitters lists values whose counts are mostly
// error: on 2,000 near-uniform values each listed share is a range from
// its guaranteed count, not the count alone.
func TestTopValuesShowTheirError(t *testing.T) {
	s := profile.NewValueSketch(profile.ValInt, 32)
	for r := 0; r < 5; r++ {
		for v := uint64(0); v < 2000; v++ {
			s.AddN(v, 1)
		}
	}
	got := topValues(s, 3)
	for _, part := range strings.Split(got, ") ") {
		if !strings.Contains(part, "-") {
			t.Errorf("%q: a share with an error is shown as exact", got)
		}
	}
	if strings.Contains(got, "(6.") || strings.Contains(got, "(7.") {
		t.Errorf("%q: the lower bound should be far below the count's share", got)
	}
	exact := profile.NewValueSketch(profile.ValInt, 32)
	exact.AddN(1, 3)
	exact.AddN(2, 1)
	if got := topValues(exact, 3); got != "1 (75.0%) 2 (25.0%)" {
		t.Errorf("exact sketch: %q", got)
	}
}
