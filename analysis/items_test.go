package analysis_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/analysis"
)

// adviceText is a program's advice as text, every field an estimate
// rests on.
func adviceText(t *testing.T, d validationDirs, tag string) string {
	t.Helper()
	p, _ := programProfile(t, d, tag)
	as, err := analysis.Advise(p, programModules(t, d, tag, p), analysis.Options{Static: true, MinSpeedup: 1 + 1e-9})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "%s|%.6f|%s|%s|%s\n", a.Kind, a.Speedup, a.SpeedupNA, a.Hint, a.Evidence)
	}
	return b.String()
}

// devPrograms are the development set's programs with a listing and a
// sampled redundancy capture.
func devPrograms(t *testing.T) (validationDirs, []string) {
	d := validationDirs{captures: "../testdata/captures", sass: "../testdata/sass"}
	pcs, _ := filepath.Glob(filepath.Join(d.captures, "*.pcsampling.gpr"))
	var tags []string
	for _, pc := range pcs {
		tag := strings.TrimSuffix(filepath.Base(pc), ".pcsampling.gpr")
		_, e1 := os.Stat(filepath.Join(d.sass, tag))
		_, e2 := os.Stat(filepath.Join(d.captures, tag+".redundancy.p50k10.gpr"))
		if e1 == nil && e2 == nil {
			tags = append(tags, tag)
		}
	}
	if len(tags) < 10 {
		t.Fatalf("%d development programs with captures and listings, want the twelve", len(tags))
	}
	return d, tags
}

// TestHeldOutItemKeepsAdvice: a redundancy capture's item (what
// TestHeldOutItems brings back from the GPU machine instead of a trace too
// large to return) gives the same advice, estimates and evidence as the
// capture itself, on every development program.
func TestHeldOutItemKeepsAdvice(t *testing.T) {
	src, tags := devPrograms(t)
	for _, tag := range tags {
		dir := t.TempDir()
		a := validationDirs{captures: filepath.Join(dir, "capture"), sass: src.sass}
		b := validationDirs{captures: filepath.Join(dir, "item"), sass: src.sass}
		for _, d := range []string{a.captures, b.captures} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"pcsampling", "hybrid"} {
				if data, err := os.ReadFile(filepath.Join(src.captures, tag+"."+m+".gpr")); err == nil {
					if err := os.WriteFile(filepath.Join(d, tag+"."+m+".gpr"), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		red := filepath.Join(src.captures, tag+".redundancy.p50k10.gpr")
		data, err := os.ReadFile(red)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(a.captures, filepath.Base(red)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		it := captureItem(t, red, captureStructures(src, tag), 0, captureModules(t, filepath.Join(src.captures, tag+".pcsampling.gpr")))
		if err := os.WriteFile(filepath.Join(b.captures, tag+".redundancy.p50k10.item"), it.Encode(), 0o644); err != nil {
			t.Fatal(err)
		}
		if ta, tb := adviceText(t, a, tag), adviceText(t, b, tag); ta != tb {
			t.Errorf("%s: the advice from the item differs from the capture's:\ncapture:\n%s\nitem:\n%s", tag, ta, tb)
		}
	}
}

// TestAdviceIsDeterministic: the same captures give the same advice, run
// after run, whatever the workers' interleaving.
func TestAdviceIsDeterministic(t *testing.T) {
	d, tags := devPrograms(t)
	for _, tag := range tags {
		first := adviceText(t, d, tag)
		if again := adviceText(t, d, tag); again != first {
			t.Errorf("%s: two analyses of the same captures differ:\n%s\nthen:\n%s", tag, first, again)
		}
	}
}
