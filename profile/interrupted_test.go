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

// Profiles of version 4 (main's device fields, no interruption mark) still
// decode: a version-4 encoding is the current one without the mark's
// string after the synthetic flag.
func TestDecodeVersion4(t *testing.T) {
	p := New("v4")
	if err := p.AsItem(2, 0); err != nil {
		t.Fatal(err)
	}
	ri := p.Rank(2)
	ri.Device, ri.PCSampling = "GPU-1234", "sampled"
	ri.Props.SMs, ri.Props.MemBytes = 132, 80<<30
	b := p.Encode()
	// "GPPF", version, job (length, bytes), synthetic flag, then the mark
	// (an empty string: one zero byte).
	at := len(profileMagic) + 1 + 1 + len(p.Job) + 1
	if b[len(profileMagic)] != profileVersion || b[at] != 0 {
		t.Fatalf("unexpected header % x", b[:at+1])
	}
	v4 := append(append([]byte{}, b[:at]...), b[at+1:]...)
	v4[len(profileMagic)] = 4
	q, err := Decode(v4)
	if err != nil {
		t.Fatal(err)
	}
	if q.Interrupted != "" || q.String() != p.String() {
		t.Fatalf("version 4 decoded as\n%s\nwant\n%s", q.String(), p.String())
	}
	if got := q.Ranks[2]; got.Device != "GPU-1234" || got.Props.SMs != 132 {
		t.Fatalf("rank 2: %+v", got)
	}
}
