package html

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/view"
)

// The per-rank views at scale: the heatmap draws every rank of every
// kernel context in the page's width (cells shrink down to a few pixels,
// then the ranks wrap into bands, so the page never scrolls sideways),
// with the ranks grouped by host; the provenance table groups ranks by
// host past groupRanksAbove ranks.

// groupRanksAbove: with more ranks, the provenance table has one row per
// host (and one per incomplete rank) instead of one per rank.
const groupRanksAbove = 64

type heatRow struct {
	Kernel, Caller, Mean, Ratio, Slowest string
	Hot                                  bool
	// SlowestGPU and Split, when ranks share GPUs: the slowest rank's GPU
	// and whether the imbalance is within GPUs or between them.
	SlowestGPU, Split string
}

type heat struct {
	Rows  []heatRow
	Ranks int
	Hosts int
	GPUs  int // GPUs when ranks share them (columns grouped by GPU), else 0
	// Data is the strips' JSON for the page's script: column order
	// (ranks grouped by host), host groups, and per row the values and
	// their mean.
	Data template.JS
}

// heatData is what the script draws.
type heatData struct {
	Ranks []int32   `json:"ranks"` // column order
	Hosts []hostRun `json:"hosts"` // consecutive columns per host
	Rows  []heatVal `json:"rows"`
}

// hostRun is a run of columns: a host's ranks, or the ranks of one GPU
// of a host.
type hostRun struct {
	Name  string `json:"name"`
	Count int    `json:"n"`
	host  string
	gpu   int // index in analysis.GPUs.List, -1 for a whole host
}

type heatVal struct {
	Values []uint64 `json:"v"`
	Mean   float64  `json:"mean"`
}

// rankOrder orders the ranks by host (hosts in order of their lowest
// rank), then by GPU when ranks share GPUs, then by rank, and returns the
// runs of consecutive columns: one per host, or one per GPU of each host
// when ranks share GPUs (host → GPU → ranks).
func rankOrder(p *profile.Profile, gs analysis.GPUs) ([]int32, []hostRun) {
	ranks := p.SortedRanks()
	byGPU := gs.Known && gs.Shared()
	first := map[string]int32{}
	host := func(r int32) string {
		if ri := p.Ranks[r]; ri != nil {
			return ri.Host
		}
		return ""
	}
	gpu := func(r int32) int {
		if i, ok := gs.Of[r]; ok && byGPU {
			return i
		}
		return -1
	}
	for _, r := range ranks {
		if _, ok := first[host(r)]; !ok {
			first[host(r)] = r
		}
	}
	sort.SliceStable(ranks, func(i, j int) bool {
		hi, hj := host(ranks[i]), host(ranks[j])
		if hi != hj {
			return first[hi] < first[hj]
		}
		if gi, gj := gpu(ranks[i]), gpu(ranks[j]); gi != gj {
			return gi < gj
		}
		return ranks[i] < ranks[j]
	})
	var runs []hostRun
	for i, r := range ranks {
		if i == 0 || host(r) != host(ranks[i-1]) || gpu(r) != gpu(ranks[i-1]) {
			run := hostRun{Name: host(r), host: host(r), gpu: gpu(r)}
			if run.gpu >= 0 {
				g := gs.List[run.gpu]
				dev := g.Device
				if dev == "" {
					dev = analysis.ShortUUID(g.UUID)
				}
				run.Name = strings.TrimPrefix(host(r)+" · GPU "+dev, " · ")
			}
			runs = append(runs, run)
		}
		runs[len(runs)-1].Count++
	}
	return ranks, runs
}

