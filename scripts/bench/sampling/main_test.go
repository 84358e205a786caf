package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/sampling/study.md")

// The committed H100 study (testdata/sampling: every test program fully
// traced and sampled with one input, analysed live by gpuprof collect)
// reads back into the table gpu-check printed on the machine, every program
// is compared, and kernel and block sampling leave the temporal fractions
// where full tracing put them: temporal redundancy is per thread, and a
// traced block traces its threads whole.
func TestCommittedStudy(t *testing.T) {
	const dir = "../../../testdata/sampling"
	s, err := Compare(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Programs) != 12 {
		t.Errorf("%d programs compared, want the 12 test programs", len(s.Programs))
	}
	for _, r := range s.Rows {
		if strings.HasPrefix(r.Fraction, "temporal") && r.Diff > 0.5 {
			t.Errorf("%s %s: %.2f%% fully traced, %.2f%% sampled", r.Program, r.Fraction, 100*r.Full, 100*r.Sampled)
		}
	}
	var b bytes.Buffer
	s.Print(&b)
	if *update {
		if err := os.WriteFile(dir+"/study.md", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(dir + "/study.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("the study does not print as %s/study.md (go test -update to rewrite):\n%s", dir, b.String())
	}
}

func TestCompareErrors(t *testing.T) {
	if _, err := Compare(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no program") {
		t.Errorf("empty directory: %v", err)
	}
	d := t.TempDir()
	os.WriteFile(d+"/x.p1.gpuprof", []byte("not a profile"), 0o644)
	os.WriteFile(d+"/x.p50k10.gpuprof", []byte("not a profile"), 0o644)
	if _, err := Compare(d); err == nil || !strings.Contains(err.Error(), "x.p1.gpuprof") {
		t.Errorf("corrupt profile: %v", err)
	}
}
