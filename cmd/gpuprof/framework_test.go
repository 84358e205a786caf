package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpuprof/analysis"
	"gpuprof/profile"
)

// TestFrameworkCaptureReplay replays a real framework workload through the
// whole pipeline: a PyTorch training step (a convolution, an MLP and SGD)
// captured on the H100 in both passes (testdata/captures/torch_train.*,
// trimmed by `gpuprof capture trim`, with the listings of the kernels that
// ran in testdata/sass/torch), one collector replaying both passes into the
// embedded broker, the reducer and every export. The report must name the
// framework's GEMM (cuBLAS), convolution (cuDNN) and elementwise kernels in
// full, with their libraries, and the rank must be complete.
func TestFrameworkCaptureReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	caps, _ := filepath.Abs("../../testdata/captures")
	sassDir, _ := filepath.Abs("../../testdata/sass/torch")
	replay := filepath.Join(caps, "torch_train.pcsampling.gpr") + "," + filepath.Join(caps, "torch_train.redundancy.gpr")
	for _, f := range strings.Split(replay, ",") {
		if st, err := os.Stat(f); err != nil || st.Size() > 5<<20 {
			t.Fatalf("capture %s: %v (committed captures stay under 5 MB)", f, err)
		}
	}
	bin := buildGpuprof(t)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--rank-timeout", "60s", "--sass", sassDir, "--replay", replay, "--", "true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuprof run: %v\nstderr:\n%s", err, stderr.String())
	}
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if ri := p.Ranks[0]; ri == nil || ri.Incomplete != "" || !strings.Contains(ri.Mode, "pcsampling") || !strings.Contains(ri.Mode, "redundancy") {
		t.Fatalf("rank 0: %+v", ri)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	report := string(rep)
	for _, want := range []string{
		"sm80_xmma_gemm_f32f32_f32f32_f32_tn_n", // cuBLAS GEMMs of the MLP
		"implicit_convolve_sgemm",               // cuDNN's convolution
		"wgrad_alg0_engine",                     // and its weight gradient
		"at::native::vectorized_elementwise_kernel",
		"at::native::(anonymous namespace)::multi_tensor_apply_kernel", // the optimizer step, the anonymous namespace kept whole
		"libcublasLt.so",                                               // kernels without source lines name their library
		"Incomplete:  none",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report does not name %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", head(report, 120))
	}
}

// TestDDPRunReport reports on the merged profile of a DDP job over NCCL on
// two H100s (testdata/runs/h100x2-ddp): two ranks on two GPUs, NCCL's
// kernels listed as communication with no advice on their code, and the
// spread of a collective's time over ranks given as ranks waiting for the
// one that arrives last, not as a rank to rebalance. The report used to
// take minutes on NCCL's kernels (an exponential walk in the static
// checks), which held up `gpuprof run` after every rank was done.
func TestDDPRunReport(t *testing.T) {
	bin := buildGpuprof(t)
	dir, _ := filepath.Abs("../../testdata/runs/h100x2-ddp")
	cmd := exec.Command(bin, "report", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuprof report: %v\nstderr:\n%s", err, stderr.String())
	}
	report := stdout.String()
	for _, want := range []string{
		"Ranks:       2 merged of 2 expected (0-1)",
		"2 GPUs on 1 host, 1 rank each",
		"Waiting and communication kernels",
		"ncclDevKernel_AllReduce_Sum_f32_RING_LL: ",
		"communication between GPUs",
		"ncclDevKernel_AllReduce_Sum_f32_RING_LL [communication]",
		"[imbalance] ranks wait at a collective",
		"NCCL's ncclDevKernel_AllReduce_Sum_f32_RING_LL: rank 0 spends",
		"implicit_convolve_sgemm", // the model's own kernels are still there
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// No advice on NCCL's code (its kernels are notes only), and no
	// collective's spread given as load imbalance.
	adv := strings.Split(report[:strings.Index(report, "Waiting and communication kernels")], "\n")
	for i := 0; i+1 < len(adv); i++ {
		line, at := adv[i], adv[i+1]
		if !strings.HasPrefix(at, "    at ncclDev") {
			continue
		}
		if strings.Contains(line, "[stall]") || strings.Contains(line, "[static]") || strings.Contains(line, "load imbalance") {
			t.Errorf("advice on NCCL's code: %q / %q", line, at)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", head(report, 120))
	}
}

// The analysis of the final profile is bounded: past --analysis-timeout
// the profile, the exports and the report are written without advice,
// saying why, and the run goes on to end.
func TestAnalysisTimeoutWritesReportWithoutAdvice(t *testing.T) {
	p, err := profile.ReadFile("../../testdata/runs/h100x2-ddp/profile.gpuprof")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	saved := advise
	advise = func(*profile.Profile, analysis.ModuleSource, analysis.Options) ([]analysis.Advice, error) {
		<-release // an analysis that never ends while the test runs
		return nil, nil
	}
	defer func() { advise = saved }()
	out := t.TempDir()
	adv, err := writeOutputs(out, "", p, 2, 50*time.Millisecond)
	if err != nil || adv != nil {
		t.Fatalf("writeOutputs: %v, %d advice", err, len(adv))
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rep), "No advice: not computed: the analysis did not finish within --analysis-timeout 50ms") {
		t.Errorf("the report does not say why it has no advice:\n%s", head(string(rep), 40))
	}
	if page, err := os.ReadFile(filepath.Join(out, "report.html")); err != nil || !strings.Contains(string(page), "No advice: not computed") {
		t.Errorf("the HTML report does not say why it has no advice (%v)", err)
	}
	if q, err := profile.ReadFile(out); err != nil || len(q.Ranks) != 2 {
		t.Errorf("the profile written beside it: %v", err)
	}
}

// An analysis that fails leaves a report that says so, not one that reads
// as if the analysis had found nothing.
func TestAnalysisFailureIsNamedInTheReport(t *testing.T) {
	p, err := profile.ReadFile("../../testdata/runs/h100x2-ddp/profile.gpuprof")
	if err != nil {
		t.Fatal(err)
	}
	saved := advise
	advise = func(*profile.Profile, analysis.ModuleSource, analysis.Options) ([]analysis.Advice, error) {
		return nil, errors.New("module 1234: corrupt listing")
	}
	defer func() { advise = saved }()
	out := t.TempDir()
	if _, err := writeOutputs(out, "", p, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rep), "No advice: not computed: the analysis failed (module 1234: corrupt listing)") {
		t.Errorf("the report does not name the failure:\n%s", head(string(rep), 40))
	}
}
