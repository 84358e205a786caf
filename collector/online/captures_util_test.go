package online

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testCapture is one committed H100 capture with the structure source of
// its program's committed nvdisasm listings.
type testCapture struct {
	name string // file name, e.g. loop_reload.redundancy.p1.gpr
	data []byte
	st   *SASS
}

// captureDir holds the committed captures; captureGlob names some of them.
const captureDir = "../../testdata/captures"

func captureGlob(pattern string) string { return filepath.Join(captureDir, pattern) }

// loadCaptures reads the captures matching glob, skipping the test or
// benchmark when there are none.
func loadCaptures(tb testing.TB, glob string) []testCapture {
	tb.Helper()
	files, _ := filepath.Glob(glob)
	if len(files) == 0 {
		tb.Skipf("no captures match %s", glob)
	}
	var out []testCapture
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		name := filepath.Base(f)
		prog := strings.SplitN(name, ".", 2)[0]
		out = append(out, testCapture{name: name, data: data,
			st: &SASS{NVDisasm: "-", Files: []string{filepath.Join("../../testdata/sass", prog)}}})
	}
	return out
}
