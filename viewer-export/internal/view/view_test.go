package view

import (
	"math"
	"testing"

	"gpuprof/profile"
)

func TestFormats(t *testing.T) {
	f32 := profile.NewValueSketch(profile.ValFloat, 32)
	if got := Value(f32, uint64(math.Float32bits(1.0000002))); got != "1.0000002" {
		t.Errorf("float32 value %q", got)
	}
	i32 := profile.NewValueSketch(profile.ValInt, 32)
	if got := Value(i32, 0xffffffff); got != "-1" {
		t.Errorf("int32 value %q", got)
	}
	if got := Value(nil, 255); got != "0xff" {
		t.Errorf("raw value %q", got)
	}
	for _, c := range []struct{ got, want string }{
		{Duration(1500), "1.5 us"}, {Duration(2.5e6), "2.50 ms"}, {Duration(3e9), "3.00 s"}, {Duration(12), "12 ns"},
		{Count(12345), "12.3k"}, {Count(999), "999"}, {Count(2.5e6), "2.5M"},
		{Bytes(16 << 20), "16.0 MiB"}, {Bytes(100), "100 B"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

func TestTables(t *testing.T) {
	p := profile.New("j")
	host := profile.Frame{Kind: profile.KindHostFrame, Module: "/bin/a", Function: "main", File: "m.cc", Line: 3}
	kf := profile.Frame{Kind: profile.KindKernel, Module: "00000000000000aa", Function: "_Z1kv"}
	for r := int32(0); r < 4; r++ {
		it := profile.New("j")
		k := it.Path(host, kf)
		it.Add(k.ID, profile.GPUTime, uint64(100*(1+r)))
		if err := it.AsItem(r, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.Merge(it); err != nil {
			t.Fatal(err)
		}
	}
	ks := Kernels(p)
	if len(ks) != 1 || ks[0].Name != "k" || ks[0].Time != 1000 || ks[0].Caller != "main (m.cc:3)" {
		t.Fatalf("kernels %+v", ks)
	}
	im := ks[0].Imbalance
	if im.Min != 100 || im.ArgMin != 0 || im.Max != 400 || im.ArgMax != 3 || im.Mean != 250 || im.Ratio() != 1.6 {
		t.Errorf("imbalance %+v", im)
	}
	pv := ProvenanceOf(p)
	if pv.Ranks != 4 || len(pv.Incomplete) != 4 {
		t.Errorf("provenance %+v: ranks without their done item are incomplete", pv)
	}
}
