package reducer

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// go test ./reducer -run Golden -update rewrites the golden files.
var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// The bytes of partials on the wire (docs/reduction.md, "Partials") stay
// as they are for a given profile and header: chunks, headers and the
// compressed body, in one zstd frame or in several compressed in
// parallel, against a golden list of each chunk's size and SHA-256.
func TestGoldenPartialChunks(t *testing.T) {
	p := profile.New("golden")
	for r := int32(0); r < 3; r++ {
		for _, it := range proftest.Rank("golden", 5, proftest.Small, r, 1) {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := partialHeader{Flags: flagFinished, Level: 1, Node: 2, PVer: 7, Clock: 1700000000123456789, LastDone: 1700000001000000000,
		Ranks: 3, Sealed: 3, Batches: 6, BytesIn: 12345}
	h.Job = "golden"
	var b strings.Builder
	for _, c := range []struct {
		name    string
		frame   int
		payload int
	}{{"one frame, one chunk", 4 << 20, 1 << 20}, {"one frame, chunks of 2000 bytes", 4 << 20, 2000}, {"frames of 4096 bytes, chunks of 3000", 4096, 3000}} {
		old := zframe
		zframe = c.frame
		chunks, hh, err := encodePartial(h, p, c.payload)
		zframe = old
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %d chunks, raw %d, body %d, items %d\n", c.name, len(chunks), hh.RawLen, hh.BodyLen, hh.Items)
		for i, ch := range chunks {
			fmt.Fprintf(&b, "  %d: %d bytes sha256 %x\n", i, len(ch), sha256.Sum256(ch))
		}
	}
	const path = "testdata/partial-chunks.golden"
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("partial chunks differ from %s:\n%s\nwant\n%s", path, b.String(), want)
	}
}
