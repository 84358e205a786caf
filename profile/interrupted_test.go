package profile

import (
	"strings"
	"testing"
)

// The interruption mark survives encoding and merges in any order.
func TestInterruptedRoundTripAndMerge(t *testing.T) {
	a, b := New("j"), New("j")
	a.Interrupted, b.Interrupted = "SIGTERM", "SIGINT"
	if err := a.AsItem(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.AsItem(1, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Profile{a, b} {
		q, err := Decode(p.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if q.Interrupted != p.Interrupted || !strings.Contains(q.String(), "interrupted: "+p.Interrupted) {
			t.Fatalf("decoded %q, want %q", q.Interrupted, p.Interrupted)
		}
	}
	ab, ba := New("j"), New("j")
	for _, m := range []struct {
		into *Profile
		from []*Profile
	}{{ab, []*Profile{a, b}}, {ba, []*Profile{b, a}}} {
		for _, p := range m.from {
			if err := m.into.Merge(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ab.Interrupted != "SIGINT+SIGTERM" || ab.Interrupted != ba.Interrupted {
		t.Fatalf("merged marks %q and %q", ab.Interrupted, ba.Interrupted)
	}
}

// A sketch of hashed values keeps counts and distinctness but no range,
// and never cuts a hash to the unit's width.
func TestHashedSketch(t *testing.T) {
	s := NewValueSketch(ValHashed, 8)
	s.AddN(0x1234_5678_9abc_def0, 3)
	s.AddN(0xff00_0000_0000_00f0, 1) // the same low byte as no other
	if s.Total != 4 || len(s.Top) != 2 || s.Min != 0 || s.Max != 0 {
		t.Fatalf("hashed sketch %+v", s)
	}
	if v, c := s.Dominant(); v != 0x1234_5678_9abc_def0 || c != 3 {
		t.Fatalf("dominant %#x x%d", v, c)
	}
	o := NewValueSketch(ValHashed, 8)
	o.AddN(0xff00_0000_0000_00f0, 5)
	s.Merge(o)
	if s.Total != 9 || s.Min != 0 || s.Max != 0 || s.Distinct() != 2 {
		t.Fatalf("merged hashed sketch %+v", s)
	}
}
