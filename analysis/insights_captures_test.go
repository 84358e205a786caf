package analysis_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/symname"
)

// insightSpecs are the value-redundancy programs' intended insights
// (testdata/cuda/README.md): the kind, a kernel of the bad twin, a marker
// of the source line, and the loop (file:line of its header, "" when the
// access is in no loop).
var insightSpecs = []struct {
	prog, kind, kernel, marker, loop string
	object                           bool // a data object (global allocation) is named
}{
	{"single_value", analysis.KindConstant, "scale_by_weights", "single-value load", "", true},
	{"single_value", analysis.KindConstant, "fill_weights", "single-value store", "", true},
	{"dominant_load", analysis.KindConditional, "sparse_mul", "a[i] is 0 for 95%", "", true},
	{"loop_reload", analysis.KindScalarRepl, "accumulate_reload", "reloads s[0]", "loop_reload.cu:11", false},
	{"wide_type", analysis.KindNarrowType, "classify<long long>", "4 distinct values", "", true},
	{"wide_type", analysis.KindNarrowType, "apply_class_weight<long long>", "table[label[i]]", "", true},
	{"reload_compute", analysis.KindScalarRepl, "evolve_reload", "reloaded every iteration", "reload_compute.cu:11", false},
}

var (
	objSize  = regexp.MustCompile(`of the (\d+)-byte array`)
	fraction = regexp.MustCompile(`(spatial redundancy [0-9.]+%)|(TR [0-9.]+%)`)
)

// TestInsightsOnCaptures: on each test program's captures, the intended
// value-redundancy insight is reported at the right source line, loop and
// kernel, with its data object, and its redundancy fraction in the
// evidence (docs/insights.md holds the table this prints).
func TestInsightsOnCaptures(t *testing.T) {
	d, ok := findValidationDirs()
	if !ok {
		t.Fatal("no captures (testdata/captures, committed, or GPUPROF_VALIDATION_DIR)")
	}
	var b strings.Builder
	b.WriteString("| program | insight | file:line | kernel | loop | data object | found | redundancy |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range insightSpecs {
		p, _ := programProfile(t, d, s.prog)
		mods := programModules(t, d, s.prog, p)
		as, err := analysis.Advise(p, mods, analysis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var found *analysis.Advice
		var at analysis.Where
		for i := range as {
			a := &as[i]
			if a.Category != "redundancy" || a.Kind != s.kind {
				continue
			}
			for _, h := range a.Hotspots {
				if symname.Short(h.Kernel) == s.kernel && strings.Contains(sourceLine(d, s.prog, h.File, h.Line), s.marker) && found == nil {
					found, at = a, h
				}
			}
		}
		if found == nil {
			for _, a := range as {
				if a.Category == "redundancy" {
					h := a.Hotspots[0]
					t.Logf("  %s [%s] %s:%d loop %q", a.Kind, h.Kernel, filepath.Base(h.File), h.Line, h.Loop)
				}
			}
			t.Errorf("%s: no %s insight in %s at a line with %q", s.prog, s.kind, s.kernel, s.marker)
			fmt.Fprintf(&b, "| %s | %s | | %s | %s | | no | |\n", s.prog, s.kind, s.kernel, s.loop)
			continue
		}
		loop := ""
		if at.Loop != "" {
			loop = filepath.Base(at.Loop)
		}
		if loop != s.loop {
			t.Errorf("%s %s: loop %q, want %q", s.prog, s.kernel, at.Loop, s.loop)
		}
		obj := "-"
		if at.Object != nil {
			obj = "yes"
			if m := objSize.FindStringSubmatch(found.Evidence); m != nil {
				obj = m[1] + " B allocation"
			}
		}
		frac := ""
		if m := fraction.FindStringSubmatch(found.Evidence); m != nil {
			frac = m[1] + m[2]
		}
		if frac == "" {
			t.Errorf("%s %s: no redundancy fraction in %q", s.prog, s.kernel, found.Evidence)
		}
		if s.object && at.Object == nil {
			t.Errorf("%s %s: no data object", s.prog, s.kernel)
		}
		fmt.Fprintf(&b, "| %s | %s | %s:%d | %s | %s | %s | yes | %s |\n", s.prog, found.Kind, filepath.Base(at.File), at.Line, s.kernel, loop, obj, frac)
	}
	t.Log("\n" + b.String())
}
