package pprof

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	pp "github.com/google/pprof/profile"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

func write(t *testing.T, p *profile.Profile) (string, *pp.Profile) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := WriteFile(file, p); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof, err := pp.Parse(f)
	if err != nil {
		t.Fatalf("pprof cannot parse what we wrote: %v", err)
	}
	return file, prof
}

func TestConvert(t *testing.T) {
	p := exporttest.Profile(8, 2, exporttest.Shape)
	_, prof := write(t, p)
	metrics := sampleTypes(p)
	if len(metrics) < 5 {
		t.Fatalf("sample types %v", metrics)
	}
	if len(prof.SampleType) != len(metrics) || prof.DefaultSampleType != "gpu.time_ns" {
		t.Fatalf("sample types %v default %q", prof.SampleType, prof.DefaultSampleType)
	}
	for i, m := range metrics {
		if prof.SampleType[i].Type != m.Name() || prof.SampleType[i].Unit != Unit(m.Name()) {
			t.Errorf("sample type %d: %v", i, prof.SampleType[i])
		}
	}
	if prof.SampleType[0].Unit != "nanoseconds" {
		t.Errorf("gpu.time_ns unit %q", prof.SampleType[0].Unit)
	}
	// Totals equal the profile's, per metric and per rank.
	want := map[string]int64{}
	for _, n := range p.Nodes {
		for _, v := range n.Metrics {
			if !internalMetric(v.ID.Name()) && !launchAttr(v.ID.Name()) {
				want[v.ID.Name()] += int64(v.V)
			}
		}
	}
	got := Totals(prof)
	for m, v := range want {
		if got[m] != v {
			t.Errorf("total %s = %d, want %d", m, got[m], v)
		}
	}
	ranks := RankTotals(prof)
	for _, r := range p.SortedRanks() {
		var w int64
		for _, vs := range p.PerRank[r] {
			w += int64(vs.Get(profile.GPUTime))
		}
		if g := ranks[int64(r)]["gpu.time_ns"]; g != w || w == 0 {
			t.Errorf("rank %d gpu.time_ns = %d, want %d", r, g, w)
		}
	}
	if prof.Mapping[0].File != "/app/bin/app" && prof.Mapping[0].File != "/app/bin/stencil" {
		t.Errorf("main mapping %q, want a host binary", prof.Mapping[0].File)
	}
	// The inlined load: one location, two frames (load inlined into
	// stencil_2d at stencil.cu:32), under the kernel launch and main.
	found := false
	for _, s := range prof.Sample {
		l := s.Location[0]
		if len(l.Line) != 2 || l.Line[0].Function.Name != "load(float const*, int)" {
			continue
		}
		found = true
		if l.Line[0].Line != 12 || l.Line[0].Function.Filename != "load.cuh" || l.Line[1].Function.Name != "stencil_2d(float const*, float*, int, int)" || l.Line[1].Line != 32 {
			t.Errorf("inlined location %+v %+v", l.Line[0], l.Line[1])
		}
		if l.Mapping.BuildID != exporttest.AppModule.String() || l.Address-l.Mapping.Start != 0x140 {
			t.Errorf("inlined location at %s+%#x", l.Mapping.BuildID, l.Address-l.Mapping.Start)
		}
		var names []string
		for _, loc := range s.Location[1:] {
			names = append(names, loc.Line[0].Function.Name)
		}
		if strings.Join(names, " < ") != "<gpu kernel> stencil_2d(float const*, float*, int, int) < solver_step(int) < main" {
			t.Errorf("callers %v", names)
		}
		if len(s.NumLabel["rank"]) != 1 || !strings.HasPrefix(s.Label["rank_value"][0], "split by ") {
			t.Errorf("GPU-internal sample labels %v %v: want a rank and how its share was split", s.NumLabel, s.Label)
		}
	}
	if !found {
		t.Error("no location with the inlined load")
	}
	// Every sample has a rank, and the ranks' shares of every sample type
	// add up to its total.
	sum := map[string]int64{}
	for r, tot := range ranks {
		if r < 0 || r >= 8 {
			t.Errorf("rank label %d", r)
		}
		for m, v := range tot {
			sum[m] += v
		}
	}
	for m, v := range got {
		if sum[m] != v {
			t.Errorf("%s: ranks add up to %d of %d", m, sum[m], v)
		}
	}
	for _, s := range prof.Sample {
		if len(s.NumLabel["rank"]) != 1 {
			t.Fatalf("sample without a rank label: %v %v", s.Value, s.Label)
		}
	}
}

