package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpuprof/broker"
	"gpuprof/collector"
	"gpuprof/collector/online"
	"gpuprof/collector/online/nvdisasmtest"
	"gpuprof/collector/synth"
	"gpuprof/profile"
	"gpuprof/sass"
)

// The framework-sized module of the pipeline test: more than 100 MB (over
// a raw stream frame, so it travels in MODULE_DATA chunks) and thousands of
// kernels, of which a few run.
const (
	bigKernels = 4000
	bigBytes   = 104 << 20
)

var bigLaunched = []int{7, 1999, 3998}

// bigBound is what TestFrameworkSizedModule allows the replay, the
// collector, the broker and the report together: generous for two slow
// cores (BenchmarkFrameworkSizedModule measures the actual time).
const bigBound = 3 * time.Minute

type bigRun struct {
	p    *profile.Profile
	out  string
	fake *nvdisasmtest.Fake
	mod  *synth.BigModule
}

// runBig replays a stream of the framework-sized module through a
// collector sharing its listings through the embedded broker, then saves
// the modules and writes the report as gpuprof run's root does.
func runBig(tb testing.TB, ctx context.Context, m *synth.BigModule, fake *nvdisasmtest.Fake, stream, cacheDir string) *bigRun {
	tb.Helper()
	e, err := broker.StartEmbeddedWith(broker.EmbeddedOptions{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Shutdown()
	conn, err := broker.Connect(e.Options("big"))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	const job = "big"
	if err := conn.EnsureModuleBucket(ctx, job, 1); err != nil {
		tb.Fatal(err)
	}
	lp := &localPublisher{p: profile.New(job)}
	src := &online.SASS{NVDisasm: fake.Tool, Share: collector.BrokerListings(conn, job, 0), Cache: &online.DiskCache{Dir: cacheDir, Max: 1 << 30}}
	err = collector.Collect(ctx, collector.Options{Job: job, Rank: 0, Replay: stream, Publisher: lp, Analysis: online.Options{Structures: src,
		OnModule: func(h profile.ModuleHash, cubin []byte) {
			if len(cubin) <= CubinKeepMax {
				conn.PutModule(ctx, job, h, broker.ModuleCubin, cubin)
			}
		}}})
	if err != nil {
		tb.Fatal(err)
	}
	out := tb.TempDir()
	saveModules(ctx, conn, job, out, lp.p)
	if _, err := writeOutputs(out, "", lp.p, 1, 0); err != nil {
		tb.Fatal(err)
	}
	return &bigRun{p: lp.p, out: out, fake: fake, mod: m}
}

func newBig(tb testing.TB) (*synth.BigModule, *nvdisasmtest.Fake, string) {
	tb.Helper()
	m := synth.NewBigModule(bigKernels, bigBytes)
	var names []string
	for _, k := range bigLaunched {
		names = append(names, m.Names[k])
	}
	fake := nvdisasmtest.New(tb, m.Cubin, m.Listing(names...), 0)
	stream := filepath.Join(tb.TempDir(), "big.gpr")
	f, err := os.Create(stream)
	if err != nil {
		tb.Fatal(err)
	}
	if err := synth.WriteBigStream(f, m, synth.BigStreamOptions{Launched: bigLaunched}); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return m, fake, stream
}

// TestFrameworkSizedModule: a stream with a 104 MB module of 4000 kernels
// (the cubin is generated; its listings are generated in nvdisasm's
// format and printed by a stand-in nvdisasm that honours -fun) goes
// through replay, collector, broker and report within bigBound. Only the
// launched kernels are disassembled, in one nvdisasm run; their
// instructions are placed by their structure; the output directory keeps
// their listing and not the 104 MB cubin; a second run finds every
// listing in the disk cache.
func TestFrameworkSizedModule(t *testing.T) {
	if testing.Short() {
		t.Skip("104 MB module")
	}
	ctx, cancel := context.WithTimeout(context.Background(), bigBound)
	defer cancel()
	t0 := time.Now()
	m, fake, stream := newBig(t)
	cache := t.TempDir()
	r := runBig(t, ctx, m, fake, stream, cache)
	if ctx.Err() != nil {
		t.Fatalf("over the bound of %v", bigBound)
	}
	t.Logf("generated, replayed, collected and reported in %v", time.Since(t0))
	// Batches depend on timing; together they select each launched
	// kernel once and nothing else.
	runs := fake.Runs(t)
	asked, whole := fake.Asked(t)
	if whole != 0 || len(asked) != len(bigLaunched) {
		t.Fatalf("nvdisasm runs %v, want the launched kernels' symbols alone", runs)
	}
	for _, k := range bigLaunched {
		if asked[m.Symbol[k]] != 1 {
			t.Fatalf("nvdisasm runs %v: kernel %d (symbol %d) asked %d times", runs, k, m.Symbol[k], asked[m.Symbol[k]])
		}
	}
	lined := 0
	for _, n := range r.p.Nodes {
		if n.Frame.Kind == profile.KindLine {
			lined++
		}
	}
	if lined == 0 {
		t.Error("no instruction placed under a source line")
	}
	entries, _ := os.ReadDir(filepath.Join(r.out, ModulesDir))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(entries) != 1 || !strings.HasSuffix(names[0], ".sass.zst") {
		t.Fatalf("modules directory holds %v, want the listing alone", names)
	}
	b, err := os.ReadFile(filepath.Join(r.out, ModulesDir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	text, err := sass.DecodeListing(b)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := sass.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(saved.Functions) != len(bigLaunched) {
		t.Errorf("the saved listing holds %d functions, want the %d that ran", len(saved.Functions), len(bigLaunched))
	}
	report, err := os.ReadFile(filepath.Join(r.out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "libfw::kernel<1999>") {
		t.Errorf("the report does not name a launched kernel:\n%s", report)
	}

	// A second run: every listing from the disk cache, no nvdisasm.
	runBig(t, ctx, m, fake, stream, cache)
	if n := len(fake.Runs(t)); n != len(runs) {
		t.Errorf("the second run ran nvdisasm (%d runs in all)", n)
	}
}

// BenchmarkFrameworkSizedModule times what TestFrameworkSizedModule bounds
// (without generating the module): replay, collector, broker and report
// of the 104 MB module, a first run (nvdisasm stand-in) per iteration.
func BenchmarkFrameworkSizedModule(b *testing.B) {
	m, fake, stream := newBig(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runBig(b, context.Background(), m, fake, stream, b.TempDir())
	}
}
