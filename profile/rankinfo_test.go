package profile

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"gpuprof/profile/chunk"
)

// A rank's provenance does not depend on the order its items arrive in,
// even when its items disagree (passes run on different GPUs, a pass that
// failed).
func TestRankInfoMergeOrder(t *testing.T) {
	items := []RankInfo{
		{Rank: 3, Host: "n1", GPU: "H100", Driver: "580", CUDA: "13.0", Mode: "redundancy", Source: "captured", ExitCode: -1, Batches: -1, Records: 5, ReuseP: 4},
		{Rank: 3, Host: "n2", GPU: "H200", Driver: "580", CUDA: "13.0", Mode: "pcsampling", Source: "captured", ExitCode: 0, Batches: 2},
		{Rank: 3, Host: "n1", GPU: "H100", Mode: "redundancy", ExitCode: 7, Batches: 4, Dropped: 1},
	}
	var first RankInfo
	perms := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for k, perm := range perms {
		ri := RankInfo{Rank: 3, ExitCode: -1, Batches: -1}
		for _, i := range perm {
			it := items[i]
			ri.merge(&it)
		}
		if k == 0 {
			first = ri
			// Every field, so that one the merge drops or garbles fails.
			want := RankInfo{Rank: 3, Host: "n1+n2", GPU: "H100+H200", Driver: "580", CUDA: "13.0", Mode: "pcsampling+redundancy", Source: "captured",
				ExitCode: 7, Batches: 4, Records: 5, Dropped: 1, ReuseP: 4}
			if ri != want {
				t.Fatalf("merged %+v, want %+v", ri, want)
			}
			continue
		}
		if ri != first {
			t.Errorf("order %v: %+v, order %v gave %+v", perm, ri, perms[0], first)
		}
	}
}

// Profiles of version 1 (without SamplesDropped) still decode: the
// committed sampling study's profiles were written by it. They are files
// of WriteFile (zstd); the test needs one of version 1, and fails rather
// than pass without it.
func TestDecodeVersion1(t *testing.T) {
	const path = "../testdata/sampling/single_value.p50k10.gpuprof"
	z, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := chunk.DecompressAll(z)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !bytes.HasPrefix(b, []byte(profileMagic)) {
		t.Fatalf("%s: not a profile", path)
	}
	if v, n := binary.Uvarint(b[len(profileMagic):]); n <= 0 || v != 1 {
		t.Fatalf("%s is of version %d: this test needs a profile of version 1", path, v)
	}
	p, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	// A profile without ranks would check nothing below.
	if len(p.Ranks) == 0 {
		t.Fatalf("%s: no ranks", path)
	}
	for r, ri := range p.Ranks {
		if ri.SamplesDropped != 0 || ri.Records == 0 {
			t.Errorf("rank %d: %+v", r, ri)
		}
	}
	// Written again, it is of the current version and reads back equal.
	q, err := Decode(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if p.String() != q.String() {
		t.Error("a version 1 profile changed when written as the current version")
	}
	bad := append([]byte(profileMagic), byte(profileVersion+1))
	if _, err := Decode(bad); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("a future version: %v", err)
	}
}
