package diff

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func run(job string, mod profile.ModuleHash, line uint32, kernels map[string][2]uint64) *profile.Profile {
	p := profile.New(job)
	for name, v := range kernels {
		k := p.Path(
			profile.Frame{Kind: profile.KindHostFrame, Module: "/bin/app", Function: "main", File: "main.cc", Line: line},
			profile.Frame{Kind: profile.KindKernel, Module: mod.String(), Function: name})
		p.Add(k.ID, profile.GPUTime, v[0])
		p.Add(k.ID, profile.MemLoads, v[1])
	}
	return p
}

func TestCompareMatchesAcrossModulesAndLines(t *testing.T) {
	before := run("v1", 0xaaaa, 10, map[string][2]uint64{"_Z3fooPf": {1000, 500}, "_Z3oldv": {200, 0}})
	after := run("v2", 0xbbbb, 12, map[string][2]uint64{"_Z3fooPf": {600, 500}, "_Z3newv": {50, 0}})
	r := Compare(before, after)
	if len(r.Kernels) != 3 {
		t.Fatalf("%d kernel contexts, want 3: %+v", len(r.Kernels), r.Kernels)
	}
	foo := r.Kernels[0]
	if foo.Kernel != "foo" || foo.Status != Both {
		t.Fatalf("first: %+v (largest time change first)", foo)
	}
	tm := foo.Time()
	if tm.Before != 1000 || tm.After != 600 || tm.Delta() != -400 || math.Abs(tm.Rel()+0.4) > 1e-12 {
		t.Errorf("foo time %+v delta %v rel %v", tm, tm.Delta(), tm.Rel())
	}
	st := map[string]Status{}
	for _, k := range r.Kernels {
		st[k.Kernel] = k.Status
	}
	if st["old"] != Gone || st["new"] != New {
		t.Errorf("statuses %v", st)
	}
	for _, c := range r.Totals {
		if c.Metric == "gpu.time_ns" && (c.Before != 1200 || c.After != 650) {
			t.Errorf("total %+v", c)
		}
	}
	var b strings.Builder
	if err := r.WriteText(&b, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"v1 (before) -> v2 (after)", "-400 ns", "-40.0%", "new", "gone"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// After is the 8-rank profile with the slow rank fixed and the redundant
// loads gone: the stencil kernel's time and loads drop.
func After() *profile.Profile {
	p := exporttest.Profile(8, 2, exporttest.Shape)
	k := exporttest.KernelNode(p)
	n := p.Nodes[k]
	for i := range n.Metrics {
		if n.Metrics[i].ID == profile.GPUTime {
			n.Metrics[i].V = n.Metrics[i].V * 6 / 10
		}
	}
	for id, m := range p.Nodes {
		if p.KernelOf(id) == k {
			for i := range m.Metrics {
				if m.Metrics[i].ID == profile.MemLoads || m.Metrics[i].ID == profile.RedTempLoad {
					m.Metrics[i].V /= 4
				}
			}
		}
	}
	return p
}

func TestCompareGolden(t *testing.T) {
	before := exporttest.Profile(8, 2, exporttest.Shape)
	r := Compare(before, After())
	var b strings.Builder
	if err := r.WriteText(&b, 5); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("testdata", "diff.golden")
	if *update {
		os.WriteFile(file, []byte(b.String()), 0o644)
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("diff text differs from %s (go test -update rewrites it):\n%s", file, b.String())
	}
	if r.Kernels[0].Kernel != "stencil_2d" || !strings.Contains(r.Kernels[0].Caller, "solver_step") {
		t.Errorf("first kernel %+v", r.Kernels[0])
	}
	// Unchanged kernels show a zero change.
	for _, k := range r.Kernels[2:] {
		if c := k.Time(); c.Delta() != 0 || k.Status != Both {
			t.Errorf("%s: %+v", k.Key, c)
		}
	}
}
