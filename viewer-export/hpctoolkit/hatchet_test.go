package hpctoolkit

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
	"gpuprof/viewer-export/internal/view"
)

// hatchetOut is what ../shared/validators/hpctoolkit-check prints: the
// database as LLNL Hatchet's HPCToolkit reader sees it (summary profile).
type hatchetOut struct {
	Roots   int      `json:"roots"`
	Columns []string `json:"columns"`
	Nodes   []struct {
		ID      int                `json:"id"`
		Parent  *int               `json:"parent"`
		Name    string             `json:"name"`
		Type    string             `json:"type"`
		Metrics map[string]float64 `json:"metrics"`
	} `json:"nodes"`
}

// validator finds hpctoolkit-check beside the checkout (../shared/validators
// from the repository root); tests skip where it is absent.
func validator(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = up
	}
	v := filepath.Join(dir, "..", "shared", "validators", "hpctoolkit-check")
	if _, err := os.Stat(v); err != nil {
		t.Skipf("Hatchet validator not found at %s (it lives beside the checkout in CI): %v", v, err)
	}
	return v
}

func runHatchet(t *testing.T, check, db string) *hatchetOut {
	t.Helper()
	cmd := exec.Command(check, db)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			t.Fatalf("hpctoolkit-check cannot run (its Debian packages come from scripts/setup-debian, which make test runs first): %s", errb.String())
		}
		t.Fatalf("Hatchet could not read %s: %v\n%s", db, err, errb.String())
	}
	var h hatchetOut
	if err := json.Unmarshal(out.Bytes(), &h); err != nil {
		t.Fatalf("hpctoolkit-check output: %v", err)
	}
	return &h
}

// paths maps Hatchet's nodes to paths of "type name", summing duplicates.
func (h *hatchetOut) paths() (map[string]map[string]float64, map[string]int) {
	byID := map[int]string{}
	vals := map[string]map[string]float64{}
	count := map[string]int{}
	for _, n := range h.Nodes { // parents come before children (pre-order)
		p := n.Type + " " + n.Name
		if n.Parent != nil {
			p = byID[*n.Parent] + " > " + p
		}
		byID[n.ID] = p
		count[p]++
		add(vals, p, n.Metrics)
	}
	return vals, count
}

// TestHatchetReadsOurDatabase writes the 8-rank profile and reads it with
// Hatchet: the call tree, the inclusive and exclusive values of every
// metric at every context, and the totals must equal gpuprof's profile.
func TestHatchetReadsOurDatabase(t *testing.T) {
	check := validator(t)
	p := exporttest.Profile(8, 2, exporttest.Shape)
	got := hatchetMatches(t, check, p)
	_, nodePath := expectTree(p)
	k := exporttest.KernelNode(p)
	for _, v := range p.Inclusive()[k] {
		if g := got[nodePath[k]][v.ID.Name()+" (inc)"]; !near(g, float64(v.V)) {
			t.Errorf("stencil kernel %s: Hatchet %v, gpuprof inclusive %v", v.ID.Name(), g, v.V)
		}
	}
	if !strings.Contains(nodePath[k], "function <gpu kernel> stencil_2d(float const*, float*, int, int)") {
		t.Errorf("kernel path %s", nodePath[k])
	}
	cols := map[string]bool{}
	for c := range got["entry entry"] {
		cols[c] = true
	}
	for _, m := range []string{"gpu.time_ns", "inst.samples", "stall.long_scoreboard", "mem.loads", "mem.stores",
		"red.temporal.load", "red.temporal.store", "red.spatial.load", "red.spatial.store"} {
		if !cols[m+" (inc)"] {
			t.Errorf("metric %s: no inclusive total at the entry", m)
		}
	}

	// HPCToolkit's own PC-sampling database has the same shape: entry,
	// host functions and lines, "<gpu kernel>", the GPU function, lines and
	// loops, metrics with inclusive and exclusive columns.
	ref := runHatchet(t, check, filepath.Join("testdata", "hpctoolkit", "loops-cuda-nvidiapc-t.d"))
	refPaths, _ := ref.paths()
	shape := func(paths map[string]map[string]float64) map[string]bool {
		s := map[string]bool{}
		for p := range paths {
			i := strings.Index(p, "function <gpu kernel>")
			if i < 0 {
				continue
			}
			var kinds []string
			for _, e := range strings.Split(p[i:], " > ") {
				kinds = append(kinds, strings.SplitN(e, " ", 2)[0])
			}
			s[strings.Join(kinds, "/")] = true
		}
		return s
	}
	ours, theirs := shape(got), shape(refPaths)
	for _, want := range []string{"function/function/line", "function/function/loop/line"} {
		if !theirs[want] || !ours[want] {
			t.Errorf("GPU subtree shape %s: HPCToolkit's %v, ours %v", want, theirs[want], ours[want])
		}
	}
}

