package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
	"gpuprof/viewer-export/hpctoolkit"
	jsonexport "gpuprof/viewer-export/json"
)

// multiGPUCapture is where the multigpu phase of scripts/gpu-check puts
// its CI captures: 4 ranks of mpi_imbalance over two GPUs of one host in
// PC sampling (heavy ranks 1 and 2, one on each GPU), one sampled per GPU.
const multiGPUCapture = "mpi_imbalance.multigpu.pcsampling.rank%d.gpr"

// multiGPUStreams returns the four ranks' streams of a multi-GPU run and
// the SASS directory for them: the captures when all four are in
// testdata/captures, else generated streams of the same layout (4 ranks
// of one host over 2 GPUs by local rank, PC sampling, the first rank of
// each GPU sampling it, heavy ranks 1 and 2).
func multiGPUStreams(t *testing.T) (files []string, sassDir string, captured bool) {
	t.Helper()
	caps, _ := filepath.Abs("../../testdata/captures")
	for r := 0; r < 4; r++ {
		f := filepath.Join(caps, fmt.Sprintf(multiGPUCapture, r))
		if _, err := os.Stat(f); err != nil {
			files = nil
			break
		}
		files = append(files, f)
	}
	if len(files) == 4 {
		sassDir, _ = filepath.Abs("../../testdata/sass/mpi_imbalance")
		t.Logf("replaying the captured multi-GPU run: %s", filepath.Join(caps, strings.Replace(multiGPUCapture, "%d", "{0..3}", 1)))
		return files, sassDir, true
	}
	dir := t.TempDir()
	files, err := synth.WriteFiles(dir, synth.Options{Ranks: 4, Seed: 5, Mode: rawstream.ModePCSampling, KernelSampling: 1,
		GPUs: 2, Heavy: []int{1, 2}, Imbalance: 1})
	if err != nil {
		t.Fatal(err)
	}
	sassDir, _ = filepath.Abs("../../testdata/sass/probe")
	t.Logf("no captures of a multi-GPU run in %s (%s): replaying generated streams of the same layout", caps, fmt.Sprintf(multiGPUCapture, 0))
	return files, sassDir, false
}

