package collector

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector/online"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// writeLazy writes stream to path as the library writes it under lazy
// loading (synth.LazyLoading).
func writeLazy(t *testing.T, path string, stream []byte, late bool) {
	t.Helper()
	b, err := synth.LazyLoading(stream, late)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// unknownKernels counts an item's kernel nodes under the unknown module.
func unknownKernels(p *profile.Profile) int {
	n := 0
	for _, nd := range p.Nodes {
		if nd.Frame.Kind == profile.KindKernel && nd.Frame.Module == profile.ModuleHash(0).String() {
			n++
		}
	}
	return n
}

// A batch falls due (BatchRecords) while a kernel's first launch waits
// for its module: the collector puts the item off until the module comes,
// so no published item holds the launch under the unknown module, and the
// rank's profile is the eager stream's. Past twice the batch size it
// publishes anyway (the bound): then, and only then, the first launch
// stays apart under the unknown module.
func TestFirstLaunchWaitsForItsModule(t *testing.T) {
	// Each module reported only after its first launch's records and end.
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, 0, synth.Options{Seed: 21, BlockSampling: 2}); err != nil {
		t.Fatal(err)
	}
	eager := buf.Bytes()
	path := filepath.Join(t.TempDir(), synth.FileName(0))
	writeLazy(t, path, eager, true)
	for _, tc := range []struct {
		batch   uint64
		unknown bool // the bound is reached before the module comes
	}{{1000, false}, {300, true}} {
		pub := &items{}
		c, err := New(Options{Job: "job", Rank: 0, Replay: path, Publisher: pub, BatchRecords: tc.batch, Analysis: online.Options{Workers: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		m := pub.merged(t, 0)
		if len(pub.got) < 3 {
			t.Errorf("batch %d: %d items, want several", tc.batch, len(pub.got))
		}
		if got := unknownKernels(pub.got[0]) > 0; got != tc.unknown {
			t.Errorf("batch %d: the first item holds a kernel under the unknown module: %v, want %v", tc.batch, got, tc.unknown)
		}
		for i, p := range pub.got[1:] {
			if unknownKernels(p) > 0 {
				t.Errorf("batch %d: item %d holds a kernel under the unknown module", tc.batch, i+1)
			}
		}
		if !tc.unknown {
			sameData(t, direct(t, eager, 0), m)
		}
		if got, want := m.Ranks[0].Launches, direct(t, eager, 0).Ranks[0].Launches; got != want || got == 0 {
			t.Errorf("batch %d: %d launches, want %d", tc.batch, got, want)
		}
	}
}

// The two passes of --mode all: PC sampling recorded under lazy loading
// (kernels reported before their modules) and value tracing, whose
// modules come first. A rank's passes are merged by calling context, and
// the lazy pass's kernel contexts are the value-tracing pass's, as the
// eager PC-sampling pass's are.
func TestLazyPassMergesWithEagerPass(t *testing.T) {
	caps := "../testdata/captures/mpi_imbalance."
	pcs, err := os.ReadFile(caps + "pcsampling.rank1.gpr")
	if err != nil {
		t.Fatal(err)
	}
	lazy := filepath.Join(t.TempDir(), "lazy.gpr")
	writeLazy(t, lazy, pcs, false)
	kernelIDs := func(path string) map[profile.NodeID]string {
		pub := &items{}
		c, err := New(Options{Job: "job", Rank: 1, Replay: path, Publisher: pub,
			Analysis: online.Options{Workers: 2, Structures: &online.SASS{NVDisasm: "-", Files: []string{"../testdata/sass/mpi_imbalance"}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		ids := map[profile.NodeID]string{}
		for _, n := range pub.merged(t, 1).Nodes {
			if n.Frame.Kind == profile.KindKernel {
				ids[n.ID] = n.Frame.String()
			}
		}
		return ids
	}
	got, eager, red := kernelIDs(lazy), kernelIDs(caps+"pcsampling.rank1.gpr"), kernelIDs(caps+"redundancy.rank1.gpr")
	if len(red) == 0 || len(got) != len(red) || len(eager) != len(red) {
		t.Fatalf("kernel contexts: lazy PC sampling %v, eager %v, value tracing %v", got, eager, red)
	}
	for id, f := range red {
		if got[id] == "" || eager[id] == "" {
			t.Errorf("value tracing's kernel context %s (%v) is not the PC-sampling pass's: lazy %v, eager %v", f, id, got, eager)
		}
	}
}
