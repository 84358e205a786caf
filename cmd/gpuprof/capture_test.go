package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector"
	"gpuprof/collector/capture"
	"gpuprof/collector/online"
	"gpuprof/collector/online/nvdisasmtest"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
	"gpuprof/sass"
)

// replayProfile collects a recorded stream in this process.
func replayProfile(t *testing.T, stream string, src online.StructureSource) *profile.Profile {
	t.Helper()
	lp := &localPublisher{p: profile.New("trim")}
	if err := collector.Collect(context.Background(), collector.Options{Job: "trim", Rank: 0, Replay: stream, Publisher: lp, Analysis: online.Options{Structures: src}}); err != nil {
		t.Fatal(err)
	}
	return lp.p
}

// A trimmed capture, replayed with the listings written for it, gives the
// profile the whole capture gives with nvdisasm: the module keeps its
// content hash, and its functions their structure.
func TestTrimmedCaptureReplays(t *testing.T) {
	m := synth.NewBigModule(200, 4<<20)
	launched := []int{3, 150}
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.gpr")
	f, err := os.Create(whole)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.WriteBigStream(f, m, synth.BigStreamOptions{Launched: launched}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fake := nvdisasmtest.New(t, m.Cubin, m.Listing(m.Names[3], m.Names[150]), 0)

	trimmed := filepath.Join(dir, "trimmed.gpr")
	out, err := os.Create(trimmed)
	if err != nil {
		t.Fatal(err)
	}
	r, err := capture.Trim(whole, out, capture.Options{})
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	if r.FunctionsKept != len(launched) || r.Functions != 200 || len(r.Modules) != 1 || r.ModuleBytesDropped != int64(len(m.Cubin)) {
		t.Fatalf("trim: %+v", r)
	}
	st, _ := os.Stat(trimmed)
	if st.Size() > 64<<10 {
		t.Errorf("the trimmed capture has %d bytes", st.Size())
	}
	// The listings, as the GPU machine writes them (nvdisasm on PATH).
	t.Setenv("PATH", filepath.Dir(fake.Tool)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("GPUPROF_CACHE_DIR", "off")
	listings := filepath.Join(dir, "listings")
	if err := writeListings(listings, r, false); err != nil {
		t.Fatal(err)
	}
	if asked, whole := fake.Asked(t); whole != 0 || len(asked) != len(launched) || asked[m.Symbol[3]] != 1 || asked[m.Symbol[150]] != 1 {
		t.Fatalf("nvdisasm runs %v", fake.Runs(t))
	}

	want := replayProfile(t, whole, &online.SASS{NVDisasm: fake.Tool})
	got := replayProfile(t, trimmed, &online.SASS{NVDisasm: "-", Files: []string{listings}})
	lines := 0
	for _, n := range got.Nodes {
		if n.Frame.Kind == profile.KindLine {
			lines++
		}
	}
	if lines == 0 {
		t.Fatal("the trimmed replay placed nothing by its listings")
	}
	// How the data was split into items depends on when structure came.
	for _, p := range []*profile.Profile{want, got} {
		p.Items = nil
		for _, ri := range p.Ranks {
			ri.Batches = 0
		}
	}
	if !bytes.Equal(want.Encode(), got.Encode()) {
		t.Error("the trimmed replay's profile differs from the whole capture's")
	}
	// Without the listings the reason is on the kernels.
	bare := replayProfile(t, trimmed, &online.SASS{NVDisasm: "-"})
	n := uint64(0)
	for _, nd := range bare.Nodes {
		n += nd.Metrics.Get(profile.Metric(online.StructureMissing + online.WhyNoCubin))
	}
	if n != uint64(len(launched)) {
		t.Errorf("%d kernels say no_cubin, want %d", n, len(launched))
	}
}

// Trimming keeps every frame but module bytes and unused functions, and
// with a budget turns the launches over it into untraced ones.
func TestTrimAccessBudget(t *testing.T) {
	dir := t.TempDir()
	files, err := synth.WriteFiles(dir, synth.Options{Ranks: 1, Seed: 4, Iterations: 2})
	if err != nil {
		t.Fatal(err)
	}
	var all, some bytes.Buffer
	r, err := capture.Trim(files[0], &all, capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.AccessBytesKept != r.AccessBytes || r.LaunchesUntraced != 0 {
		t.Fatalf("without a budget: %+v", r)
	}
	r2, err := capture.Trim(files[0], &some, capture.Options{MaxAccess: r.AccessBytes / 3})
	if err != nil {
		t.Fatal(err)
	}
	if r2.AccessBytesKept > r.AccessBytes/3 || r2.AccessBytesKept == 0 || r2.LaunchesUntraced == 0 {
		t.Fatalf("with a budget of %d: %+v", r.AccessBytes/3, r2)
	}
	// The result decodes to its END, traced launches have their records
	// and untraced ones none.
	d := rawstream.NewDecoder(&some)
	traced := map[uint64]bool{}
	for {
		f, err := d.Next()
		if err != nil {
			break
		}
		switch x := f.(type) {
		case *rawstream.Launch:
			traced[x.LaunchID] = x.Instrumented
		case *rawstream.Access:
			if !traced[x.LaunchID] {
				t.Fatalf("records of untraced launch %d", x.LaunchID)
			}
		case *rawstream.KernelEnd:
			if !traced[x.LaunchID] && (x.Records != 0 || x.BlocksSampled != 0) {
				t.Fatalf("untraced launch %d ends with %d records", x.LaunchID, x.Records)
			}
		}
	}
	if !d.Ended() {
		t.Fatal("the trimmed stream does not end with END")
	}
}

// Listings written for two captures of one program keep both captures'
// functions.
func TestListingsAccumulate(t *testing.T) {
	m := synth.NewBigModule(20, 1<<20)
	fake := nvdisasmtest.New(t, m.Cubin, m.Listing(m.Names[2], m.Names[5]), 0)
	t.Setenv("PATH", filepath.Dir(fake.Tool)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("GPUPROF_CACHE_DIR", "off")
	dir := t.TempDir()
	for _, k := range []int{2, 5} {
		r := &capture.Result{SM: 90, Modules: []*capture.Module{{ID: 1, Hash: 0xabc, Bytes: m.Cubin, Functions: []string{m.Names[k]}}}}
		if err := writeListings(dir, r, false); err != nil {
			t.Fatal(err)
		}
	}
	text, err := online.ReadListingFile(filepath.Join(dir, profile.ModuleHash(0xabc).String()+".sass.zst"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := sass.Parse(text)
	if err != nil || mod.Func(m.Names[2]) == nil || mod.Func(m.Names[5]) == nil {
		t.Fatalf("the listing lost a capture's function: %v", err)
	}
}
