package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"gpuprof/broker"
	"gpuprof/collector/analyze"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
	"gpuprof/sass"
)

// fakeNVDisasm writes a stand-in for nvdisasm that prints listing after
// delay and appends a line to the returned count file per run.
func fakeNVDisasm(t *testing.T, listing string, delay time.Duration) (tool, count string) {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(listing)
	if err != nil {
		t.Fatal(err)
	}
	tool, count = filepath.Join(dir, "nvdisasm"), filepath.Join(dir, "runs")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> '%s'\nsleep %.3f\nexec cat '%s'\n", count, delay.Seconds(), abs)
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return tool, count
}

func runs(t *testing.T, count string) int {
	b, err := os.ReadFile(count)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// loadAll has n ranks (each its own broker connection and SASS) load the
// module's structure at once and checks that every rank places and kinds
// every instruction as the listing says.
func loadAll(t *testing.T, e *broker.Embedded, job string, n int, tool string, wait time.Duration, cubin []byte, ref *sass.Module) []*analyze.SASS {
	t.Helper()
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	var funcs []string
	for _, f := range ref.Functions {
		funcs = append(funcs, f.Name)
	}
	srcs := make([]*analyze.SASS, n)
	sts := make([]analyze.Structure, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range srcs {
		c, err := broker.Connect(e.Options(fmt.Sprintf("rank %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		srcs[i] = &analyze.SASS{NVDisasm: tool, Share: BrokerListings(c, job, int32(i)), ShareWait: wait, Logf: t.Logf}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], errs[i] = srcs[i].Structure(h, cubin, funcs, 90)
		}()
	}
	wg.Wait()
	for i := range srcs {
		if errs[i] != nil || sts[i] == nil {
			t.Fatalf("rank %d: structure %v, %v", i, sts[i], errs[i])
		}
		checkPlacement(t, fmt.Sprintf("rank %d", i), sts[i], ref)
	}
	return srcs
}

// probeListing is the committed nvdisasm listing of the probe cubin.
const probeListing = "../testdata/sass/probe/k.hex.txt"

// probeModule reads the committed probe cubin and parses its listing.
func probeModule(t *testing.T) ([]byte, *sass.Module) {
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
	return cubin, ref
}

// Ranks sharing a module's listing through the real broker run nvdisasm
// once between them; a claimant that dies is replaced after the bound.
func TestSharedListings(t *testing.T) {
	cubin, ref := probeModule(t)
	e, err := broker.StartEmbeddedWith(broker.EmbeddedOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	const n = 6

	t.Run("one run", func(t *testing.T) {
		tool, count := fakeNVDisasm(t, probeListing, 300*time.Millisecond)
		srcs := loadAll(t, e, "share", n, tool, time.Minute, cubin, ref)
		if r := runs(t, count); r != 1 {
			t.Fatalf("nvdisasm ran %d times for %d ranks, want 1", r, n)
		}
		var st analyze.ShareStats
		for _, s := range srcs {
			x := s.Stats()
			st.Disassembled += x.Disassembled
			st.Shared += x.Shared
			st.Stored += x.Stored
			st.Fallbacks += x.Fallbacks
		}
		if st != (analyze.ShareStats{Disassembled: 1, Shared: n - 1, Stored: 1}) {
			t.Fatalf("stats %+v", st)
		}
		// A late rank finds the listing stored and runs nothing.
		loadAll(t, e, "share", 1, tool, time.Minute, cubin, ref)
		if r := runs(t, count); r != 1 {
			t.Fatalf("a late rank ran nvdisasm (%d runs)", r)
		}
	})

	t.Run("claimant dies", func(t *testing.T) {
		tool, count := fakeNVDisasm(t, probeListing, 0)
		c, err := broker.Connect(e.Options("doomed"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := profile.ModuleHash(xxhash.Sum64(cubin))
		if ok, err := c.ClaimModule(t.Context(), "dies", h, broker.ModuleSASS, "a rank that dies"); !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		const bound = 700 * time.Millisecond
		t0 := time.Now()
		srcs := loadAll(t, e, "dies", n, tool, bound, cubin, ref)
		if d := time.Since(t0); d < bound {
			t.Errorf("ranks gave up after %v, before the bound %v", d, bound)
		}
		r := runs(t, count)
		if r < 1 || r > n {
			t.Fatalf("%d nvdisasm runs", r)
		}
		fb := uint64(0)
		for _, s := range srcs {
			fb += s.Stats().Fallbacks
		}
		if fb != n {
			t.Errorf("%d fallbacks, want %d", fb, n)
		}
		// The listing a fallback stored serves the next rank at once.
		t0 = time.Now()
		loadAll(t, e, "dies", 1, tool, bound, cubin, ref)
		if runs(t, count) != r || time.Since(t0) >= bound {
			t.Errorf("a late rank did not use the fallback's listing")
		}
	})
}

// A module's listing is made when its bytes arrive, not at its first
// launch: nvdisasm has started before any LAUNCH frame is analysed, runs
// once, and the structure it gives is the one Structure returns.
func TestPrefetchListing(t *testing.T) {
	cubin, ref := probeModule(t)
	tool, count := fakeNVDisasm(t, probeListing, 200*time.Millisecond)
	src := &analyze.SASS{NVDisasm: tool}
	a := analyze.New(analyze.Options{Job: "prefetch", Workers: 1, Structures: src})
	defer a.Close()
	if err := a.Add(&rawstream.Hello{Version: 2, SM: 90}, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(&rawstream.Module{ModuleID: 1, ContentKey: 1, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin}, 8); err != nil {
		t.Fatal(err)
	}
	// No launch yet: the fake nvdisasm must start on its own.
	deadline := time.Now().Add(30 * time.Second)
	for runs(t, count) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nvdisasm did not start when the module arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h := profile.ModuleHash(xxhash.Sum64(cubin))
	var funcs []string
	for _, f := range ref.Functions {
		funcs = append(funcs, f.Name)
	}
	st, err := src.Structure(h, cubin, funcs, 90)
	if err != nil || st == nil {
		t.Fatalf("structure after the prefetch: %v, %v", st, err)
	}
	if _, err := src.Structure(h, cubin, funcs, 90); err != nil {
		t.Fatal(err)
	}
	if r := runs(t, count); r != 1 {
		t.Fatalf("nvdisasm ran %d times, want 1", r)
	}
	if s := src.Stats(); s.Disassembled != 1 {
		t.Fatalf("stats: %+v", s)
	}
	checkPlacement(t, "prefetched", st, ref)
}

// checkPlacement checks that st places and kinds every instruction of the
// listing ref as the listing says.
func checkPlacement(t *testing.T, who string, st analyze.Structure, ref *sass.Module) {
	t.Helper()
	checked := 0
	for _, f := range ref.Functions {
		kinds := f.AccessKinds()
		for k, in := range f.Insts {
			off := in.Offset - f.Insts[0].Offset
			pl, ok := st.Place(f.Name, off)
			if !ok || pl.Offset != uint32(in.Offset) {
				t.Fatalf("%s: %s+%#x placed %v %+v", who, f.Name, off, ok, pl)
			}
			ak, ok := st.AccessKind(f.Name, off)
			want := kinds[k].Vec > 0 && !kinds[k].Fallback
			if ok != want || ok && int(ak.UnitBits) != kinds[k].UnitBits {
				t.Fatalf("%s: %s+%#x kind %v %+v, listing says %v", who, f.Name, off, ok, ak, kinds[k])
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no instructions checked")
	}
}
