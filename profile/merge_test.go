package profile_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// items returns every item of a small job: 4 ranks, 3 data batches each.
func items(seed uint64) []*profile.Profile {
	var all []*profile.Profile
	for r := int32(0); r < 4; r++ {
		all = append(all, proftest.Rank("job1", seed, proftest.Small, r, 3)...)
	}
	return all
}

// mergeTree merges items in the given order, grouping them by a random
// binary tree, and returns the result.
func mergeTree(t testing.TB, rng *rand.Rand, ps []*profile.Profile) *profile.Profile {
	t.Helper()
	if len(ps) == 1 {
		return ps[0].Clone()
	}
	cut := 1 + rng.IntN(len(ps)-1)
	a := mergeTree(t, rng, ps[:cut])
	b := mergeTree(t, rng, ps[cut:])
	if err := a.Merge(b); err != nil {
		t.Fatalf("merge: %v", err)
	}
	return a
}

func TestMergeAnyGroupingAndOrder(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		all := items(seed)
		want := profile.New("job1")
		for _, p := range all {
			if err := want.Merge(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := want.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := want.SealedRanks(); got != 4 {
			t.Fatalf("sealed ranks = %d, want 4", got)
		}
		wantEnc := want.Encode()
		rng := rand.New(rand.NewPCG(seed, 99))
		for trial := 0; trial < 10; trial++ {
			perm := append([]*profile.Profile(nil), all...)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			got := mergeTree(t, rng, perm)
			if !bytes.Equal(got.Encode(), wantEnc) {
				t.Fatalf("seed %d trial %d: merge in another grouping and order differs:\n%s\nwant:\n%s", seed, trial, got, want)
			}
		}
	}
}

func TestMergeIdempotent(t *testing.T) {
	all := items(3)
	p := profile.New("job1")
	for _, it := range all {
		if err := p.Merge(it); err != nil {
			t.Fatal(err)
		}
	}
	before := p.Encode()
	for _, it := range all {
		if err := p.Merge(it); err != nil {
			t.Fatalf("re-merging an item: %v", err)
		}
	}
	if !bytes.Equal(before, p.Encode()) {
		t.Fatal("merging items twice changed the profile")
	}
	// A whole sub-profile already contained also changes nothing.
	part := profile.New("job1")
	for _, it := range all[:5] {
		part.Merge(it)
	}
	if err := p.Merge(part); err != nil || !bytes.Equal(before, p.Encode()) {
		t.Fatalf("merging a contained sub-profile: err=%v changed=%v", err, !bytes.Equal(before, p.Encode()))
	}
}

func TestMergePartialOverlapRefused(t *testing.T) {
	all := items(4)
	a, b := profile.New("job1"), profile.New("job1")
	a.Merge(all[0])
	a.Merge(all[1])
	b.Merge(all[1])
	b.Merge(all[2])
	before := a.Encode()
	var oe *profile.OverlapError
	if err := a.Merge(b); !errors.As(err, &oe) || oe.Rank != 0 {
		t.Fatalf("err = %v, want an overlap error on rank 0", err)
	}
	if !bytes.Equal(before, a.Encode()) {
		t.Fatal("a refused merge changed the profile")
	}
}

func TestMergeOtherJobRefused(t *testing.T) {
	a := proftest.Item("jobA", 1, proftest.Small, 0, 0, false, 0)
	b := proftest.Item("jobB", 1, proftest.Small, 1, 0, false, 0)
	if err := a.Merge(b); err == nil {
		t.Fatal("merged a batch of another job")
	}
}

func TestCrossRankSummaries(t *testing.T) {
	p := profile.New("j")
	// Rank r spends 100*(r+1) ns in one kernel; every rank sends one data
	// item and its done item.
	for r := int32(0); r < 4; r++ {
		it := profile.New("j")
		k := it.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"}, profile.Frame{Kind: profile.KindKernel, Function: "k"})
		it.Add(k.ID, profile.GPUTime, uint64(100*(r+1)))
		if err := it.AsItem(r, 0); err != nil {
			t.Fatal(err)
		}
		done := profile.New("j")
		done.Rank(r).Batches = 1
		done.AsItem(r, 1)
		p.Merge(it)
		if r != 2 {
			p.Merge(done)
		}
	}
	k := profile.ChildID(profile.ChildID(profile.RootID, profile.Frame{Kind: profile.KindHostFrame, Function: "main"}), profile.Frame{Kind: profile.KindKernel, Function: "k"})
	s := p.Summaries[k].Get(profile.GPUTime)
	if s.N != 3 || s.Min != 100 || s.ArgMin != 0 || s.Max != 400 || s.ArgMax != 3 || s.Sum != 700 {
		t.Fatalf("summary over sealed ranks 0,1,3 = %+v", s)
	}
	if got := p.SealAll("no done message"); len(got) != 1 || got[0] != 2 {
		t.Fatalf("SealAll sealed %v, want [2]", got)
	}
	s = p.Summaries[k].Get(profile.GPUTime)
	// 100,200,300,400: mean 250, M2 = 150^2+50^2+50^2+150^2 = 50000.
	if s.N != 4 || s.Mean() != 250 || s.M2() != 50000 {
		t.Fatalf("summary over 4 ranks = %+v mean %v M2 %v", s, s.Mean(), s.M2())
	}
	if p.Ranks[2].Incomplete == "" {
		t.Fatal("rank 2 not marked incomplete")
	}
	if got := p.Nodes[k].Metrics.Get(profile.GPUTime); got != 1000 {
		t.Fatalf("total = %d, want 1000", got)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	p := profile.New("job1")
	for _, it := range items(5)[:7] {
		p.Merge(it)
	}
	q, err := profile.Decode(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if p.String() != q.String() || !bytes.Equal(p.Encode(), q.Encode()) {
		t.Fatal("decode(encode(p)) differs from p")
	}
}

func TestValidateNamesField(t *testing.T) {
	p := proftest.Item("j", 1, proftest.Small, 0, 0, false, 0)
	for id, n := range p.Nodes {
		if id != profile.RootID && n.Frame.Kind == profile.KindLine {
			n.Parent = 12345
			break
		}
	}
	err := p.Validate()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(".Parent: 0x3039 not in the profile")) {
		t.Fatalf("err = %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	p := profile.New("job1")
	for _, it := range items(6)[:6] {
		p.Merge(it)
	}
	f.Add(p.Encode())
	f.Add(proftest.Item("j", 2, proftest.Small, 1, 0, false, 0).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := profile.Decode(b)
		if err != nil {
			return
		}
		// What decodes must re-encode to the same bytes (the encoding is canonical)
		// unless the input was not in canonical order.
		q2, err := profile.Decode(q.Encode())
		if err != nil {
			t.Fatalf("re-decoding a decoded profile: %v", err)
		}
		if !bytes.Equal(q2.Encode(), q.Encode()) {
			t.Fatal("encoding not stable")
		}
	})
}

func TestWriteReadFile(t *testing.T) {
	p := profile.New("job1")
	for _, it := range items(8)[:6] {
		p.Merge(it)
	}
	dir := t.TempDir()
	if err := profile.WriteFile(dir+"/"+profile.FileName, p); err != nil {
		t.Fatal(err)
	}
	q, err := profile.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(q.Encode(), p.Encode()) {
		t.Fatal("file round trip changed the profile")
	}
	if _, err := profile.ReadFile(dir + "/nothing"); err == nil {
		t.Fatal("missing file read")
	}
}

// DropMetrics removes the chosen metrics from nodes, open and sealed
// per-rank values and cross-rank summaries, and keeps the others.
func TestDropMetrics(t *testing.T) {
	hist := profile.Metric("gpu.time_hist.40")
	p := profile.New("j")
	for r := int32(0); r < 2; r++ {
		it := profile.New("j")
		k := it.Path(profile.Frame{Kind: profile.KindHostFrame, Function: "main"}, profile.Frame{Kind: profile.KindKernel, Function: "k"})
		it.Add(k.ID, profile.GPUTime, 100)
		it.Add(k.ID, hist, 1)
		it.Add(k.ID, profile.GPULaunches, 1)
		if err := it.AsItem(r, 0); err != nil {
			t.Fatal(err)
		}
		done := profile.New("j")
		done.Rank(r).Batches = 1
		done.AsItem(r, 1)
		p.Merge(it)
		if r == 0 {
			p.Merge(done) // rank 0 sealed (summaries), rank 1 open
		}
	}
	p.DropMetrics(func(m profile.MetricID) bool { return m == profile.GPUTime || m == hist })
	k := profile.ChildID(profile.ChildID(profile.RootID, profile.Frame{Kind: profile.KindHostFrame, Function: "main"}), profile.Frame{Kind: profile.KindKernel, Function: "k"})
	if vs := p.Nodes[k].Metrics; vs.Get(profile.GPUTime) != 0 || vs.Get(hist) != 0 || vs.Get(profile.GPULaunches) != 2 {
		t.Fatalf("node metrics after drop: %v", vs)
	}
	checked := 0
	for _, m := range []map[int32]map[profile.NodeID]profile.Values{p.Open, p.PerRank} {
		for r, vals := range m {
			if v := vals[k]; v.Get(profile.GPUTime) != 0 || v.Get(hist) != 0 || v.Get(profile.GPULaunches) != 1 {
				t.Fatalf("rank %d values after drop: %v", r, v)
			}
			checked++
		}
	}
	if checked != 3 { // rank 1's open values, both ranks' per-rank values
		t.Fatalf("%d per-rank value sets, want 3", checked)
	}
	if ss := p.Summaries[k]; ss.Get(profile.GPUTime).N != 0 || ss.Get(profile.GPULaunches).N != 1 {
		t.Fatalf("summaries after drop: %+v", ss)
	}
}
