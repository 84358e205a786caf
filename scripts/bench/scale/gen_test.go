package main

import (
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/proftest"
)

// Derived ranks are valid items that share the SPMD contexts, keep their
// rank-specific kernels apart (or by class with variants), and carry
// values of their own.
func TestRankGen(t *testing.T) {
	s := shapes["medium"]
	s.RankUnique = 20
	for _, variants := range []int{0, 4} {
		g := newRankGen("job", s, variants)
		a, b, a2 := g.item(3), g.item(4), g.item(3+4)
		for _, q := range []*profile.Profile{a, b, a2} {
			if err := q.Validate(); err != nil {
				t.Fatal(err)
			}
		}
		shared, only := 0, 0
		for id := range a.Nodes {
			if _, ok := b.Nodes[id]; ok {
				shared++
			} else {
				only++
			}
		}
		if only == 0 || shared < 2*only {
			t.Fatalf("variants %d: %d contexts shared by ranks 3 and 4, %d of rank 3 only; want mostly shared, some rank-specific", variants, shared, only)
		}
		sameAs7 := 0
		for id := range a.Nodes {
			if _, ok := a2.Nodes[id]; ok {
				sameAs7++
			}
		}
		if variants > 0 && sameAs7 != len(a.Nodes) {
			t.Fatalf("ranks 3 and 7 are of one class of %d but share %d of %d contexts", variants, sameAs7, len(a.Nodes))
		}
		if variants == 0 && sameAs7 == len(a.Nodes) {
			t.Fatal("ranks 3 and 7 share every context without classes")
		}
		if len(a.Nodes) != len(g.base.Nodes) || len(a.Temporal) != len(g.base.Temporal) || len(a.PCs) != len(g.base.PCs) {
			t.Fatalf("rank 3 has %d nodes, %d pairs, %d pcs; the template %d, %d, %d", len(a.Nodes), len(a.Temporal), len(a.PCs), len(g.base.Nodes), len(g.base.Temporal), len(g.base.PCs))
		}
		diff := 0
		for id, n := range a.Nodes {
			if m, ok := b.Nodes[id]; ok && n.Metrics.Get(profile.MemLoads) != m.Metrics.Get(profile.MemLoads) {
				diff++
			}
		}
		if diff < shared/4 {
			t.Fatalf("only %d of %d shared contexts have different loads on ranks 3 and 4", diff, shared)
		}
		// Merged with its done item, a derived rank seals like a generated one.
		m := profile.New("job")
		for _, it := range []*profile.Profile{a, proftest.Item("job", 1, s, 3, 1, true, 1)} {
			if err := m.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
		if !m.Sealed(3) {
			t.Fatal("rank 3 not sealed after its item and done item")
		}
	}
}

// BenchmarkRankItem is a simulator's cost per realistic rank: deriving its
// item from the template and encoding it as a batch (the rest of a
// simulator's time is publishing).
func BenchmarkRankItem(b *testing.B) {
	g := newRankGen("job", proftest.Realistic, 0)
	r := int32(0)
	for b.Loop() {
		if _, err := profile.EncodeBatch(g.item(r), false, 8<<20); err != nil {
			b.Fatal(err)
		}
		r++
	}
}

// BenchmarkRankItemGenerated is the same with every rank generated from
// scratch, as the simulators did before.
func BenchmarkRankItemGenerated(b *testing.B) {
	r := int32(0)
	for b.Loop() {
		if _, err := profile.EncodeBatch(proftest.Item("job", 1, proftest.Realistic, r, 0, false, 0), false, 8<<20); err != nil {
			b.Fatal(err)
		}
		r++
	}
}
