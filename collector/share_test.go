package collector

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"gpuprof/broker"
	"gpuprof/collector/online"
	"gpuprof/collector/online/nvdisasmtest"
	"gpuprof/profile"
	"gpuprof/sass"
)

const (
	probeListing = "../testdata/sass/probe/k.hex.txt"
	probeKernel  = "_Z6reloadPKfPfii"
	probeOther   = "_Z3shmPi"
)

// probeModule reads the committed probe cubin and parses its listing.
func probeModule(t *testing.T) ([]byte, []byte, *sass.Module) {
	t.Helper()
	cubin, err := os.ReadFile("../testdata/sass/probe/k.sm90.cubin")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(probeListing)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := sass.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return cubin, text, ref
}

// loadAll has n ranks (each its own broker connection and SASS) ask for
// function fns[i % len(fns)] at once and checks that every rank places and
// kinds every instruction of it as the listing says.
func loadAll(t *testing.T, e *broker.Embedded, job string, n int, tool string, wait time.Duration, cubin []byte, ref *sass.Module, fns ...string) []*online.SASS {
	t.Helper()
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	srcs := make([]*online.SASS, n)
	sts := make([]online.Structure, n)
	whys := make([]string, n)
	var wg sync.WaitGroup
	for i := range srcs {
		c, err := broker.Connect(e.Options(fmt.Sprintf("rank %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		srcs[i] = &online.SASS{NVDisasm: tool, Share: BrokerListings(c, job, int32(i)), ShareWait: wait, Logf: t.Logf}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], whys[i] = online.StructureOf(srcs[i], online.ModuleRef{Hash: h, Cubin: cubin, SM: 90}, fns[i%len(fns)])
		}()
	}
	wg.Wait()
	for i := range srcs {
		if sts[i] == nil {
			t.Fatalf("rank %d: no structure: %s", i, whys[i])
		}
		checkPlacement(t, fmt.Sprintf("rank %d", i), sts[i], ref, fns[i%len(fns)])
	}
	return srcs
}

func sumStats(srcs []*online.SASS) online.ShareStats {
	var st online.ShareStats
	for _, s := range srcs {
		x := s.Stats()
		st.Disassembled += x.Disassembled
		st.Functions += x.Functions
		st.Shared += x.Shared
		st.Stored += x.Stored
		st.Fallbacks += x.Fallbacks
	}
	return st
}

// Ranks sharing a function's listing through the real broker run nvdisasm
// once between them, for that function only; a claimant that dies is
// replaced after the bound.
func TestSharedListings(t *testing.T) {
	cubin, text, ref := probeModule(t)
	e, err := broker.StartEmbeddedWith(broker.EmbeddedOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	syms := nvdisasmtest.Symbols(t, cubin)
	const n = 6

	t.Run("one run", func(t *testing.T) {
		fake := nvdisasmtest.New(t, cubin, text, 300*time.Millisecond)
		srcs := loadAll(t, e, "share", n, fake.Tool, time.Minute, cubin, ref, probeKernel)
		if r := fake.Runs(t); len(r) != 1 || len(r[0]) != 1 || r[0][0] != syms[probeKernel] {
			t.Fatalf("nvdisasm runs %v for %d ranks, want one of symbol %d", r, n, syms[probeKernel])
		}
		if st := sumStats(srcs); st != (online.ShareStats{Disassembled: 1, Functions: 1, Shared: n - 1, Stored: 1}) {
			t.Fatalf("stats %+v", st)
		}
		// A late rank finds the listing stored and runs nothing.
		loadAll(t, e, "share", 1, fake.Tool, time.Minute, cubin, ref, probeKernel)
		if r := fake.Runs(t); len(r) != 1 {
			t.Fatalf("a late rank ran nvdisasm (%d runs)", len(r))
		}
	})

	t.Run("function by function", func(t *testing.T) {
		// Ranks that need different functions of one module claim each
		// apart: one run per function, each for that function alone.
		fake := nvdisasmtest.New(t, cubin, text, 300*time.Millisecond)
		srcs := loadAll(t, e, "byfunc", 4, fake.Tool, time.Minute, cubin, ref, probeKernel, probeOther)
		runs := fake.Runs(t)
		asked := map[int]bool{}
		for _, r := range runs {
			if len(r) != 1 {
				t.Fatalf("runs %v: each should select one function", runs)
			}
			asked[r[0]] = true
		}
		if len(runs) != 2 || !asked[syms[probeKernel]] || !asked[syms[probeOther]] {
			t.Fatalf("runs %v, want one for %d and one for %d", runs, syms[probeKernel], syms[probeOther])
		}
		if st := sumStats(srcs); st.Shared != 2 || st.Stored != 2 {
			t.Fatalf("stats %+v", st)
		}
	})

	t.Run("claimant dies", func(t *testing.T) {
		fake := nvdisasmtest.New(t, cubin, text, 0)
		c, err := broker.Connect(e.Options("doomed"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := profile.ModuleHash(xxhash.Sum64(cubin))
		if ok, err := c.ClaimModule(t.Context(), "dies", h, broker.FunctionKind(probeKernel), "a rank that dies"); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		const bound = 700 * time.Millisecond
		t0 := time.Now()
		srcs := loadAll(t, e, "dies", n, fake.Tool, bound, cubin, ref, probeKernel)
		if d := time.Since(t0); d < bound {
			t.Errorf("ranks gave up after %v, before the bound %v", d, bound)
		}
		if r := len(fake.Runs(t)); r < 1 || r > n {
			t.Fatalf("%d nvdisasm runs", r)
		}
		if fb := sumStats(srcs).Fallbacks; fb != n {
			t.Errorf("%d fallbacks, want %d", fb, n)
		}
		// The listing a fallback stored serves the next rank at once.
		r := len(fake.Runs(t))
		t0 = time.Now()
		loadAll(t, e, "dies", 1, fake.Tool, bound, cubin, ref, probeKernel)
		if len(fake.Runs(t)) != r || time.Since(t0) >= bound {
			t.Errorf("a late rank did not use the fallback's listing")
		}
	})
}

// checkPlacement checks that st places and kinds every instruction of
// function fn (and the functions of its section) as the listing ref says.
func checkPlacement(t *testing.T, who string, st online.Structure, ref *sass.Module, fn string) {
	t.Helper()
	checked := 0
	k := ref.Func(fn)
	for _, f := range ref.Functions {
		if f.Section != k.Section {
			continue
		}
		kinds := f.AccessKinds()
		for i, in := range f.Insts {
			off := in.Offset - k.Start
			pl, ok := st.Place(fn, off)
			if !ok || pl.Offset != uint32(in.Offset) || pl.Function != f.Name {
				t.Fatalf("%s: %s+%#x placed %v %+v", who, fn, off, ok, pl)
			}
			ak, ok := st.AccessKind(fn, off)
			want := kinds[i].Vec > 0 && !kinds[i].Fallback
			if ok != want || ok && int(ak.UnitBits) != kinds[i].UnitBits {
				t.Fatalf("%s: %s+%#x kind %v %+v, listing says %v", who, fn, off, ok, ak, kinds[i])
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no instructions checked")
	}
}
