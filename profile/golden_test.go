package profile_test

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// go test ./profile -run Golden -update rewrites the golden files.
var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/name, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(g) || i < len(w); i++ {
			var a, b string
			if i < len(g) {
				a = g[i]
			}
			if i < len(w) {
				b = w[i]
			}
			if a != b {
				t.Fatalf("%s, line %d:\n got  %s\n want %s\n(-update rewrites the file if the change is meant)", path, i+1, a, b)
			}
		}
	}
}

// merged is the merge of items, in order.
func merged(t *testing.T, job string, items ...[]*profile.Profile) *profile.Profile {
	t.Helper()
	p := profile.New(job)
	for _, rank := range items {
		for _, it := range rank {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// The canonical text (Profile.String) of profiles of each kind, against
// golden .string files as pprof keeps them: a profile file written by the
// collector before the first-launch change (a kernel's first launch split
// off under the unknown module: it still reads, and stays split), a
// profile of version 1 from the sampling study, three generated ranks
// merged and sealed (summaries, per-rank values), one rank sealed as
// incomplete, and ranks still open.
func TestGoldenText(t *testing.T) {
	const job = "golden"
	sealed := func() *profile.Profile {
		return merged(t, job, proftest.Rank(job, 1, proftest.Small, 0, 2), proftest.Rank(job, 1, proftest.Small, 1, 1), proftest.Rank(job, 1, proftest.Small, 2, 2))
	}
	for _, c := range []struct {
		name string
		p    func() *profile.Profile
	}{
		{"split-first-launch", func() *profile.Profile { return read(t, "testdata/split-first-launch.gpuprof") }},
		{"sampling-single_value", func() *profile.Profile { return read(t, "../testdata/sampling/single_value.p50k10.gpuprof") }},
		{"generated-sealed", sealed},
		{"generated-incomplete", func() *profile.Profile {
			p := sealed()
			rs := proftest.Rank(job, 1, proftest.Small, 3, 3)
			if err := p.Merge(merged(t, job, rs[:2])); err != nil { // no done item, one batch missing
				t.Fatal(err)
			}
			p.SealAll("rank timeout: no done item")
			return p
		}},
		{"generated-open", func() *profile.Profile {
			return merged(t, job, proftest.Rank(job, 2, proftest.Small, 4, 2)[:2], proftest.Rank(job, 2, proftest.Small, 5, 1)[:1])
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.p()
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".string", p.String())
			// The text is the same after an encoding round trip.
			q, err := profile.Decode(p.Encode())
			if err != nil {
				t.Fatal(err)
			}
			if q.String() != p.String() {
				t.Error("the text changed through Encode and Decode")
			}
		})
	}
}

func read(t *testing.T, path string) *profile.Profile {
	t.Helper()
	p, err := profile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A profile written before a kernel's first launch was re-keyed (issue
// 31) reads as it was written: two contexts of one launch site, the first
// launch's under the unknown module (hash 0).
func TestSplitFirstLaunchStillReads(t *testing.T) {
	p := read(t, "testdata/split-first-launch.gpuprof")
	var ks []*profile.Node
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindKernel {
			ks = append(ks, n)
		}
	}
	if len(ks) != 2 || ks[0].Parent != ks[1].Parent || ks[0].Frame.Function != ks[1].Frame.Function {
		t.Fatalf("kernel nodes %v: want two of one site", ks)
	}
	var launches uint64
	unknown := 0
	for _, k := range ks {
		launches += k.Metrics.Get(profile.GPULaunches)
		if k.Frame.Module == profile.ModuleHash(0).String() {
			unknown++
		}
	}
	if launches != 3 || unknown != 1 {
		t.Errorf("%d launches, %d kernels under the unknown module; want 3 and 1", launches, unknown)
	}
}

// The bytes of batches on the wire (docs/wire.md, "Batches") stay as they
// are for a given item: chunks, headers and compressed bodies, against a
// golden list of each chunk's size and SHA-256.
func TestGoldenBatchChunks(t *testing.T) {
	const job = "golden"
	items := proftest.Rank(job, 3, proftest.Small, 7, 1)
	var b strings.Builder
	for _, c := range []struct {
		name    string
		item    *profile.Profile
		done    bool
		payload int
	}{{"data item, one chunk", items[0], false, 1 << 20}, {"data item, chunks of 700 bytes", items[0], false, 700}, {"done item", items[1], true, 1 << 20}} {
		chunks, err := profile.EncodeBatch(c.item, c.done, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %d chunks\n", c.name, len(chunks))
		var a profile.Assembler
		var back *profile.Profile
		for i, ch := range chunks {
			fmt.Fprintf(&b, "  %d: %d bytes sha256 %x\n", i, len(ch), sha256.Sum256(ch))
			if back, _, err = a.Add(ch); err != nil && i == len(chunks)-1 {
				t.Fatal(err)
			}
		}
		if back == nil || !bytes.Equal(back.Encode(), c.item.Encode()) {
			t.Errorf("%s: the chunks do not assemble to the item", c.name)
		}
	}
	golden(t, "batch-chunks.golden", b.String())
}
