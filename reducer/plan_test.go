package reducer

import (
	"bytes"
	"strings"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/chunk"
	"gpuprof/profile/proftest"
)

func TestPlanShapes(t *testing.T) {
	for _, tc := range []struct {
		ranks, k int
		levels   []int
		str      string
	}{
		{64, 8, []int{8, 1}, "64 ranks, fan-in 8: 8 leaves + 1 root"},
		{8, 4, []int{2, 1}, "8 ranks, fan-in 4: 2 leaves + 1 root"},
		{4, 8, []int{1}, "4 ranks, fan-in 8: 1 root"},
		{4096, 16, []int{256, 16, 1}, "4096 ranks, fan-in 16: 256 leaves + 16 nodes at level 1 + 1 root"},
		{4096, 8, []int{512, 64, 8, 1}, ""},
		{100, 8, []int{13, 2, 1}, ""},
	} {
		tr, err := PlanN(tc.ranks, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, l := range tr.Levels {
			got = append(got, len(l))
		}
		if len(got) != len(tc.levels) {
			t.Fatalf("%d ranks k=%d: levels %v, want %v", tc.ranks, tc.k, got, tc.levels)
		}
		for i := range got {
			if got[i] != tc.levels[i] {
				t.Fatalf("%d ranks k=%d: levels %v, want %v", tc.ranks, tc.k, got, tc.levels)
			}
		}
		if tc.str != "" && tr.String() != tc.str {
			t.Errorf("String() = %q, want %q", tr.String(), tc.str)
		}
		// Every rank in exactly one leaf; groups balanced; parents and
		// children agree; the root holds every rank.
		seen := map[int32]int{}
		for li, l := range tr.Levels {
			lo, hi := 1<<30, 0
			for _, n := range l {
				if n.Leaf() {
					for _, r := range n.Ranks {
						seen[r]++
					}
					lo, hi = min(lo, len(n.Ranks)), max(hi, len(n.Ranks))
				} else {
					lo, hi = min(lo, len(n.Children)), max(hi, len(n.Children))
					for _, c := range n.Children {
						cn, err := tr.Node(c)
						if err != nil || cn.Parent != n.Name {
							t.Fatalf("child %v of %v: parent %v, %v", c, n.Name, cn.Parent, err)
						}
					}
				}
				if hi > tc.k {
					t.Fatalf("node %v has more than %d inputs", n.Name, tc.k)
				}
			}
			if hi-lo > 1 {
				t.Errorf("level %d unbalanced: %d..%d inputs", li, lo, hi)
			}
		}
		if len(seen) != tc.ranks || len(tr.Root().Ranks) != tc.ranks || !tr.Root().Root {
			t.Fatalf("%d ranks planned, root holds %d", len(seen), len(tr.Root().Ranks))
		}
	}
	for _, bad := range []struct {
		ranks []int32
		k     int
		want  string
	}{
		{[]int32{0, 1}, 1, "fan-in 1"},
		{nil, 8, "no ranks"},
		{[]int32{3, 1, 3}, 8, "rank 3 listed twice"},
		{[]int32{-2}, 8, "rank -2 is negative"},
	} {
		if _, err := Plan(bad.ranks, bad.k); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Plan(%v, %d) = %v, want %q", bad.ranks, bad.k, err, bad.want)
		}
	}
	tr, _ := PlanN(64, 8)
	if _, err := tr.Node(NodeName{2, 0}); err == nil {
		t.Error("node 2.0 found in a two-level plan")
	}
	for s, ok := range map[string]bool{"0.3": true, "1.0": true, "x": false, "1.": false, "-1.0": false, "1.2.3": false} {
		n, err := ParseNodeName(s)
		if (err == nil) != ok || ok && n.String() != s {
			t.Errorf("ParseNodeName(%q) = %v, %v", s, n, err)
		}
	}
}

