package jsonexport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

func schema(t testing.TB) *Schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "json-schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func encode(t testing.TB, p *profile.Profile) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, p, exporttest.Advice(p)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDocumentMatchesSchema(t *testing.T) {
	s := schema(t)
	p := exporttest.Profile(8, 2, exporttest.Shape)
	doc := encode(t, p)
	if err := s.Validate(doc); err != nil {
		t.Fatal(err)
	}
	var d Document
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if d.Format != Format || d.Version != Version || d.Job != exporttest.Job || !d.Synthetic || len(d.Ranks) != 8 {
		t.Errorf("header %s v%d job %s synthetic %v ranks %d", d.Format, d.Version, d.Job, d.Synthetic, len(d.Ranks))
	}
	if len(d.Nodes) != len(p.Nodes) || d.Nodes[0].Parent != nil || d.Nodes[0].Kind != "root" {
		t.Fatalf("%d nodes for %d; first %+v", len(d.Nodes), len(p.Nodes), d.Nodes[0])
	}
	var total uint64
	for _, n := range p.Nodes {
		total += n.Metrics.Get(profile.GPUTime)
	}
	if got := d.Nodes[0].Inclusive["gpu.time_ns"]; got != total {
		t.Errorf("root inclusive gpu.time_ns %d, want %d", got, total)
	}
	// The slow rank shows in the stencil kernel's imbalance.
	found := false
	for _, k := range d.Kernels {
		if strings.HasPrefix(k.Name, "stencil_2d") && strings.Contains(k.Caller, "solver_step") {
			found = true
			if k.Imbalance.ArgMax != 3 || k.Imbalance.Ratio < 2 || len(k.Imbalance.Ranks) != 8 {
				t.Errorf("stencil imbalance %+v", k.Imbalance)
			}
			if k.TemporalFraction <= 0 || k.TemporalFraction > 1 {
				t.Errorf("stencil temporal fraction %v", k.TemporalFraction)
			}
		}
	}
	if !found {
		t.Error("no stencil_2d kernel row")
	}
	if len(d.Temporal) != len(p.Temporal) || len(d.Spatial) != len(p.Spatial) || len(d.PCs) != len(p.PCs) || len(d.Objects) != len(p.Objects) {
		t.Errorf("tables: %d/%d temporal, %d/%d spatial, %d/%d pcs, %d/%d objects", len(d.Temporal), len(p.Temporal),
			len(d.Spatial), len(p.Spatial), len(d.PCs), len(p.PCs), len(d.Objects), len(p.Objects))
	}
	if d.Temporal[0].Redundant < d.Temporal[len(d.Temporal)-1].Redundant {
		t.Error("temporal pairs not by descending redundancy")
	}
	if len(d.Advice) != 4 || d.Advice[0].Hotspots[0].PC == nil || d.Advice[1].Hotspots[0].Object == "" {
		t.Errorf("advice %+v", d.Advice)
	}
	var zero *Sketch
	for _, pc := range d.PCs {
		if pc.Values != zero && pc.Values.Kind == "float" && len(pc.Values.Top) > 0 && pc.Values.Top[0].Value == "0" {
			return // the stencil's dominant 0.0 loads
		}
	}
	t.Error("no PC with 0.0 as its heaviest value")
}

func TestEmptyProfileMatchesSchema(t *testing.T) {
	doc := encode(t, profile.New("empty"))
	if err := schema(t).Validate(doc); err != nil {
		t.Fatal(err)
	}
}

// The validator catches what breaks the schema.
func TestValidatorRejects(t *testing.T) {
	s := schema(t)
	good := encode(t, exporttest.Profile(2, 1, exporttest.Shape))
	var doc map[string]any
	if err := json.Unmarshal(good, &doc); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		change func(d map[string]any)
		want   string
	}{
		{"missing", func(d map[string]any) { delete(d, "nodes") }, `missing required "nodes"`},
		{"version", func(d map[string]any) { d["version"] = 2 }, "/version"},
		{"extra", func(d map[string]any) { d["colour"] = "red" }, `unexpected property "colour"`},
		{"type", func(d map[string]any) { d["synthetic"] = "yes" }, "/synthetic: string, want boolean"},
		{"id", func(d map[string]any) { d["nodes"].([]any)[1].(map[string]any)["id"] = "xyz" }, "/nodes/1/id"},
		{"negative", func(d map[string]any) {
			d["nodes"].([]any)[0].(map[string]any)["inclusive"].(map[string]any)["gpu.time_ns"] = -1
		}, "below the minimum"},
		{"enum", func(d map[string]any) { d["nodes"].([]any)[0].(map[string]any)["kind"] = "frame" }, "is not one of"},
		{"integer", func(d map[string]any) { d["items"] = 1.5 }, "/items: number, want integer"},
	}
	for _, c := range cases {
		var d map[string]any
		_ = json.Unmarshal(good, &d)
		c.change(d)
		b, _ := json.Marshal(d)
		err := s.Validate(b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if err := s.Validate([]byte(`{"format": 1} {}`)); err == nil {
		t.Error("trailing data accepted")
	}
	if _, err := ParseSchema([]byte(`{"oneOf": []}`)); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("unsupported keyword: %v", err)
	}
	if _, err := ParseSchema([]byte(`{"$ref": "#/$defs/none"}`)); err == nil {
		t.Error("dangling $ref accepted")
	}
}

