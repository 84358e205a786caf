package sass

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// exercise runs every analysis on a module and checks that its encoding
// decodes to a module that encodes the same way.
func exercise(t *testing.T, m *Module) {
	for _, f := range m.Functions {
		g := f.CFG()
		for b := range g.Blocks {
			g.LoopNest(b)
		}
		du := f.DefUse()
		for i := range f.Insts {
			du.Producers(i)
		}
		f.AccessKinds()
	}
	s := m.Structure()
	s.WriteText(io.Discard, true)
	for _, f := range m.Functions {
		for i := range f.Insts {
			s.Lookup(f.Name, f.Insts[i].Offset-f.Start)
		}
	}
	enc := m.Encode()
	d, err := Decode(enc)
	if err != nil {
		t.Fatalf("a parsed module does not decode: %v", err)
	}
	if !bytes.Equal(d.Encode(), enc) {
		t.Fatal("re-encoding differs")
	}
}

// fuzzSeeds are the real samples, the large ones cut into their sections:
// the mutator is slow on half-megabyte inputs.
func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, s := range []string{"probe/k.sass.txt", "probe/k.hex.txt", "probe/k.full.txt", "probe/k.sm80.sass.txt",
		"probe/k.sm100.hex.txt", "probe/k.sm120.sass.txt", "hpctoolkit-loops/loops.sass.txt"} {
		b, err := os.ReadFile(td + s)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, s := range []string{"cflow/c.sm90.sass.txt", "cflow/c.sm100.hex.txt"} {
		b, err := os.ReadFile(td + s)
		if err != nil {
			f.Fatal(err)
		}
		for _, sec := range bytes.Split(b, []byte("\n//---")) {
			if len(sec) < 64<<10 {
				seeds = append(seeds, append([]byte("//---"), sec...))
			}
		}
	}
	return seeds
}

func FuzzParse(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	f.Add([]byte(".section .text.f,\"ax\",@progbits\n.type f,@function\nf:\n/*0000*/ @P0 BRA `(.L_x_1) ;\n.L_x_1:\n/*0010*/ EXIT ;\n"))
	f.Add([]byte("/*0000*/ BRX R4 -0x10 (*\"BRANCH_TARGETS .L_x_1,.L_x_2\"*);\n"))
	f.Add([]byte(".section .text.f,\"ax\",@progbits\n.type f,@function\nf:\n/*1410*/ UTMALDG.4D [UR32], [UR6], desc[UR12] ;\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		exercise(t, m)
	})
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"probe/k.hex.txt", "probe/k.sm80.sass.txt", "hpctoolkit-loops/loops.hex.txt"} {
		b, err := os.ReadFile(td + s)
		if err != nil {
			f.Fatal(err)
		}
		m, err := Parse(b)
		if err != nil {
			f.Fatal(err)
		}
		enc := m.Encode()
		f.Add(enc)
		f.Add(enc[:len(enc)/2])
	}
	f.Add([]byte(encMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		exercise(t, m)
	})
}

func FuzzParseCubin(f *testing.F) {
	for _, s := range []string{"probe/k.sm90.cubin", "probe/k.sm80.cubin", "hpctoolkit-loops/loops.gpubin", "spill/spill.cubin"} {
		b, err := os.ReadFile(td + s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCubin(b)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		exercise(t, c.Module())
	})
}

// FuzzSplitListing: cutting any text into a header and sections loses
// nothing, and joining the pieces never panics.
func FuzzSplitListing(f *testing.F) {
	for _, name := range []string{"cflow/c.sm90.hex.txt", "probe/k.sass.txt"} {
		b, err := os.ReadFile(td + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 6000)])
	}
	f.Add([]byte(".section\n.section .text.a,\"ax\"\n//----- x\n\t.section\t.text.b\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		header, secs := SplitListing(text)
		whole := append([]byte(nil), header...)
		for _, s := range secs {
			whole = append(whole, s.Text...)
		}
		if string(whole) != string(text) {
			t.Fatalf("the pieces do not add up to the text")
		}
		JoinListing(header, secs)
	})
}
