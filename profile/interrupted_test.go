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

// Profiles of versions 4 and 5 still decode: a version-5 encoding is the
// current one without a rank's spatial sampling level (found as the one
// byte that changes with it), a version-4 one also without the
// interruption mark's string after the synthetic flag.
func TestDecodeVersions4And5(t *testing.T) {
	p := New("v4")
	if err := p.AsItem(2, 0); err != nil {
		t.Fatal(err)
	}
	ri := p.Rank(2)
	ri.Device, ri.PCSampling = "GPU-1234", "sampled"
	ri.Props.SMs, ri.Props.MemBytes = 132, 80<<30
	b := p.Encode()
	ri.SpatialLevel = 1
	b1 := p.Encode()
	ri.SpatialLevel = 0
	lvl := -1
	for i := range b {
		if b[i] != b1[i] {
			lvl = i
			break
		}
	}
	if len(b) != len(b1) || lvl < 0 || b[lvl] != 0 || b1[lvl] != 1 {
		t.Fatalf("the spatial level is not one byte of the encoding (%d, %d bytes)", len(b), len(b1))
	}
	v5 := append(append([]byte{}, b[:lvl]...), b[lvl+1:]...)
	v5[len(profileMagic)] = 5
	// "GPPF", version, job (length, bytes), synthetic flag, then the mark
	// (an empty string: one zero byte).
	at := len(profileMagic) + 1 + 1 + len(p.Job) + 1
	if b[len(profileMagic)] != profileVersion || b[at] != 0 {
		t.Fatalf("unexpected header % x", b[:at+1])
	}
	v4 := append(append([]byte{}, v5[:at]...), v5[at+1:]...)
	v4[len(profileMagic)] = 4
	for v, enc := range map[int][]byte{4: v4, 5: v5} {
		q, err := Decode(enc)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if q.Interrupted != "" || q.String() != p.String() {
			t.Fatalf("version %d decoded as\n%s\nwant\n%s", v, q.String(), p.String())
		}
		if got := q.Ranks[2]; got.Device != "GPU-1234" || got.Props.SMs != 132 || got.SpatialLevel != 0 {
			t.Fatalf("version %d, rank 2: %+v", v, got)
		}
	}
}
