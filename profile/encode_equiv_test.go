package profile_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// equivCases are profiles of every kind a reducer encodes: one rank's item
// (derived rank tables), a leaf's state with open and sealed ranks, a
// state with a rank sealed as incomplete, several ranks merged, an empty
// profile and a done item alone.
func equivCases(t testing.TB, s proftest.Shape) map[string]*profile.Profile {
	cases := map[string]*profile.Profile{"empty": profile.New("job1")}
	cases["item"] = proftest.Item("job1", 3, s, 2, 0, false, 0)
	cases["done"] = proftest.Item("job1", 3, s, 2, 1, true, 1)
	open := profile.New("job1")
	for r := int32(0); r < 4; r++ {
		for i, it := range proftest.Rank("job1", 3, s, r, 2) {
			if r%2 == 1 && i == 2 {
				break // odd ranks stay open: no done item
			}
			if err := open.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases["open"] = open
	inc := open.Clone()
	inc.SealRanks([]int32{1, 7}, func(r int32) string { return fmt.Sprintf("rank timeout %d", r) })
	cases["incomplete"] = inc
	all := profile.New("job1")
	for r := int32(0); r < 6; r++ {
		for _, it := range proftest.Rank("job1", 4, s, r, 1) {
			if err := all.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases["sealed"] = all
	return cases
}

// TestEncodeMatchesReference checks the parallel encoder writes the bytes
// the sequential reference encoder writes, on the sequential path and with
// thresholds lowered so every table is split, bucket-sorted and written in
// many chunks.
func TestEncodeMatchesReference(t *testing.T) {
	for _, par := range []bool{false, true} {
		if par {
			defer profile.SetParallel(4, 3)()
		}
		for name, p := range equivCases(t, proftest.Small) {
			want := refEncode(p)
			if got := p.Encode(); !bytes.Equal(got, want) {
				t.Fatalf("parallel=%v %s: encoding differs from the reference (%d vs %d bytes)", par, name, len(got), len(want))
			}
			q, err := profile.Decode(want)
			if err != nil {
				t.Fatalf("parallel=%v %s: %v", par, name, err)
			}
			if got := q.Encode(); !bytes.Equal(got, want) {
				t.Fatalf("parallel=%v %s: decode and encode changed the bytes", par, name)
			}
		}
	}
}

// TestEncodeMatchesReferenceRealistic does the same on a leaf's state of
// realistic ranks with the default thresholds (tables large enough for the
// parallel paths).
func TestEncodeMatchesReferenceRealistic(t *testing.T) {
	if testing.Short() {
		t.Skip("realistic ranks take seconds to generate")
	}
	p := profile.New("job1")
	for r := int32(0); r < 2; r++ {
		for _, it := range proftest.Rank("job1", 1, proftest.Realistic, r, 1) {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := refEncode(p)
	if got := p.Encode(); !bytes.Equal(got, want) {
		t.Fatalf("encoding differs from the reference (%d vs %d bytes)", len(got), len(want))
	}
	q, err := profile.Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(q.Encode(), want) {
		t.Fatal("decode and encode changed the bytes")
	}
}

// TestEncodeCommittedProfile decodes the committed 64-rank H100 run and
// checks it encodes back to the file's bytes, or, if the file is of an
// older version (2: without RankInfo.ReuseP), that the profile written
// as the current version reads back the same and encodes to the same
// bytes again.
func TestEncodeCommittedProfile(t *testing.T) {
	const path = "../testdata/runs/h100-mpi64/profile.gpuprof"
	p, err := profile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	want, err := zr.DecodeAll(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Encode()
	if v, n := binary.Uvarint(want[4:]); n > 0 && v < 3 {
		q, err := profile.Decode(got)
		if err != nil {
			t.Fatal(err)
		}
		if q.String() != p.String() {
			t.Fatalf("the version %d profile changed when written as the current version", v)
		}
		want = q.Encode()
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding differs from the file's (%d vs %d bytes)", len(got), len(want))
	}
	if len(p.Ranks) != 64 {
		t.Fatalf("%d ranks, want 64", len(p.Ranks))
	}
}