func heatmap(p *profile.Profile, kernels []view.Kernel, top int) heat {
	gs := analysis.GPUsOf(p)
	order, runs := rankOrder(p, gs)
	h := heat{Ranks: len(order), Hosts: gs.Hosts}
	if gs.Known && gs.Shared() {
		h.GPUs = len(gs.List)
	}
	splits := view.SplitKernels(p, kernels)
	d := heatData{Ranks: order, Hosts: runs}
	for i, k := range kernels {
		if i == top || k.Imbalance.Max == 0 {
			break
		}
		im := k.Imbalance
		row := heatRow{Kernel: k.Name, Caller: k.Caller, Mean: view.Duration(im.Mean), Ratio: fmt.Sprintf("%.2f", im.Ratio()),
			Slowest: fmt.Sprint(im.ArgMax), Hot: im.Ratio() >= 1.2}
		if sp, ok := splits[k.Node]; ok && gs.Shared() {
			if g, ok := gs.Of[im.ArgMax]; ok {
				row.SlowestGPU = gs.Label(g)
			}
			row.Split = "balanced across GPUs"
			if sp.Where != "" {
				row.Split = fmt.Sprintf("imbalance %s: %.2f = %.2f within %s × %.2f between", sp.Where, sp.Ratio, sp.Within, gs.Label(sp.SlowestGPU), sp.Between)
			}
		}
		h.Rows = append(h.Rows, row)
		v := heatVal{Mean: math.Round(im.Mean*10) / 10}
		for _, r := range order {
			v.Values = append(v.Values, im.PerRank[r])
		}
		d.Rows = append(d.Rows, v)
	}
	if len(h.Rows) == 0 {
		return h
	}
	b, err := json.Marshal(d) // escapes <, > and &: the data cannot end the script element
	if err != nil {
		return heat{}
	}
	h.Data = template.JS(b)
	return h
}

// hostList names the hosts in a summary line: all of them when few, else
// their count, the first and the last.
func hostList(hosts []string) string {
	if len(hosts) <= 8 {
		return strings.Join(hosts, ", ")
	}
	return fmt.Sprintf("%d hosts: %s, %s, %s … %s", len(hosts), hosts[0], hosts[1], hosts[2], hosts[len(hosts)-1])
}