// TestHatchetReadsProfileFile runs the same check on a profile written by
// the pipeline (e.g. gpuprof demo's DIR/profile.gpuprof), named by
// GPUPROF_HATCHET_PROFILE.
func TestHatchetReadsProfileFile(t *testing.T) {
	file := os.Getenv("GPUPROF_HATCHET_PROFILE")
	if file == "" {
		t.Skip("set GPUPROF_HATCHET_PROFILE to a profile file or output directory to check it")
	}
	check := validator(t)
	if st, err := os.Stat(file); err == nil && st.IsDir() {
		file = filepath.Join(file, profile.FileName)
	}
	p, err := profile.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := hatchetMatches(t, check, p)
	t.Logf("%s: %d contexts agree with Hatchet", file, len(got))
}

// hatchetMatches writes p, reads it with Hatchet and checks the call tree,
// every context's inclusive and exclusive values and the program totals
// against p; it returns Hatchet's values by path.
func hatchetMatches(t *testing.T, check string, p *profile.Profile) map[string]map[string]float64 {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "database")
	if err := Write(dir, p); err != nil {
		t.Fatal(err)
	}
	h := runHatchet(t, check, dir)
	if h.Roots != 1 {
		t.Errorf("Hatchet sees %d roots", h.Roots)
	}
	got, count := h.paths()
	tree, _ := expectTree(p)
	wantInc, wantExc, kinds := tree.flatten()
	for path := range kinds {
		if count[path] != 1 {
			t.Errorf("%s: Hatchet has %d nodes, want 1", path, count[path])
		}
	}
	for path := range count {
		if _, ok := kinds[path]; !ok {
			t.Errorf("Hatchet has an unexpected node %s", path)
		}
	}
	cols := map[string]bool{}
	for _, c := range h.Columns {
		cols[c] = true
	}
	for _, m := range view.Metrics(p) {
		if !cols[m.Name()] || !cols[m.Name()+" (inc)"] {
			t.Errorf("metric %s: columns %v", m.Name(), h.Columns)
		}
	}
	for path, want := range wantInc {
		for m, v := range want {
			if g := got[path][m+" (inc)"]; !near(g, v) {
				t.Errorf("%s: %s (inc) = %v, want %v", path, m, g, v)
			}
		}
		for m, v := range wantExc[path] {
			if g := got[path][m]; !near(g, v) {
				t.Errorf("%s: %s = %v, want %v", path, m, g, v)
			}
		}
		for c, g := range got[path] {
			m, inc := strings.CutSuffix(c, " (inc)")
			w := wantExc[path][m]
			if inc {
				w = want[m]
			}
			if !near(g, w) {
				t.Errorf("%s: Hatchet %s = %v, want %v", path, c, g, w)
			}
		}
	}
	// Totals straight from gpuprof's profile.
	total := map[string]float64{}
	for _, n := range p.Nodes {
		for _, v := range n.Metrics {
			total[v.ID.Name()] += float64(v.V)
		}
	}
	for m, v := range total {
		if g := got["entry entry"][m+" (inc)"]; !near(g, v) {
			t.Errorf("program total %s: Hatchet %v, gpuprof %v", m, g, v)
		}
	}
	return got
}
