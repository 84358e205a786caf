package html

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpuprof/analysis"
	"gpuprof/viewer-export/internal/exporttest"
	"gpuprof/viewer-export/internal/view"
	"gpuprof/viewer-export/text"
)

// headless renders file in headless Chromium at width x height and returns
// the DOM after the scripts ran.
func headless(t *testing.T, file string, width, height int, extra ...string) string {
	t.Helper()
	bin := chromium(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile"),
		fmt.Sprintf("--window-size=%d,%d", width, height), "--enable-logging=stderr", "--v=0"}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, "--dump-dom", "file://"+file)...)
	cmd.Env = append(os.Environ(), "DBUS_SESSION_BUS_ADDRESS=disabled:")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errb.String())
	}
	for _, l := range strings.Split(errb.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") || strings.Contains(l, "Uncaught") {
			t.Errorf("console: %s", l)
		}
	}
	return out.String()
}

// TestHeatmapAtScale: at 64 and 1024 ranks the per-rank heatmap draws
// every rank without the page scrolling sideways, in one band while cells
// can be 3 pixels wide and in bands beyond; the provenance table groups
// ranks by host past 64 ranks.
func TestHeatmapAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("renders in Chromium")
	}
	for _, c := range []struct {
		ranks, width int
		bands        string // the layout's band count
	}{
		{64, 1400, "1"}, {64, 900, "1"}, {1024, 1400, "[2-9]"}, {1024, 900, "([3-9]|1[0-9])"},
	} {
		t.Run(fmt.Sprintf("%d ranks at %dpx", c.ranks, c.width), func(t *testing.T) {
			p := exporttest.Showcase(c.ranks)
			file := filepath.Join(t.TempDir(), "report.html")
			var b bytes.Buffer
			if err := Write(&b, p, exporttest.ShowcaseAdvice(p), Options{}); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(file, b.Bytes(), 0o644)
			dom := headless(t, file, c.width, 2000)
			if !strings.Contains(dom, `data-heat-overflow="false"`) {
				t.Errorf("the heatmap is wider than the window (%s)", regexp.MustCompile(`data-heat-overflow="[^"]*"`).FindString(dom))
			}
			// At a desktop width nothing on the page scrolls sideways (on a
			// narrow window the redundancy tables' histograms may).
			if c.width >= 1400 && !strings.Contains(dom, `data-page-overflow="false"`) {
				t.Errorf("the page scrolls sideways (%s)", regexp.MustCompile(`data-page-overflow="[^"]*"`).FindString(dom))
			}
			m := regexp.MustCompile(`data-heat-layout="(\d+) bands of (\d+) ranks, cell ([\d.]+)px, strip (\d+)px"`).FindStringSubmatch(dom)
			if m == nil {
				t.Fatalf("heatmap not drawn:\n%.1500s", dom)
			}
			t.Logf("%d ranks, window %dpx: %s", c.ranks, c.width, m[0])
			bands, _ := strconv.Atoi(m[1])
			per, _ := strconv.Atoi(m[2])
			cell, _ := strconv.ParseFloat(m[3], 64)
			if !regexp.MustCompile("^"+c.bands+"$").MatchString(m[1]) || bands*per < c.ranks || cell < 3 {
				t.Errorf("layout %q: want %s bands holding all %d ranks in cells of 3px or more", m[0], c.bands, c.ranks)
			}
			if n := strings.Count(dom, `class="heat-strip"`); n == 0 {
				t.Error("no strips")
			}
			rows := strings.Count(dom, "<tr") // thead, heatmap, tables
			if c.ranks > groupRanksAbove && rows > 400 {
				t.Errorf("%d table rows for %d ranks: the provenance table should group ranks by host", rows, c.ranks)
			}
			if c.ranks > groupRanksAbove && !strings.Contains(dom, "complete (4 ranks)") {
				t.Error("provenance rows are not grouped by host")
			}
			if b.Len() > 4<<20 {
				t.Errorf("report of %d bytes", b.Len())
			}
		})
	}
}