// Internal series are not sample types; launch attributes are labels
// holding their mean per launch, per rank.
func TestLaunchLabels(t *testing.T) {
	p := exporttest.Profile(8, 2, exporttest.Shape)
	k := exporttest.KernelNode(p)
	add := func(vs profile.Values, name string, v uint64) profile.Values {
		return append(vs, profile.MV{ID: profile.Metric(name), V: v})
	}
	var launches uint64
	for _, r := range p.SortedRanks() {
		vs := p.PerRank[r][k]
		l := vs.Get(profile.GPULaunches)
		if l == 0 {
			t.Fatalf("rank %d: no launches at the kernel", r)
		}
		launches += l
		vs = add(vs, "launch.with_attrs", l)
		vs = add(vs, "launch.regs", 40*l)
		vs = add(vs, "launch.block_threads", 256*l)
		vs = add(vs, "gpu.time_hist.56", l)
		vs = add(vs, "gpu.time_sq_lo", 12345)
		p.PerRank[r][k] = vs
	}
	n := p.Nodes[k]
	n.Metrics = add(n.Metrics, "launch.with_attrs", launches)
	n.Metrics = add(n.Metrics, "launch.regs", 40*launches)
	n.Metrics = add(n.Metrics, "launch.block_threads", 256*launches)
	n.Metrics = add(n.Metrics, "gpu.time_hist.56", launches)
	n.Metrics = add(n.Metrics, "gpu.time_sq_lo", 8*12345)
	_, prof := write(t, p)
	for _, st := range prof.SampleType {
		if internalMetric(st.Type) || launchAttr(st.Type) {
			t.Errorf("sample type %s", st.Type)
		}
	}
	seen := 0
	for _, s := range prof.Sample {
		if !strings.HasPrefix(s.Location[0].Line[0].Function.Name, "<gpu kernel> stencil_2d") || s.Location[1].Line[0].Function.Name != "solver_step(int)" {
			continue
		}
		seen++
		if r, th := s.NumLabel["regs"], s.NumLabel["block_threads"]; len(r) != 1 || r[0] != 40 || len(th) != 1 || th[0] != 256 {
			t.Errorf("launch sample labels %v", s.NumLabel)
		}
		if u := s.NumUnit["regs"]; len(u) != 1 || u[0] != "registers" {
			t.Errorf("regs unit %v", u)
		}
	}
	if seen != 8 {
		t.Errorf("%d launch samples of the kernel, want one per rank", seen)
	}
}

// goTool finds the go command that runs `go tool pprof`.
func goTool(t *testing.T) string {
	t.Helper()
	g := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(g); err == nil {
		return g
	}
	g, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to run go tool pprof")
	}
	return g
}

func pprofTool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(goTool(t), append([]string{"tool", "pprof"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go tool pprof %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

// TestGoToolPprof runs the pprof tool on the file: -top lists the kernels
// by GPU time with the right total, rank 3 shows as the slow one, and the
// instruction samples land in the GPU functions and inlined code.
func TestGoToolPprof(t *testing.T) {
	p := exporttest.Profile(8, 2, exporttest.Shape)
	file, prof := write(t, p)
	top := pprofTool(t, "-top", "-unit=ns", "-sample_index=gpu.time_ns", file)
	total := Totals(prof)["gpu.time_ns"]
	if !strings.Contains(top, "of "+strconv.FormatInt(total, 10)+"ns total") {
		t.Errorf("-top does not show the total %dns:\n%s", total, top)
	}
	k := exporttest.KernelNode(p)
	stencil := p.Nodes[k].Metrics.Get(profile.GPUTime) + 8*7000 // also launched from libhalo
	re := regexp.MustCompile(`(?m)^\s*(\d+)ns\s+[\d.]+%\s+[\d.]+%\s+\d+ns\s+[\d.]+%\s+<gpu kernel> stencil_2d\(float const\*, float\*, int, int\)$`)
	m := re.FindStringSubmatch(top)
	if m == nil || m[1] != strconv.FormatUint(stencil, 10) {
		t.Errorf("-top: stencil_2d kernel flat time %v, want %d:\n%s", m, stencil, top)
	}
	if !strings.Contains(top, "Type: gpu.time_ns") || !strings.Contains(top, "gpuprof job "+exporttest.Job) || !strings.Contains(top, "SYNTHETIC") {
		t.Errorf("-top header:\n%s", top)
	}
	// Rank 3 runs the stencil kernel 3x slower.
	r3 := pprofTool(t, "-top", "-unit=ns", "-sample_index=gpu.time_ns", "-tagfocus=rank=3", file)
	var w3 uint64
	for _, vs := range p.PerRank[3] {
		w3 += vs.Get(profile.GPUTime)
	}
	if !strings.Contains(r3, "accounting for "+strconv.FormatUint(w3, 10)+"ns") {
		t.Errorf("-tagfocus=rank=3: want total %dns:\n%s", w3, r3)
	}
	// The PC samples too: rank 3's share is its share of the kernels' time.
	var want3, total3 int64
	for r, tot := range RankTotals(prof) {
		total3 += tot["inst.samples"]
		if r == 3 {
			want3 = tot["inst.samples"]
		}
	}
	if want3 == 0 || want3 == total3 {
		t.Fatalf("rank 3 has %d of %d instruction samples", want3, total3)
	}
	s3 := pprofTool(t, "-top", "-sample_index=inst.samples", "-tagfocus=rank=3", file)
	if !strings.Contains(s3, "accounting for "+strconv.FormatInt(want3, 10)+",") && !strings.Contains(s3, "accounting for "+strconv.FormatInt(want3, 10)+" ") {
		t.Errorf("-sample_index=inst.samples -tagfocus=rank=3: want %d:\n%s", want3, s3)
	}
	tags := pprofTool(t, "-tags", file)
	if !strings.Contains(tags, "rank:") || !strings.Contains(tags, "host:") {
		t.Errorf("-tags:\n%s", tags)
	}
	ins := pprofTool(t, "-top", "-sample_index=inst.samples", file)
	for _, fn := range []string{"stencil_2d(float const*, float*, int, int)", "load(float const*, int) (inline)", "reduce(float*)"} {
		if !strings.Contains(ins, fn) {
			t.Errorf("-top inst.samples lacks %s:\n%s", fn, ins)
		}
	}
	lines := pprofTool(t, "-top", "-lines", "-sample_index=stall.long_scoreboard", file)
	if !strings.Contains(lines, "stencil.cu:31") || !strings.Contains(lines, "load.cuh:12") {
		t.Errorf("-top -lines lacks the GPU source lines:\n%s", lines)
	}
}

func TestConvertEmpty(t *testing.T) {
	_, prof := write(t, profile.New("empty"))
	if len(prof.Sample) != 0 || len(prof.SampleType) != 0 {
		t.Errorf("empty profile: %d samples, %d types", len(prof.Sample), len(prof.SampleType))
	}
}
