package html

import (
	"bytes"
	"encoding/json"
	"flag"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/diff"
	"gpuprof/viewer-export/internal/exporttest"
)

var updateShot = flag.Bool("update-screenshot", false, "write the rendered test report to docs/report-showcase.png (docs/report-screenshot.png is make demo's)")

// fixed returns the showcase after a fix: spmv 40% faster.
func fixed() *profile.Profile {
	p := exporttest.Showcase(8)
	p.Job = "heat3d-cg-fixed"
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindKernel && strings.HasPrefix(n.Frame.Function, "_Z12spmv") {
			for i := range n.Metrics {
				if n.Metrics[i].ID == profile.GPUTime {
					n.Metrics[i].V = n.Metrics[i].V * 6 / 10
				}
			}
		}
	}
	return p
}

func render(t *testing.T, p *profile.Profile, o Options) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, p, exporttest.ShowcaseAdvice(p), o); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The page is one file: no external scripts, styles, images or fonts.
func TestSelfContained(t *testing.T) {
	p := exporttest.Showcase(8)
	page := render(t, p, Options{Diff: diff.Compare(p, fixed())})
	if strings.Contains(page, "ZgotmplZ") {
		t.Error("a template value was rejected by html/template's escaper")
	}
	for _, re := range []string{`(?i)<script[^>]+src=`, `(?i)<link[^>]+href="(https?:)?//`, `(?i)<img[^>]+src="(https?:)?//`, `(?i)url\((https?:)?//`, `(?i)@import`} {
		if regexp.MustCompile(re).MatchString(page) {
			t.Errorf("page refers to an external resource (%s)", re)
		}
	}
	for _, want := range []string{"SYNTHETIC DATA", `id="fg-data"`, `class="heat`, `class="hist"`, `id="diff"`, "heat3d-cg-fixed", "spmv_csr_f64"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// Names from the program cannot break out of the page's script or markup.
func TestEscaping(t *testing.T) {
	p := profile.New("job<b>")
	k := p.Path(profile.Frame{Kind: profile.KindHostFrame, Module: "/bin/x", Function: "</script><script>alert(1)</script>", File: "a.cc", Line: 1},
		profile.Frame{Kind: profile.KindKernel, Module: "00", Function: "<img src=x onerror=alert(2)>"})
	p.Add(k.ID, profile.GPUTime, 10)
	var b bytes.Buffer
	if err := Write(&b, p, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script>alert(1)", "<img src=x", "job<b>"} {
		if strings.Contains(page, bad) {
			t.Errorf("unescaped %q in the page", bad)
		}
	}
}

func TestEmptyProfile(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, profile.New("empty"), nil, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No advice", "No per-rank kernel time", "No kernels"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("empty report lacks %q", want)
		}
	}
}

func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (scripts/setup-debian installs it; skipping only where it cannot be installed)")
	return ""
}

