package html

import "html/template"

var page = template.Must(template.New("report").Funcs(template.FuncMap{"mul100": func(f float64) float64 { return 100 * f }}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>gpuprof report: {{.Job}}</title>
<style>{{.CSS}}</style>
</head>
<body>
<header>
<h1>gpuprof report <span class="job">{{.Job}}</span></h1>
<nav><a href="#advice">Advice</a><a href="#flame">Flame graph</a><a href="#heatmap">Rank heatmap</a><a href="#redundancy">Redundancy</a><a href="#kernels">Kernels</a>{{if .Diff}}<a href="#diff">Before/after</a>{{end}}<a href="#provenance">Provenance</a></nav>
</header>
{{if .Prov.Interrupted}}<div id="interrupted-banner" class="banner">INTERRUPTED by {{.Prov.Interrupted}}: the job was stopped before its end; this report holds what was merged by then.</div>{{end}}
{{with .Prov.NothingLine}}<div id="nothing-banner" class="banner">{{.}}</div>{{end}}
{{if .Synthetic}}<div id="synthetic-banner" class="banner">SYNTHETIC DATA: some merged items were generated, not measured on a GPU. Do not draw performance conclusions from this report.</div>{{end}}
<div id="js-errors" class="banner" hidden></div>
<main>
<section id="summary" class="summary">
<table class="kv">{{range .Summary}}<tr><th>{{.K}}</th><td>{{.V}}</td></tr>{{end}}
<tr><th>GPU time</th><td>{{.TotalTime}} in {{.NumKernels}} kernel contexts{{if .TimeSplit}}<div class="muted small">{{.TimeSplit}}</div>{{end}}</td></tr></table>
</section>

<section id="advice">
<h2>Advice, by estimated speedup</h2>
{{if .AdviceNote}}<p class="muted">No advice: {{.AdviceNote}}.</p>{{else if not .Advice}}<p class="muted">No advice: the analysis found nothing above its thresholds.</p>{{end}}
<ol class="advice">
{{range .Advice}}{{if not .Folded}}{{template "card" .}}{{end}}{{end}}</ol>
{{if .AdviceMore}}<details><summary>{{.AdviceMore}} more findings</summary><ol class="advice">
{{range .Advice}}{{if .Folded}}{{template "card" .}}{{end}}{{end}}</ol></details>{{end}}
{{if .Waiting}}<h3 id="waiting">Waiting and communication kernels: time spent polling the host or a peer, not compute (no advice)</h3>
<ol class="advice">{{range .Waiting}}{{template "card" .}}{{end}}</ol>{{end}}
</section>

<section id="flame">
<h2>Flame graph of the whole job</h2>
<div class="fg-controls">
<label>Width: <select id="fg-metric"></select></label>
<button id="fg-reset" type="button">Reset zoom</button>
<span id="fg-crumbs" class="crumbs"></span>
</div>
<p class="muted">Host frames (orange) call kernels (red); inside a kernel: GPU functions (blue), inlined functions (purple), loops (teal), lines (green), instructions (grey). Click a frame to zoom into it; hover for values.</p>
<div id="fg-wrap"><svg id="fg" xmlns="http://www.w3.org/2000/svg" width="100%" height="40"></svg><div id="fg-tip" class="tip" hidden></div></div>
<script type="application/json" id="fg-data">{{.Flame}}</script>
</section>

<section id="heatmap">
<h2>GPU time per rank and kernel context</h2>
{{if .Heat.Rows}}
<p class="muted">Each row is a kernel launch context and each cell a rank: {{.Heat.Ranks}} ranks on {{.Heat.Hosts}} hosts{{if .Heat.GPUs}} and {{.Heat.GPUs}} GPUs, grouped by host and GPU (a line or a gap between GPUs){{else}}, grouped by host (a line or a gap between hosts){{end}}. Red cells are ranks slower than the row's mean (full red at 1.5x the mean), blue cells faster (full blue at 0.5x); max/mean of 1.2 and above is flagged. Cells shrink with the number of ranks, then wrap into bands of ranks; hover a cell for its rank, host and time.</p>
<div class="heat-wrap"><table class="heat">
<colgroup><col class="c-name"><col><col class="c-num"><col class="c-num"><col class="c-slow"></colgroup>
<thead><tr><th>kernel</th><th class="strip"><canvas id="heat-axis" class="heat-axis"></canvas></th><th class="r">mean</th><th class="r">max/mean</th><th class="r">slowest</th></tr></thead>
<tbody>{{range $i, $r := .Heat.Rows}}<tr{{if .Hot}} class="hot"{{end}}><td class="name" title="{{.Caller}}">{{.Kernel}}<div class="caller">{{.Caller}}</div>{{with .Split}}<div class="caller split">{{.}}</div>{{end}}</td><td class="strip"><canvas class="heat-strip" data-row="{{$i}}"></canvas></td><td class="r">{{.Mean}}</td><td class="r ratio">{{.Ratio}}</td><td class="r"{{with .SlowestGPU}} title="{{.}}"{{end}}>rank {{.Slowest}}{{with .SlowestGPU}}<div class="caller">{{.}}</div>{{end}}</td></tr>{{end}}</tbody>
</table><div id="heat-tip" class="tip" hidden></div></div>
<script type="application/json" id="heat-data">{{.Heat.Data}}</script>
{{else}}<p class="muted">No per-rank kernel time in this profile.</p>{{end}}
</section>

<section id="redundancy">
<h2>Value redundancy (GVProf)</h2>
<p class="muted">Temporal pairs &lt;PC_old, PC_new&gt;: accesses at PC_new that read or write the value PC_old last left there (fraction = redundant / accesses of PC_new, eq. 1). Data objects: accesses that repeat values already in the object (eq. 2). Histograms show the heavy-hitter values the sketches kept.</p>
<h3>Top temporal pairs</h3>
{{if .Pairs}}<table class="grid"><thead><tr><th>#</th><th>kernel</th><th>access</th><th>PC_old → PC_new</th><th class="r">redundant</th><th class="r">of accesses</th><th class="r">fraction</th><th>values (distinct, range)</th></tr></thead><tbody>
{{range .Pairs}}<tr><td>{{.N}}</td><td>{{.Kernel}}</td><td>{{.Access}}</td><td class="mono">{{.Old}} → {{.New}}</td><td class="r">{{.Redundant}}</td><td class="r">{{.Accesses}}</td><td class="r">{{.Fraction}}</td>
<td>{{.Hist}}{{if .Distinct}}<div class="muted small">{{.Distinct}} distinct, {{.Range}}</div>{{end}}</td></tr>{{end}}
</tbody></table>{{else}}<p class="muted">No temporal redundancy measured.</p>{{end}}
<h3>Top data objects</h3>
{{if .Objects}}<table class="grid"><thead><tr><th>#</th><th>kernel</th><th>object (allocation site)</th><th>access</th><th class="r">redundant</th><th class="r">accesses</th><th class="r">fraction</th><th>values (distinct, range)</th></tr></thead><tbody>
{{range .Objects}}<tr><td>{{.N}}</td><td>{{.Kernel}}</td><td>{{.Object}}{{range .Uses}}<div class="use">{{.}}</div>{{end}}</td><td>{{.Access}}</td><td class="r">{{.Redundant}}</td><td class="r">{{.Accesses}}</td><td class="r">{{.Fraction}}</td>
<td>{{.Hist}}{{if .Distinct}}<div class="muted small">{{.Distinct}} distinct, {{.Range}}</div>{{end}}</td></tr>{{end}}
</tbody></table>{{else}}<p class="muted">No data-object redundancy measured.</p>{{end}}
</section>

<section id="kernels">
<h2>Top kernels by GPU time</h2>
{{if .Kernels}}<table class="grid"><thead><tr><th>#</th><th>kernel</th><th class="r">time</th><th>share</th><th class="r">launches</th><th class="r">samples</th><th class="r">loads</th><th class="r">stores</th><th class="r">temporal red.</th><th class="r">spatial red.</th><th>called from</th></tr></thead><tbody>
{{range .Kernels}}<tr><td>{{.N}}</td><td title="{{.Full}}">{{.Name}}{{if .Class}} <span class="badge">{{.Class}}</span>{{end}}</td><td class="r">{{.Time}}</td><td><span class="bar wide"><span style="width:{{printf "%.0f" (mul100 .ShareBar)}}%"></span></span> {{.Share}}</td><td class="r">{{.Launches}}</td><td class="r">{{.Samples}}</td><td class="r">{{.Loads}}</td><td class="r">{{.Stores}}</td><td class="r">{{.Temporal}}</td><td class="r">{{.Spatial}}</td><td class="caller">{{.Caller}}</td></tr>{{end}}
</tbody></table>{{else}}<p class="muted">No kernels in this profile.</p>{{end}}
</section>

{{with .Diff}}<section id="diff">
<h2>Before/after: {{.Before}} → {{.After}}</h2>
<h3>Program totals</h3>
<table class="grid diff"><thead><tr><th>metric</th><th class="r">before</th><th class="r">after</th><th class="r">change</th><th class="r">relative</th></tr></thead><tbody>
{{range .Totals}}<tr class="{{if .Better}}better{{else if .Worse}}worse{{end}}"><td>{{.Metric}}</td><td class="r">{{.Before}}</td><td class="r">{{.After}}</td><td class="r">{{.Change}}</td><td class="r">{{.Rel}}</td></tr>{{end}}
</tbody></table>
<h3>Per kernel context</h3>
<table class="grid diff"><thead><tr><th>kernel</th><th>status</th><th>metric</th><th class="r">before</th><th class="r">after</th><th class="r">change</th><th class="r">relative</th><th>called from</th></tr></thead><tbody>
{{range .Rows}}<tr class="{{if .First}}first {{end}}{{if .Better}}better{{else if .Worse}}worse{{end}}"><td>{{.Kernel}}</td><td>{{.Status}}</td><td>{{.Metric}}</td><td class="r">{{.Before}}</td><td class="r">{{.After}}</td><td class="r">{{.Change}}</td><td class="r">{{.Rel}}</td><td class="caller">{{.Caller}}</td></tr>{{end}}
</tbody></table>{{if .More}}<p class="muted">{{.More}} more kernel contexts in the text diff.</p>{{end}}
</section>{{end}}

<section id="provenance">
<h2>Provenance</h2>
{{if .GPUs}}<h3>Ranks by host and GPU</h3>
<div class="{{if gt (len .GPUs) 32}}prov-scroll{{end}}"><table class="grid" id="gpus"><thead><tr><th>host</th><th>GPU</th><th>UUID</th><th>name</th><th>ranks</th><th class="r">count</th>{{if $.HasPCS}}<th>PC sampling</th>{{end}}</tr></thead><tbody>
{{range .GPUs}}<tr><td>{{.Host}}</td><td>{{.Device}}</td><td class="mono">{{.UUID}}</td><td>{{.Name}}</td><td>{{.Ranks}}</td><td class="r">{{.NRanks}}</td>{{if $.HasPCS}}<td>{{.Sampling}}</td>{{end}}</tr>{{end}}
</tbody></table></div>
{{if $.HasPCS}}<p class="muted small">CUPTI PC-samples one process per GPU: the first rank of the job to create a context on a GPU samples it, the others give kernel times only (by policy, not a failure).</p>{{end}}
<h3>Ranks</h3>{{end}}
<div class="{{if gt (len .Ranks) 32}}prov-scroll{{end}}"><table class="grid"><thead><tr><th>rank</th><th>host</th><th>GPU</th>{{if .GPUs}}<th>device</th>{{end}}{{if .HasPCS}}<th>PC sampling</th>{{end}}<th>mode</th><th>source</th><th>sampling</th><th class="r">launches traced</th><th class="r">records</th><th class="r">dropped</th><th>status</th></tr></thead><tbody>
{{range .Ranks}}<tr{{if .Bad}} class="worse"{{end}}><td>{{.Rank}}</td><td>{{.Host}}</td><td>{{.GPU}}</td>{{if $.GPUs}}<td class="mono">{{.Device}}</td>{{end}}{{if $.HasPCS}}<td>{{.PCS}}</td>{{end}}<td>{{.Mode}}</td><td>{{.Source}}</td><td>{{.Sampling}}</td><td class="r">{{.Launches}}</td><td class="r">{{.Records}}</td><td class="r{{if .Dropped}} warn{{end}}">{{.Dropped}}</td><td>{{.Status}}</td></tr>{{end}}
</tbody></table></div>
<h3>Metrics</h3>
<table class="kv">{{range .Metrics}}<tr><th class="mono">{{.K}}</th><td>{{.V}}</td></tr>{{end}}</table>
</section>
</main>
<footer>Written by gpuprof. Self-contained: no network access.</footer>
<script>{{.Script}}</script>
</body>
</html>
{{define "card"}}<li class="card cat-{{.Category}}">
<div class="adv-head"><span class="num">{{.N}}</span><span class="badge">{{.Category}}</span><strong>{{.Kind}}</strong>{{if .Phase}} <span class="badge">in the framework's {{.Phase}}</span>{{end}}
<span class="metric">est. speedup <b>{{.Speedup}}</b><span class="bar"><span style="width:{{printf "%.0f" (mul100 .SpeedupBar)}}%"></span></span></span>
<span class="metric">importance <b>{{.Importance}}</b><span class="bar imp"><span style="width:{{printf "%.0f" (mul100 .ImportanceBar)}}%"></span></span></span>
<span class="ranks">{{.Ranks}}</span></div>
{{range .Where}}<div class="where">{{.}}</div>{{end}}
<p class="hint">{{.Hint}}</p>
{{if .Evidence}}<p class="evidence">Evidence: {{.Evidence}}</p>{{end}}
{{if .SpeedupNA}}<p class="evidence">Speedup n/a: {{.SpeedupNA}}</p>{{end}}
</li>
{{end}}`))

const css = `
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#fff; --accent:#b42318; --blue:#2e6fd8; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color:var(--fg); background:#f6f7f9; }
header { background:#101828; color:#fff; padding:10px 24px; display:flex; align-items:baseline; gap:24px; flex-wrap:wrap; position:sticky; top:0; z-index:5; }
header h1 { margin:0; font-size:18px; font-weight:600; }
header .job { color:#fdb022; margin-left:6px; }
nav a { color:#d0d5dd; margin-right:14px; text-decoration:none; font-size:13px; }
nav a:hover { color:#fff; }
main { padding:8px 24px 24px; max-width:1500px; }
section { background:var(--bg); border:1px solid var(--line); border-radius:8px; padding:12px 16px; margin:12px 0; }
h2 { font-size:16px; margin:2px 0 8px; }
h3 { font-size:14px; margin:12px 0 6px; }
.banner { background:#fef0c7; border:2px solid #dc6803; color:#7a2e0e; font-weight:700; padding:10px 24px; font-size:15px; }
#js-errors { background:#fee4e2; border-color:#d92d20; color:#7a271a; }
.muted { color:var(--muted); }
.small { font-size:12px; }
.mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:12.5px; }
table { border-collapse:collapse; }
table.kv th { text-align:left; padding:2px 14px 2px 0; color:var(--muted); font-weight:500; vertical-align:top; white-space:nowrap; }
table.kv td { padding:2px 0; }
.summary table.kv td { font-weight:500; }
table.grid { width:100%; }
table.grid th { text-align:left; font-weight:600; border-bottom:2px solid var(--line); padding:4px 8px; white-space:nowrap; font-size:13px; }
table.grid td { border-bottom:1px solid var(--line); padding:4px 8px; vertical-align:middle; }
.r { text-align:right; white-space:nowrap; }
.caller { color:var(--muted); font-size:12px; }
.warn { color:var(--accent); font-weight:600; }
ol.advice { list-style:none; padding:0; margin:0; }
details summary { cursor:pointer; color:var(--blue); margin:6px 0; }
.card { border:1px solid var(--line); border-left:5px solid var(--blue); border-radius:6px; padding:8px 12px; margin:8px 0; }
.card.cat-redundancy { border-left-color:#7f56d9; } .card.cat-imbalance { border-left-color:#dc6803; }
.card.cat-stall { border-left-color:#d92d20; } .card.cat-static { border-left-color:#039855; } .card.cat-divergence { border-left-color:#0086c9; }
.adv-head { display:flex; align-items:center; gap:12px; flex-wrap:wrap; }
.adv-head .num { font-weight:700; color:var(--muted); }
.badge { background:#eef4ff; color:#3538cd; border-radius:10px; padding:0 8px; font-size:12px; }
.metric { display:inline-flex; align-items:center; gap:6px; color:var(--muted); font-size:13px; }
.metric b { color:var(--fg); }
.bar { display:inline-block; width:70px; height:8px; background:#eaecf0; border-radius:4px; overflow:hidden; vertical-align:middle; }
.bar > span { display:block; height:100%; background:#12b76a; }
.bar.imp > span { background:#2e90fa; }
.bar.wide { width:90px; } .bar.wide > span { background:#f79009; }
.ranks { color:var(--muted); font-size:12px; }
.where { font-family: ui-monospace, Menlo, Consolas, monospace; font-size:12.5px; color:#344054; margin-top:4px; }
.hint { margin:4px 0 2px; }
.evidence { margin:0; color:var(--muted); font-size:12.5px; }
.fg-controls { display:flex; gap:14px; align-items:center; margin-bottom:4px; flex-wrap:wrap; }
.crumbs { font-size:12px; color:var(--muted); }
.crumbs a { color:var(--blue); cursor:pointer; }
#fg-wrap { position:relative; }
#fg { display:block; font-family: ui-monospace, Menlo, Consolas, monospace; font-size:11px; }
#fg g.fg-node { cursor:pointer; }
#fg rect { stroke:#fff; stroke-width:0.5; }
#fg text { fill:#111; pointer-events:none; }
#fg g.fg-node:hover rect { stroke:#111; stroke-width:1; }
.tip { position:absolute; pointer-events:none; background:#101828; color:#fff; padding:6px 8px; border-radius:4px; font-size:12px; max-width:560px; z-index:10; }
.heat-wrap { position:relative; }
table.heat { width:100%; table-layout:fixed; border-collapse:separate; border-spacing:0 3px; }
table.heat col.c-name { width:230px; } table.heat col.c-num { width:76px; } table.heat col.c-slow { width:84px; }
table.heat th { font-size:12px; font-weight:600; padding:2px 6px; white-space:nowrap; }
table.heat th:first-child { text-align:left; }
td .use { color:var(--muted); font-size:12px; }
.prov-scroll { max-height:440px; overflow-y:auto; border:1px solid var(--line); border-radius:4px; }
.prov-scroll thead th { position:sticky; top:0; background:var(--bg); }
table.heat td { padding:0 6px; vertical-align:top; }
table.heat td.name { padding:2px 8px 2px 0; font-weight:500; overflow-wrap:anywhere; }
table.heat td.name .caller { font-weight:400; }
table.heat th.strip, table.heat td.strip { padding:0 4px; }
canvas.heat-strip, canvas.heat-axis { display:block; width:100%; }
canvas.heat-strip { cursor:crosshair; }
table.heat tr.hot td.ratio { color:var(--accent); font-weight:700; }
svg.hist { display:block; }
svg.hist rect.hb { fill:#7f56d9; } svg.hist rect.hb.other { fill:#d0d5dd; }
svg.hist text { font-size:10px; text-anchor:middle; fill:#344054; font-family: ui-monospace, Menlo, monospace; }
table.diff tr.better td:nth-child(n+4) { color:#027a48; } table.diff tr.worse td:nth-child(n+4) { color:var(--accent); }
table.diff tr.first td { border-top:2px solid var(--line); }
tr.worse td { background:#fffbfa; }
footer { color:var(--muted); font-size:12px; padding:0 24px 24px; }
`

const script = `
"use strict";
(function () {
  var errs = document.getElementById("js-errors");
  window.addEventListener("error", function (e) {
    errs.hidden = false;
    errs.textContent = "Report script error: " + e.message;
  });
  var raw = document.getElementById("fg-data");
  if (!raw) { return; }
  var D = JSON.parse(raw.textContent);
  var svg = document.getElementById("fg");
  var tip = document.getElementById("fg-tip");
  var sel = document.getElementById("fg-metric");
  var crumbs = document.getElementById("fg-crumbs");
  var NS = "http://www.w3.org/2000/svg";
  var N = D.nodes.length;
  var kids = [];
  var i;
  for (i = 0; i < N; i++) { kids.push([]); }
  for (i = 1; i < N; i++) { kids[D.nodes[i][0]].push(i); }
  D.metrics.forEach(function (m, k) {
    var o = document.createElement("option");
    o.value = String(k);
    o.textContent = m.label;
    sel.appendChild(o);
  });
  var state = { root: 0, metric: 0 };
  var ROW = 18;
  var colors = { root: "#98a2b3", host: null, kernel: "#e04f39", gpufunc: "#5b8def", inlined: "#a582e8",
    loop: "#3cb8a4", line: "#86c77a", inst: "#c2c7d0" };
  function hash(s) { var h = 0; for (var j = 0; j < s.length; j++) { h = (h * 31 + s.charCodeAt(j)) | 0; } return Math.abs(h); }
  function color(n) {
    var k = n[1];
    if (k === "host") { var h = hash(n[2]); return "hsl(" + (22 + h % 26) + ",85%," + (58 + h % 12) + "%)"; }
    return colors[k] || "#ccc";
  }
  function val(idx) { return D.nodes[idx][4 + state.metric] || 0; }
  function fmt(v) {
    var m = D.metrics[state.metric];
    if (m && m.unit === "ns") {
      if (v >= 1e9) { return (v / 1e9).toFixed(2) + " s"; }
      if (v >= 1e6) { return (v / 1e6).toFixed(2) + " ms"; }
      if (v >= 1e3) { return (v / 1e3).toFixed(1) + " us"; }
      return v.toFixed(0) + " ns";
    }
    if (v >= 1e6) { return (v / 1e6).toFixed(2) + "M"; }
    if (v >= 1e4) { return (v / 1e3).toFixed(1) + "k"; }
    return String(Math.round(v));
  }
  function ancestors(idx) {
    var out = [];
    while (idx >= 0) { out.unshift(idx); idx = D.nodes[idx][0]; }
    return out;
  }
  function render() {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var width = svg.clientWidth || 1200;
    var total = val(state.root);
    var all = val(0);
    var depthMax = 0;
    var path = ancestors(state.root);
    // The zoomed frame's ancestors stay as full-width rows above it.
    function box(idx, x, w, depth) {
      var n = D.nodes[idx];
      var g = document.createElementNS(NS, "g");
      g.setAttribute("class", "fg-node");
      g.setAttribute("data-kind", n[1]);
      var r = document.createElementNS(NS, "rect");
      r.setAttribute("x", x.toFixed(2));
      r.setAttribute("y", String(depth * ROW));
      r.setAttribute("width", Math.max(w - 0.5, 0.5).toFixed(2));
      r.setAttribute("height", String(ROW - 1));
      r.setAttribute("fill", color(n));
      g.appendChild(r);
      if (w > 36) {
        var t = document.createElementNS(NS, "text");
        t.setAttribute("x", (x + 3).toFixed(2));
        t.setAttribute("y", String(depth * ROW + 12.5));
        var chars = Math.floor((w - 6) / 6.6);
        var label = n[2];
        t.textContent = label.length > chars ? label.slice(0, Math.max(chars - 1, 1)) + "\u2026" : label;
        g.appendChild(t);
      }
      g.addEventListener("click", function () { zoom(idx); });
      g.addEventListener("mousemove", function (ev) {
        var v = val(idx);
        tip.hidden = false;
        var lines = [n[3], fmt(v) + " (" + (all > 0 ? (100 * v / all).toFixed(1) : "0") + "% of all" +
          (state.root !== 0 && total > 0 ? ", " + (100 * v / total).toFixed(1) + "% of zoomed frame" : "") + ")"];
        tip.textContent = n[2] + " [" + n[1] + "]";
        lines.forEach(function (l) { var d = document.createElement("div"); d.textContent = l; tip.appendChild(d); });
        var rect = svg.getBoundingClientRect();
        var left = ev.clientX - rect.left + 12;
        if (left > width - 360) { left = Math.max(0, left - 380); }
        tip.style.left = left + "px";
        tip.style.top = (ev.clientY - rect.top + 14) + "px";
      });
      g.addEventListener("mouseleave", function () { tip.hidden = true; });
      svg.appendChild(g);
      if (depth > depthMax) { depthMax = depth; }
    }
    var d;
    for (d = 0; d < path.length - 1; d++) { box(path[d], 0, width, d); }
    function walk(idx, x, w, depth) {
      box(idx, x, w, depth);
      var v = val(idx);
      if (v <= 0) { return; }
      var cx = x;
      kids[idx].forEach(function (c) {
        var cw = w * val(c) / v;
        if (cw >= 0.3) { walk(c, cx, cw, depth + 1); }
        cx += cw;
      });
    }
    if (total > 0) { walk(state.root, 0, width, path.length - 1); }
    else { box(state.root, 0, width, path.length - 1); }
    svg.setAttribute("height", String((depthMax + 1) * ROW + 2));
    crumbs.textContent = "";
    path.forEach(function (idx, k) {
      if (k > 0) { crumbs.appendChild(document.createTextNode(" \u203a ")); }
      var a = document.createElement("a");
      a.textContent = D.nodes[idx][2];
      a.addEventListener("click", function () { zoom(idx); });
      crumbs.appendChild(a);
    });
    if (D.pruned > 0) {
      crumbs.appendChild(document.createTextNode("  (" + D.pruned + " tiny contexts left out)"));
    }
    document.body.setAttribute("data-flame-frames", String(svg.childNodes.length));
  }
  function zoom(idx) { state.root = idx; render(); }
  sel.addEventListener("change", function () { state.metric = Number(sel.value); render(); });
  document.getElementById("fg-reset").addEventListener("click", function () { zoom(0); });
  window.addEventListener("resize", render);
  render();
  document.body.setAttribute("data-rendered", "true");
})();
`