// streamFacts reads what a rank's stream says of its GPU: HELLO's device,
// UUID and PC-sampled-elsewhere flag, and its PC_SAMPLES frames.
func streamFacts(t *testing.T, file string) (h *rawstream.Hello, pcFrames int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := rawstream.NewDecoder(bufio.NewReader(f))
	for {
		fr, err := d.Next()
		if errors.Is(err, io.EOF) {
			return h, pcFrames
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch x := fr.(type) {
		case *rawstream.Hello:
			h = x
		case *rawstream.PCSamples:
			pcFrames++
		}
	}
}

// TestMultiGPUReplay replays a run of 4 MPI ranks over two GPUs through
// gpuprof run (embedded broker, collectors, reduction tree, analysis,
// exports) and checks the per-GPU grouping and the PC-sampling policy in
// the profile and every output: each rank bound to the GPU its local rank
// gives; on each GPU exactly one rank PC-sampled, the others giving kernel
// times only (saying which GPU another process sampled, carrying no PC
// samples, and complete, not failed); the report, HTML, JSON and hpcviewer
// database grouping ranks by host and GPU; the planted imbalance (one heavy
// rank per GPU) found within the GPUs; advice from PC samples naming the
// ranks it rests on.
func TestMultiGPUReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	files, sassDir, captured := multiGPUStreams(t)
	bin := buildGpuprof(t)
	launcher := filepath.Join(t.TempDir(), "mpirun")
	if err := os.WriteFile(launcher, []byte(fakeMpirun), 0o755); err != nil {
		t.Fatal(err)
	}
	replay := strings.Replace(files[0], "rank0000", "rank{rank:4}", 1)
	if captured {
		replay = strings.Replace(files[0], "rank0.gpr", "rank{rank}.gpr", 1)
	}
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", "multigpu", "--fan-in", "2", "--rank-timeout", "60s",
		"--batch-interval", "1h", "--sass", sassDir, "--replay", replay, "--", launcher, "-np", "4")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuprof run: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "4 of 4 ranks reported, 0 incomplete") {
		t.Errorf("not every rank completed:\n%s", stderr.String())
	}
	// The figures docs/scale.md's two-GPU table takes from run's log.
	if m := costLine.FindStringSubmatch(stderr.String()); m == nil || m[3] != "4" {
		t.Errorf("run's summary lacks its cost line:\n%s", stderr.String())
	} else {
		t.Log(m[0])
	}
	p, err := profile.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}

	// The binding and the sampling policy, in the merged profile and in
	// the streams.
	gs := analysis.GPUsOf(p)
	if !gs.Known || len(gs.List) != 2 || gs.Hosts != 1 || p.SealedRanks() != 4 {
		t.Fatalf("%d GPUs on %d hosts (known %v), %d sealed ranks: want 2 GPUs on 1 host, 4 sealed", len(gs.List), gs.Hosts, gs.Known, p.SealedRanks())
	}
	sampled := map[int32]bool{}
	for i, g := range gs.List {
		if len(g.Ranks) != 2 || len(g.Sampled) != 1 || len(g.TimesOnly) != 1 {
			t.Errorf("%s: ranks %v, sampled %v, kernel times only %v: want two ranks, one sampled", gs.Describe(i), g.Ranks, g.Sampled, g.TimesOnly)
			continue
		}
		sampled[g.Sampled[0]] = true
		for _, r := range g.Ranks {
			ri := p.Ranks[r]
			if want := strconv.Itoa(int(r) % 2); ri.Device != want || ri.GPUUUID != g.UUID {
				t.Errorf("rank %d on device %s (%s), want device %s (local rank mod 2 GPUs)", r, ri.Device, ri.GPUUUID, want)
			}
			if ri.Incomplete != "" {
				t.Errorf("rank %d incomplete: %s", r, ri.Incomplete)
			}
		}
		if only := p.Ranks[g.TimesOnly[0]]; only.PCSampling != "kernel times only: another process PC-samples "+g.UUID {
			t.Errorf("rank %d: PC sampling %q, want its own GPU (%s) named as sampled elsewhere", g.TimesOnly[0], only.PCSampling, g.UUID)
		}
	}
	for r, f := range files {
		h, pcs := streamFacts(t, f)
		elsewhere := h.Flags&rawstream.HelloPCSElsewhere != 0
		if elsewhere == sampled[int32(r)] || (pcs > 0) != sampled[int32(r)] {
			t.Errorf("rank %d's stream: PC-sampled elsewhere %v, %d PC_SAMPLES frames; the profile says sampled %v", r, elsewhere, pcs, sampled[int32(r)])
		}
		if launches := p.Ranks[int32(r)].Launches; launches == 0 {
			t.Errorf("rank %d: no kernel launches", r)
		}
	}

	// The text report: grouping, the policy in the provenance, the
	// imbalance within the GPUs with one heavy rank on each.
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	report := string(rep)
	for _, want := range []string{
		"Ranks by host and GPU", "2 GPUs on 1 host, 2 ranks each",
		"one process per GPU is PC-sampled", "gave kernel times only, as the policy has it, not a failure",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report.txt lacks %q", want)
		}
	}
	// The planted imbalance, one heavy rank on each GPU, and stall advice
	// naming the ranks whose samples it rests on. The generated streams
	// time every rank alike; on the captures the sampled ranks' kernels ran
	// under PC sampling, so their times are not the others' (the advice
	// says so), and what the report finds is logged for the record.
	expected := []string{"rank 1 on GPU 1", "rank 2 on GPU 0", "The imbalance is among the ranks sharing a GPU", "rests on the PC samples of ranks"}
	for _, want := range expected {
		if !strings.Contains(report, want) {
			if !captured {
				t.Errorf("report.txt lacks %q", want)
			}
			t.Logf("report.txt lacks %q", want)
		}
	}
	if i := strings.Index(report, "By GPU ("); i >= 0 {
		t.Logf("report.txt's imbalance by GPU:\n%s", report[i:])
	}
	for i, g := range gs.List {
		row := fmt.Sprintf("rank %d sampled, rank %d kernel times only", g.Sampled[0], g.TimesOnly[0])
		if !strings.Contains(report, row) {
			t.Errorf("report.txt lacks %s's row %q", gs.Describe(i), row)
		}
	}
	if strings.Contains(report, "Incomplete:   rank") || strings.Contains(report, "Incomplete:  rank") {
		t.Errorf("report.txt names incomplete ranks")
	}

	// JSON: devices, sampling states, GPUs, the split, advice's sampled ranks.
	jb, err := os.ReadFile(filepath.Join(out, "profile.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d jsonexport.Document
	if err := json.Unmarshal(jb, &d); err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Ranks {
		if r.Device == "" || r.PCSampling == "" {
			t.Errorf("profile.json rank %d: device %q, pc_sampling %q", r.Rank, r.Device, r.PCSampling)
		}
	}
	if len(d.GPUs) != 2 {
		t.Errorf("profile.json: %d GPUs", len(d.GPUs))
	}
	within, stalls := false, 0
	for _, k := range d.Kernels {
		within = within || (k.Imbalance.ByGPU != nil && k.Imbalance.ByGPU.Where == "within GPUs")
	}
	// Stall advice is made of PC samples: it names the sampled ranks it
	// rests on, and only those.
	for _, a := range d.Advice {
		if a.Category != analysis.CatStall {
			continue
		}
		stalls++
		if len(a.SampledRanks) == 0 {
			t.Errorf("stall advice %q does not name the ranks whose samples it rests on", a.Kind)
		}
		for _, r := range a.SampledRanks {
			if !sampled[r] {
				t.Errorf("advice %q rests on rank %d's samples, which gave kernel times only", a.Kind, r)
			}
		}
	}
	t.Logf("%d stall advice", stalls)
	if !captured && (stalls == 0 || !within) {
		t.Errorf("profile.json: %d stall advice, imbalance within GPUs %v", stalls, within)
	}

	// The hpcviewer database: (NODE, GPUDEVICE, RANK) per rank.
	db, err := hpctoolkit.Read(filepath.Join(out, "database"))
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 4; r++ {
		ids := db.Profiles[r+1].IDs
		if len(ids) != 3 || db.IDNames[ids[1].Kind] != "GPUDEVICE" || ids[1].Logical != uint32(r%2) || ids[2].Logical != uint32(r) {
			t.Errorf("database profile of rank %d: ids %+v", r, ids)
		}
	}
	if !strings.Contains(db.Description, "Ranks by host and GPU") {
		t.Error("the database description does not group the ranks by GPU")
	}

	// The HTML report's grouping.
	page, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte(`<table class="grid" id="gpus">`)) || !bytes.Contains(page, []byte(`<div class="caller split">`)) {
		t.Error("report.html lacks the GPU table or the heatmap's split by GPU")
	}
}
