package export

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/viewer-export/hpctoolkit"
	"gpuprof/viewer-export/internal/exporttest"
)

func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	p := exporttest.Showcase(4)
	if err := WriteAll(dir, p, exporttest.ShowcaseAdvice(p)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"database/meta.db", "database/profile.db", "database/cct.db", "database/metrics/default.yaml",
		PprofFile, JSONFile, HTMLFile, TextFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := hpctoolkit.Read(filepath.Join(dir, DatabaseDir)); err != nil {
		t.Errorf("database: %v", err)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, TextFile))
	if !strings.Contains(string(txt), "gpuprof report: job heat3d-cg") {
		t.Errorf("report.txt:\n%s", txt)
	}
}

func TestWriteAllBaselineAndErrors(t *testing.T) {
	dir := t.TempDir()
	p := exporttest.Showcase(2)
	if err := WriteAllOptions(dir, p, nil, Options{Baseline: exporttest.Showcase(2), ExpectedRanks: 4}); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, HTMLFile))
	if !strings.Contains(string(page), `id="diff"`) {
		t.Error("no before/after section with a baseline")
	}
	txt, _ := os.ReadFile(filepath.Join(dir, TextFile))
	if !strings.Contains(string(txt), "2 merged of 4 expected") {
		t.Errorf("expected ranks not used:\n%.400s", txt)
	}
	// A file where the directory should be: an error naming it.
	bad := filepath.Join(dir, "file")
	os.WriteFile(bad, []byte("x"), 0o644)
	if err := WriteAll(bad, p, nil); err == nil {
		t.Error("no error writing into a file")
	}
	if err := WriteAll(dir, nil, nil); err == nil {
		t.Error("no error for a nil profile")
	}
}