func FuzzValidate(f *testing.F) {
	s := schema(f)
	f.Add(encode(f, exporttest.Profile(1, 1, exporttest.Shape)))
	f.Add([]byte(`{"format":"gpuprof-profile","version":1}`))
	f.Add([]byte(`[1, "a", null, {"x": [true]}]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		_ = s.Validate(doc)
		// The same bytes as a schema: parsing and using it must not panic.
		if sch, err := ParseSchema(doc); err == nil {
			_ = sch.Validate(doc)
		}
	})
}

// The JAX program's profile: DelayKernel is waiting, the autotuner's
// matrix product marked, the time divided, the full host path kept.
func TestFrameworkDocument(t *testing.T) {
	p, mods := exporttest.Framework()
	adv, err := analysis.Advise(p, mods, analysis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, p, adv); err != nil {
		t.Fatal(err)
	}
	if err := schema(t).Validate(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	var d Document
	if err := json.Unmarshal(buf.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	g := d.GPUTime
	if g.Total != 1_609_000_000 || g.Waiting != 1_606_400_000 || g.Autotuning != 1_500_000 || g.Compute != 1_100_000 || g.Compile != 0 {
		t.Errorf("gpu_time %+v", g)
	}
	classes := map[string]int{}
	for _, k := range d.Kernels {
		switch {
		case k.Waiting:
			classes["waiting"]++
			if !strings.HasPrefix(k.Name, "stream_executor::gpu::(anonymous namespace)::DelayKernel(") || strings.Count(k.Caller, " > ") != 5 ||
				!strings.Contains(k.Caller, "std::_Function_handler<…>::_M_invoke") {
				t.Errorf("waiting kernel %s from %s", k.Name, k.Caller)
			}
		case k.Phase == "autotuning":
			classes["autotuning"]++
		case k.Phase == "":
			classes["compute"]++
			if !strings.Contains(k.Caller, "python3.12+0x657a05 > _PyEval_EvalFrameDefault > <module> (matmul.py:18)") {
				t.Errorf("program's kernel caller %q", k.Caller)
			}
		}
	}
	if classes["waiting"] != 1 || classes["autotuning"] != 1 || classes["compute"] != 1 {
		t.Errorf("kernel classes %v", classes)
	}
	notes, phased := 0, 0
	for _, a := range d.Advice {
		if a.Category == analysis.CatWaiting {
			notes++
		}
		if a.Phase == analysis.PhaseAutotuning {
			phased++
		}
	}
	if notes != 1 || phased == 0 || d.Advice[0].Phase != "" {
		t.Errorf("%d notes, %d autotuning advice, first %+v", notes, phased, d.Advice[0])
	}
}

// Four ranks on two GPUs, one PC-sampled per GPU, heavy ranks 1 and 2:
// the document carries each rank's device and PC-sampling state, the GPUs
// with their ranks, the stencil kernel's imbalance split by GPU, and the
// ranks whose samples advice built from PC samples rests on; it matches
// the schema.
func TestMultiGPUDocument(t *testing.T) {
	p := exporttest.MultiGPU(4, 1, 2, 1, 2)
	adv := append(exporttest.Advice(p), analysis.Advice{Kind: "stall", Category: analysis.CatStall, SampledRanks: []int32{0, 1}})
	var buf bytes.Buffer
	if err := Write(&buf, p, adv); err != nil {
		t.Fatal(err)
	}
	if err := schema(t).Validate(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	var d Document
	if err := json.Unmarshal(buf.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if r := d.Ranks[3]; r.Device != "1" || r.PCSampling != "kernel times only: another process PC-samples "+exporttest.GPUUUID(0, 1) {
		t.Errorf("rank 3: device %q, PC sampling %q", r.Device, r.PCSampling)
	}
	if r := d.Ranks[1]; r.Device != "1" || r.PCSampling != "sampled" {
		t.Errorf("rank 1: device %q, PC sampling %q", r.Device, r.PCSampling)
	}
	if len(d.GPUs) != 2 || d.GPUs[1].UUID != exporttest.GPUUUID(0, 1) || fmt.Sprint(d.GPUs[1].Ranks, d.GPUs[1].Sampled, d.GPUs[1].TimesOnly) != "[1 3] [1] [3]" {
		t.Errorf("gpus %+v", d.GPUs)
	}
	var split *GPUSplit
	for _, k := range d.Kernels {
		if strings.HasPrefix(k.Name, "stencil_2d") && strings.Contains(k.Caller, "solver_step") {
			split = k.Imbalance.ByGPU
		}
	}
	if split == nil || split.Where != "within GPUs" || split.Slowest != 2 || split.SlowestGPU != 0 || len(split.GPUs) != 2 ||
		fmt.Sprint(split.GPUs[0].Heavy, split.GPUs[1].Heavy) != "[2] [1]" {
		t.Errorf("stencil split %+v", split)
	}
	if last := d.Advice[len(d.Advice)-1]; fmt.Sprint(last.SampledRanks) != "[0 1]" {
		t.Errorf("advice sampled ranks %v", last.SampledRanks)
	}
}