// TestSiblingAdviceOneItem: the same finding at two calling contexts of
// one kernel is one card listing both contexts; a data object used by
// several kernel contexts is one row.
func TestSiblingAdviceOneItem(t *testing.T) {
	p := exporttest.Showcase(8)
	adv := exporttest.ShowcaseAdvice(p)
	// spmv launched from a second call site too: the same finding at both.
	kernels := exporttest.SiblingSpmv(p)
	if len(kernels) != 2 {
		t.Fatalf("%d spmv contexts", len(kernels))
	}
	for i, k := range kernels[:2] {
		adv = append(adv, analysis.Advice{Kind: "sibling finding", Category: analysis.CatImbalance, Hint: "rebalance the sibling work", Importance: 0.3 + 0.1*float64(i),
			Speedup: 1.3 + 0.1*float64(i), Ranks: []int32{3}, Hotspots: []analysis.Where{{Context: k, Kernel: "spmv_csr_f64"}}})
	}
	groups := text.AdviceGroups(p, text.SortAdvice(adv))
	var merged []analysis.Advice
	for _, g := range groups {
		if g[0].Kind == "sibling finding" {
			merged = g
		}
	}
	if len(merged) != 2 || len(groups) != len(adv)-1 {
		t.Fatalf("%d groups of %d advice; merged group of %d", len(groups), len(adv), len(merged))
	}
	var b bytes.Buffer
	if err := Write(&b, p, adv, Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if c := strings.Count(page, "rebalance the sibling work"); c != 1 {
		t.Errorf("the finding shows %d times", c)
	}
	if !strings.Contains(page, "at 2 calling contexts of the same code:") || strings.Count(page, "— called from") < 2 {
		t.Error("the merged card does not list its two calling contexts")
	}
	// Data objects: one row each.
	seen := map[string]int{}
	objs := page[strings.Index(page, "Top data objects"):strings.Index(page, `<section id="kernels">`)]
	for _, m := range regexp.MustCompile(`<tr><td>\d+</td><td>[^<]*</td><td>([^<]*)`).FindAllStringSubmatch(objs, -1) {
		seen[m[1]]++
	}
	for o, n := range seen {
		if n > 1 {
			t.Errorf("data object %s in %d rows", o, n)
		}
	}
	if len(seen) == 0 || !strings.Contains(objs, `class="use"`) {
		t.Errorf("no data object, or none used by several kernel contexts: %d objects", len(seen))
	}
}

// TestMultiGPUGrouping: 64 ranks on two GPUs of one host (ranks spread by
// local rank, one PC-sampled per GPU, heavy ranks 1 and 2): the provenance
// groups ranks by host and GPU and says who was sampled, the heatmap's
// columns run by GPU and each row says whether its imbalance is within or
// between GPUs; in Chromium the heatmap draws without console errors.
func TestMultiGPUGrouping(t *testing.T) {
	p := exporttest.MultiGPU(64, 1, 2, 1, 2)
	adv, err := analysis.Advise(p, nil, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, p, adv, Options{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"2 GPUs on 1 host, 32 ranks each",
		"ranks 0 (GPU 0), 1 (GPU 1) sampled; 62 other ranks gave kernel times only",
		`<tr><td>gpu00</td><td>0</td><td class="mono">GPU-3f2a1b90</td><td>NVIDIA H100 80GB HBM3</td><td>0-62/2</td><td class="r">32</td><td>rank 0 sampled, ranks 2-62/2 kernel times only</td></tr>`,
		`<tr><td>gpu00</td><td>1</td><td class="mono">GPU-3f2a1b91</td><td>NVIDIA H100 80GB HBM3</td><td>1-63/2</td><td class="r">32</td><td>rank 1 sampled, ranks 3-63/2 kernel times only</td></tr>`,
		"64 ranks on 1 hosts and 2 GPUs, grouped by host and GPU",
		`<div class="caller split">imbalance within GPUs: `,
		`"name":"gpu00 · GPU 0","n":32`,
		"<td class=\"mono\">1\u00a0·\u00a0GPU-3f2a1b91</td><td>sampled</td>",
		"<td>3</td><td>gpu00</td><td>NVIDIA H100 80GB HBM3</td><td class=\"mono\">1\u00a0·\u00a0GPU-3f2a1b91</td><td>kernel times only</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Past groupRanksAbove ranks, one provenance row per GPU of a host.
	p = exporttest.MultiGPU(groupRanksAbove+2, 1, 2, 1, 2)
	rows := provenanceRows(p, view.ProvenanceOf(p), analysis.GPUsOf(p))
	if len(rows) != 2 || rows[0].Rank != "0-64/2" || rows[0].PCS != "rank 0 sampled, ranks 2-64/2 kernel times only" || rows[0].Device != "0\u00a0·\u00a0GPU-3f2a1b90" {
		t.Errorf("grouped rows %+v", rows)
	}
	if testing.Short() {
		return
	}
	file := filepath.Join(t.TempDir(), "report.html")
	os.WriteFile(file, b.Bytes(), 0o644)
	dom := headless(t, file, 1400, 2000)
	if !strings.Contains(dom, `data-heat-overflow="false"`) || !strings.Contains(dom, "data-heat-layout=") {
		t.Error("heatmap not drawn within the window")
	}
}