// TestChromium renders the report in headless Chromium: the scripts run
// (the flame graph is drawn), the page shows the advice, heatmap,
// redundancy views, comparison and provenance, and no console message or
// uncaught error appears. It also takes the screenshot kept in docs/.
func TestChromium(t *testing.T) {
	chromium(t)
	dir := t.TempDir()
	p := exporttest.Showcase(8)
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, []byte(render(t, p, Options{Diff: diff.Compare(p, fixed())})), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "report.png")
	dom := headless(t, file, 1400, 2600, "--hide-scrollbars", "--screenshot="+shot)
	if !strings.Contains(dom, `data-rendered="true"`) {
		t.Fatalf("the report's script did not finish:\n%.2000s", dom)
	}
	if m := regexp.MustCompile(`data-flame-frames="(\d+)"`).FindStringSubmatch(dom); m == nil {
		t.Error("flame graph not drawn")
	} else if n, _ := strconv.Atoi(m[1]); n < 30 {
		t.Errorf("flame graph drew %d frames", n)
	}
	if !regexp.MustCompile(`<div id="js-errors" class="banner" hidden=""></div>`).MatchString(dom) {
		t.Errorf("the page reports a script error: %s", regexp.MustCompile(`<div id="js-errors"[^>]*>[^<]*`).FindString(dom))
	}
	count := func(s string) int { return strings.Count(dom, s) }
	if c := count(`<li class="card`); c != 5 {
		t.Errorf("%d advice cards, want 5", c)
	}
	if c := count(`class="fg-node"`); c < 30 {
		t.Errorf("%d flame graph frames in the DOM", c)
	}
	for _, want := range []string{"SYNTHETIC DATA", "redundant load elimination", "load_row", "kernel spmv_csr_f64",
		"[inlined] load_row", "loop spmv.cu:31", "rank 3", "1.71", "Top temporal pairs", "Top data objects", "alloc_diag",
		"heat3d-cg → heat3d-cg-fixed", "-40.0%", "gpu017", "3100", "Incomplete ranks"} {
		if !strings.Contains(dom, want) && !strings.Contains(dom, strings.ReplaceAll(want, ">", "&gt;")) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	// The heatmap's slowest rank for spmv is rank 3, flagged.
	if !regexp.MustCompile(`(?s)<tr class="hot"><td class="name"[^>]*>spmv_csr_f64.*?rank 3</td></tr>`).MatchString(dom) {
		t.Error("heatmap: spmv_csr_f64 row not flagged with rank 3 slowest")
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 2600 {
		t.Errorf("screenshot %v", b)
	}
	colors := map[uint32]bool{}
	for y := 0; y < img.Bounds().Dy(); y += 37 {
		for x := 0; x < img.Bounds().Dx(); x += 23 {
			r, g, b, _ := img.At(x, y).RGBA()
			colors[r>>12<<8|g>>12<<4|b>>12] = true
		}
	}
	if len(colors) < 20 {
		t.Errorf("screenshot looks blank (%d colours)", len(colors))
	}
	if *updateShot {
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "report-showcase.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The JAX program's page: folded host paths in the kernel table and the
// flame graph, DelayKernel under "waiting kernels" with no advice card,
// the autotuner's kernel marked, the time divided.
func TestFrameworkPage(t *testing.T) {
	p, mods := exporttest.Framework()
	adv, err := analysis.Advise(p, mods, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, p, adv, Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`id="waiting"`, "stream_executor::gpu::(anonymous namespace)::DelayKernel (in the framework&#39;s autotuning)",
		`<span class="badge">waiting</span>`, `<span class="badge">autotuning</span>`, "in the framework's autotuning</span>",
		"… 6 frames in xla_cuda_plugin.so, libc.so.6 …", "step (matmul.py:11)", "compute in the program&#39;s repeated work",
		"loop &#43;0x30 (no line information)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Advice cards come before the waiting section; none is on DelayKernel.
	cards := page[strings.Index(page, `<section id="advice">`):strings.Index(page, `id="waiting"`)]
	if strings.Contains(cards, "DelayKernel") {
		t.Error("an advice card on DelayKernel")
	}
	// The flame graph folds each run of framework frames into one frame
	// and keeps the program's.
	m := regexp.MustCompile(`(?s)<script type="application/json" id="fg-data">(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no flame data")
	}
	var fg struct {
		Nodes [][]any `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(m[1]), &fg); err != nil {
		t.Fatal(err)
	}
	labels := map[string]int{}
	for _, n := range fg.Nodes {
		if n[1] == "host" {
			labels[n[2].(string)]++
		}
	}
	if labels["… 6 frames in xla_cuda_plugin.so, libc.so.6 …"] != 1 || labels["step (matmul.py:11)"] != 1 || labels["… 2 frames in python3.12 …"] != 1 || labels["start_thread"] != 0 {
		t.Errorf("flame host frames %v", labels)
	}
}
