package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpuprof/collector/online/nvdisasmtest"
	"gpuprof/collector/rawstream"
)

// moduleOf returns the cubin a recorded stream carries.
func moduleOf(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := rawstream.NewDecoder(bytes.NewReader(b))
	for {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("%s: no module with its bytes: %v", path, err)
		}
		if m, ok := f.(*rawstream.Module); ok && m.HasBytes {
			return m.Bytes
		}
	}
}

// The README's first command on a cold listing cache: mpirun starts four
// collectors (each replaying a rank of the H100 capture of mpi_imbalance)
// under the job's collector credentials; one disassembles the kernel they
// all launched and stores its listing, the other three read it from the
// broker. Every rank gets the kernel's structure, from one nvdisasm run.
// Before the collectors could read what another stored, three of four
// waited out the 30 s structure bound and the report listed the kernel
// among those without source lines.
func TestRunUnderMpirunSharesListings(t *testing.T) {
	mpirun, bin := mpirunOrSkip(t)
	caps, err := filepath.Abs("../../testdata/captures")
	if err != nil {
		t.Fatal(err)
	}
	cubin := moduleOf(t, filepath.Join(caps, "mpi_imbalance.redundancy.rank0.gpr"))
	listing, err := os.ReadFile("../../testdata/sass/mpi_imbalance/mpi_imbalance.sass.txt")
	if err != nil {
		t.Fatal(err)
	}
	// nvdisasm slow enough that the other ranks ask while it runs, and
	// so wait for the listing through the broker rather than find it in
	// the disk cache the four share.
	fake := nvdisasmtest.New(t, cubin, listing, time.Second)
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, "run", "-o", out, "--job", "shared", "--rank-timeout", "60s",
		"--replay", filepath.Join(caps, "mpi_imbalance.redundancy.rank{rank}.gpr"),
		"--", mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4")
	cmd.Env = mpirunEnv("PATH="+filepath.Dir(fake.Tool)+string(os.PathListSeparator)+os.Getenv("PATH"), "GPUPROF_CACHE_DIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuprof run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "4 of 4 ranks reported, 0 incomplete") {
		t.Fatalf("summary:\n%s", stderr.String())
	}
	if runs := fake.Runs(t); len(runs) != 1 {
		t.Errorf("%d nvdisasm runs for four ranks of one kernel, want 1: %v", len(runs), runs)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rep), "Kernels without source lines") || !strings.Contains(string(rep), "mpi_imbalance.cu:") {
		t.Errorf("a rank placed relax without its structure:\n%s", rep)
	}
}
