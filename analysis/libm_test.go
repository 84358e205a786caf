package analysis

import (
	"os"
	"testing"

	"gpuprof/sass"
)

// The conversions of libdevice's range reductions are recognised by
// their constants, in H100 listings where nvcc's line table puts them on
// the caller's line, and the program's own conversions are not.
func TestLibmConversions(t *testing.T) {
	for _, c := range []struct {
		listing string
		fn      string
		libm    []uint64 // offsets of the library's conversions
		user    []uint64 // offsets of the program's own
	}{
		// sinf inlined in a loop: fast path (F2I, I2FP) and Payne-Hanek.
		{"../testdata/sass/no_gain/no_gain.sass.txt", "_Z13polish_loadedPKfS0_Pfii", []uint64{0x180, 0x190, 0x820, 0x870}, nil},
		// sinf twice, logf once, and the program's int/float/double
		// conversions beside them.
		{"../testdata/sass/cflow/c.sm90.sass.txt", "_Z2swPKiPfi", []uint64{0x220, 0x230, 0x5b0, 0x5f0, 0xb70, 0xb80, 0xf00, 0xf40, 0x11a0}, []uint64{0x840}},
	} {
		b, err := os.ReadFile(c.listing)
		if err != nil {
			t.Fatal(err)
		}
		m, err := sass.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		f := m.Func(c.fn)
		if f == nil {
			t.Fatalf("%s: no function %s", c.listing, c.fn)
		}
		marked := libmConversions(f)
		want := map[uint64]bool{}
		for _, o := range c.libm {
			want[o] = true
		}
		for _, o := range c.user {
			want[o] = false
		}
		for i := range f.Insts {
			in := &f.Insts[i]
			if in.Class != sass.ClassConvert {
				if marked[i] {
					t.Errorf("%s %#x %s: not a conversion, marked", c.fn, in.Offset, in.Opcode)
				}
				continue
			}
			w, listed := want[in.Offset]
			if !listed {
				continue
			}
			if marked[i] != w {
				t.Errorf("%s %#x %s: library %v, want %v", c.fn, in.Offset, in.Opcode, marked[i], w)
			}
			delete(want, in.Offset)
		}
		for o := range want {
			t.Errorf("%s: no conversion at %#x", c.fn, o)
		}
		// The static check then has nothing left to say about no_gain.
		if c.user == nil {
			if as := conversions(codeOf(m, f)); len(as) != 0 {
				t.Errorf("%s: conversion findings %+v", c.fn, as)
			}
		}
	}
}