// provenanceRows are the provenance table's rows: one per rank, or past
// groupRanksAbove ranks one per host, or per GPU of a host when ranks
// share GPUs (its ranks as ranges), with every incomplete rank on a row of
// its own.
func provenanceRows(p *profile.Profile, pv view.Provenance, gs analysis.GPUs) []rankRow {
	device := func(r int32) string {
		i, ok := gs.Of[r]
		if !ok || !gs.Known {
			return ""
		}
		g := gs.List[i]
		var parts []string
		for _, s := range []string{g.Device, analysis.ShortUUID(g.UUID)} {
			if s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\u00a0·\u00a0") // no break inside
	}
	one := func(r int32) rankRow {
		ri := p.Ranks[r]
		row := rankRow{Rank: fmt.Sprint(r), Host: ri.Host, GPU: ri.GPU, Device: device(r), PCS: view.RankSampling(ri), Mode: ri.Mode, Source: ri.Source,
			Sampling: fmt.Sprintf("1/%d blocks, 1/%d launches", ri.BlockP, ri.KernelK),
			Launches: fmt.Sprintf("%d / %d", ri.LaunchesTraced, ri.Launches), Records: view.Count(float64(ri.Records)),
			Dropped: ri.Dropped + ri.HostDropped, Status: "complete"}
		if why, bad := pv.Incomplete[r]; bad {
			row.Status, row.Bad = "incomplete: "+why, true
		}
		return row
	}
	ranks := p.SortedRanks()
	if len(ranks) <= groupRanksAbove {
		rows := make([]rankRow, 0, len(ranks))
		for _, r := range ranks {
			rows = append(rows, one(r))
		}
		return rows
	}
	order, runs := rankOrder(p, gs)
	var rows []rankRow
	i := 0
	for _, run := range runs {
		group := order[i : i+run.Count]
		i += run.Count
		var ok, sampled, timesOnly []int32
		var launches, traced, records, dropped uint64
		gpus, modes, sources, sampling, devices := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, r := range group {
			if _, bad := pv.Incomplete[r]; bad {
				rows = append(rows, one(r))
				continue
			}
			ok = append(ok, r)
			ri := p.Ranks[r]
			launches += ri.Launches
			traced += ri.LaunchesTraced
			records += ri.Records
			dropped += ri.Dropped + ri.HostDropped
			gpus[ri.GPU], modes[ri.Mode], sources[ri.Source], devices[device(r)] = true, true, true, true
			switch view.RankSampling(ri) {
			case "sampled":
				sampled = append(sampled, r)
			case "kernel times only":
				timesOnly = append(timesOnly, r)
			}
			sampling[fmt.Sprintf("1/%d blocks, 1/%d launches", ri.BlockP, ri.KernelK)] = true
		}
		if len(ok) == 0 {
			continue
		}
		pcs := view.SamplingOf(analysis.GPU{Sampled: sampled, TimesOnly: timesOnly})
		rows = append(rows, rankRow{Rank: view.RankSet(ok), Host: run.host, GPU: keys(gpus), Device: keys(devices), PCS: pcs, Mode: keys(modes), Source: keys(sources),
			Sampling: keys(sampling), Launches: fmt.Sprintf("%d / %d", traced, launches), Records: view.Count(float64(records)),
			Dropped: dropped, Status: fmt.Sprintf("complete (%d ranks)", len(ok))})
	}
	return rows
}

func keys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// heatScript draws the heatmap's strips (canvases) from #heat-data: every
// rank in the strip's width, host groups separated, bands when the ranks
// do not fit at heatMinCell pixels each; a tooltip names the rank under
// the pointer. It records the layout on <body> (data-heat-layout,
// data-page-overflow) for tests.
const heatScript = `
(function () {
  var raw = document.getElementById("heat-data");
  if (!raw || !raw.textContent) { return; }
  var H = JSON.parse(raw.textContent);
  var strips = document.querySelectorAll("canvas.heat-strip");
  var axis = document.getElementById("heat-axis");
  var tip = document.getElementById("heat-tip");
  var wrap = tip.parentElement;
  var N = H.ranks.length;
  var hostOf = [];
  H.hosts.forEach(function (h, k) { for (var j = 0; j < h.n; j++) { hostOf.push(k); } });
  var MIN = 3, GAP = 3;
  var L = null;
  function color(v, mean) {
    if (mean <= 0) { return "rgb(248,249,251)"; }
    var q = v / mean, f;
    if (q > 1) {
      f = Math.min((q - 1) / 0.5, 1);
      return "rgb(" + (248 + Math.round(7 * f)) + "," + Math.round(249 - 185 * f) + "," + Math.round(251 - 205 * f) + ")";
    }
    if (q < 1) {
      f = Math.min((1 - q) / 0.5, 1);
      return "rgb(" + Math.round(248 - 70 * f) + "," + Math.round(249 - 44 * f) + ",255)";
    }
    return "rgb(248,249,251)";
  }
  function fmt(ns) {
    if (ns >= 1e9) { return (ns / 1e9).toFixed(2) + " s"; }
    if (ns >= 1e6) { return (ns / 1e6).toFixed(2) + " ms"; }
    if (ns >= 1e3) { return (ns / 1e3).toFixed(1) + " us"; }
    return Math.round(ns) + " ns";
  }
  function layout(width) {
    var bands = N * MIN > width ? Math.ceil(N * MIN / width) : 1;
    // Band labels "first–last" at the left: as wide as the largest.
    var gutter = bands > 1 ? Math.ceil(12 + 6.5 * (2 * String(Math.max.apply(null, H.ranks)).length + 1)) : 0;
    if (bands > 1) { bands = Math.ceil(N * MIN / (width - gutter)); }
    var per = Math.ceil(N / bands);
    bands = Math.ceil(N / per);
    return { bands: bands, per: per, gutter: gutter, cell: (width - gutter) / per, width: width,
      bandH: N <= 16 ? 30 : (bands > 1 ? 12 : 26) };
  }
  function setup(c, h) {
    var dpr = window.devicePixelRatio || 1;
    var w = c.clientWidth;
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
    c.style.height = h + "px";
    var ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }
  function drawStrip(c, row) {
    var h = L.bands * L.bandH + (L.bands - 1) * GAP;
    var ctx = setup(c, h);
    var vals = H.rows[row].v, mean = H.rows[row].mean;
    var hostW = L.cell * N / Math.max(H.hosts.length, 1);
    // Hosts: a line between wide groups, a white gap between narrow ones.
    var sep = H.hosts.length < 2 ? "" : hostW >= 24 ? "line" : hostW >= 6 ? "gap" : "";
    ctx.font = "11px sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (var b = 0; b < L.bands; b++) {
      var y = b * (L.bandH + GAP);
      var lo = b * L.per, hi = Math.min(N, lo + L.per);
      if (L.gutter > 0) {
        ctx.fillStyle = "#667085";
        ctx.textAlign = "right";
        ctx.fillText(H.ranks[lo] + "\u2013" + H.ranks[hi - 1], L.gutter - 6, y + L.bandH / 2);
        ctx.textAlign = "center";
      }
      for (var i = lo; i < hi; i++) {
        var x0 = L.gutter + (i - lo) * L.cell, x1 = x0 + L.cell;
        var gap = L.cell >= 6 ? 1 : 0;
        if (sep === "gap" && i + 1 < hi && hostOf[i + 1] !== hostOf[i]) { gap = 1; }
        ctx.fillStyle = color(vals[i], mean);
        ctx.fillRect(Math.floor(x0), y, Math.max(Math.floor(x1) - Math.floor(x0) - gap, 1), L.bandH);
        if (sep === "line" && i > lo && hostOf[i] !== hostOf[i - 1]) {
          ctx.fillStyle = "#667085";
          ctx.fillRect(Math.floor(x0) - 1, y, 1, L.bandH);
        }
        if (L.cell >= 56) {
          ctx.fillStyle = "#1d2330";
          ctx.fillText(fmt(vals[i]), (x0 + x1) / 2, y + L.bandH / 2);
        }
      }
    }
  }
  function drawAxis() {
    var ctx = setup(axis, 18);
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#344054";
    if (L.bands > 1) {
      ctx.textAlign = "left";
      ctx.fillText(N + " ranks in " + L.bands + " bands of " + L.per + " (first\u2013last rank at the left), " + H.hosts.length + " hosts", 0, 9);
      return;
    }
    ctx.textAlign = "center";
    var oneHost = H.hosts.length === 1, x = 0;
    if (oneHost) {
      for (var i = 0; i < N; i++) {
        var label = L.cell >= 48 ? "rank " + H.ranks[i] : String(H.ranks[i]);
        if (ctx.measureText(label).width + 2 <= L.cell) { ctx.fillText(label, (i + 0.5) * L.cell, 9); }
      }
      return;
    }
    H.hosts.forEach(function (h) {
      var w = h.n * L.cell;
      var label = h.name || "?";
      if (ctx.measureText(label).width + 4 <= w) { ctx.fillText(label, x + w / 2, 9); }
      else if (ctx.measureText(String(H.ranks[Math.round(x / L.cell)])).width + 2 <= w) { ctx.fillText(String(H.ranks[Math.round(x / L.cell)]), x + w / 2, 9); }
      x += w;
    });
  }
  function draw() {
    if (!strips.length) { return; }
    L = layout(strips[0].clientWidth);
    for (var s = 0; s < strips.length; s++) { drawStrip(strips[s], Number(strips[s].getAttribute("data-row"))); }
    drawAxis();
    document.body.setAttribute("data-heat-layout", L.bands + " bands of " + L.per + " ranks, cell " + L.cell.toFixed(1) + "px, strip " + L.width + "px");
    overflow();
  }
  // Whether the heatmap, and the page, are wider than the window.
  function overflow() {
    var de = document.documentElement;
    document.body.setAttribute("data-heat-overflow", String(wrap.scrollWidth > wrap.clientWidth + 1 || wrap.getBoundingClientRect().right > de.clientWidth + 1));
    document.body.setAttribute("data-page-overflow", String(de.scrollWidth > de.clientWidth));
  }
  window.addEventListener("load", overflow);
  function at(c, ev) {
    var r = c.getBoundingClientRect();
    var x = ev.clientX - r.left - L.gutter, y = ev.clientY - r.top;
    var b = Math.floor(y / (L.bandH + GAP));
    var i = b * L.per + Math.floor(x / L.cell);
    if (x < 0 || b < 0 || b >= L.bands || i < b * L.per || i >= Math.min(N, (b + 1) * L.per)) { return -1; }
    return i;
  }
  Array.prototype.forEach.call(strips, function (c) {
    c.addEventListener("mousemove", function (ev) {
      var i = at(c, ev);
      if (i < 0) { tip.hidden = true; return; }
      var row = H.rows[Number(c.getAttribute("data-row"))];
      var v = row.v[i];
      tip.textContent = "rank " + H.ranks[i] + (H.hosts[hostOf[i]].name ? " (" + H.hosts[hostOf[i]].name + ")" : "") + ": " + fmt(v) +
        (row.mean > 0 ? ", " + (v / row.mean).toFixed(2) + "x the mean" : "");
      tip.hidden = false;
      var wr = wrap.getBoundingClientRect();
      var left = ev.clientX - wr.left + 12;
      if (left > wr.width - 300) { left = Math.max(0, left - 320); }
      tip.style.left = left + "px";
      tip.style.top = (ev.clientY - wr.top + 14) + "px";
    });
    c.addEventListener("mouseleave", function () { tip.hidden = true; });
  });
  window.addEventListener("resize", draw);
  draw();
})();
`