func TestPartialCodec(t *testing.T) {
	p := profile.New("job")
	for r := int32(0); r < 4; r++ {
		for _, it := range proftest.Rank("job", 1, proftest.Small, r, 2) {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := partialHeader{Envelope: chunk.Envelope{Job: "job"}, Level: 1, Node: 3, PVer: 7, Flags: flagFinished, Clock: 123, LastDone: 456, Ranks: 4, Sealed: 4, Batches: 12, BytesIn: 999}
	chunks, h, err := encodePartial(h, p, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 {
		t.Fatalf("%d chunks; want several", len(chunks))
	}
	// Chunks in any order, with a repeat.
	var a *partialAsm
	order := append([]int{len(chunks) - 1, 0}, make([]int, 0)...)
	for i := 1; i < len(chunks)-1; i++ {
		order = append(order, i)
	}
	order = append(order, 0)
	var complete bool
	for _, i := range order {
		ch, err := parsePartialHeader(chunks[i])
		if err != nil {
			t.Fatal(err)
		}
		if a == nil {
			a = newPartialAsm(ch)
		}
		if ch.msgID() == h.msgID() && i != 0 {
			t.Fatal("chunks share a message id")
		}
		if complete, err = a.add(ch, chunks[i], uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if !complete {
		t.Fatal("not complete")
	}
	body, err := a.body()
	if err != nil {
		t.Fatal(err)
	}
	q, err := decodePartial(a.h, body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(q.Encode(), p.Encode()) {
		t.Fatal("partial round trip changed the profile")
	}
	if got := a.h; got.PVer != 7 || got.Clock != 123 || got.LastDone != 456 || got.Items != p.MergedItems() || !got.finished() || got.Batches != 12 {
		t.Fatalf("header %+v", got)
	}
	// Bad chunks: each error names the node and version.
	bad := append([]byte(nil), chunks[0]...)
	bad[len(bad)-3] ^= 1
	b := newPartialAsm(a.h)
	for i, c := range chunks {
		if i == 0 {
			c = bad
		}
		ch, _ := parsePartialHeader(c)
		b.add(ch, c, 0)
	}
	if _, err := b.body(); err == nil || !strings.Contains(err.Error(), "node 1.3 version 7") || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("corrupt body: %v", err)
	}
	for _, c := range [][]byte{nil, []byte("GPR1"), append([]byte("XXXX"), chunks[0][4:]...), chunks[0][:partialFixed+1]} {
		if _, err := parsePartialHeader(c); err == nil && len(c) < partialFixed+3 {
			t.Errorf("header of %d bytes accepted", len(c))
		}
	}
	other := proftest.Item("job", 1, proftest.Small, 9, 0, false, 0)
	oc, oh, _ := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "job"}, Level: 1, Node: 3, PVer: 8}, other, 1<<20)
	ohp, _ := parsePartialHeader(oc[0])
	if _, err := a.add(ohp, oc[0], 0); err == nil || oh.PVer != 8 {
		t.Error("a chunk of another version was accepted")
	}
}

// FuzzPartial: no input makes the partial decoder panic.
func FuzzPartial(f *testing.F) {
	p := proftest.Item("job", 1, proftest.Small, 2, 0, false, 0)
	chunks, _, _ := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "job"}, Level: 1, Node: 1, PVer: 3}, p, 1<<20)
	f.Add(chunks[0])
	f.Add([]byte("GPR1"))
	several, _, _ := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "job"}, Level: 1, Node: 1, PVer: 3}, p, 600)
	f.Add(several[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parsePartialHeader(b)
		if err != nil {
			return
		}
		a := newPartialAsm(h)
		complete, err := a.add(h, b, 1)
		if err != nil || !complete {
			return
		}
		body, err := a.body()
		if err != nil {
			return
		}
		if q, err := decodePartial(h, body); err == nil {
			if err := q.Validate(); err != nil {
				t.Fatalf("decoded partial fails validation: %v", err)
			}
		}
	})
}
