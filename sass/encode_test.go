package sass

import (
	"bytes"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
)

var samples = []string{
	"probe/k.sass.txt", "probe/k.hex.txt", "probe/k.full.txt", "probe/k.sm80.hex.txt", "probe/k.sm100.hex.txt",
	"probe/k.sm120.hex.txt", "cflow/c.sm90.sass.txt", "cflow/c.sm80.hex.txt", "cflow/c.sm90.hex.txt",
	"cflow/c.sm100.hex.txt", "cflow/c.sm120.hex.txt", "hpctoolkit-loops/loops.hex.txt",
}

// sameModule compares everything a module holds except derived analyses.
func sameModule(t *testing.T, a, b *Module) {
	t.Helper()
	if a.Arch != b.Arch || !reflect.DeepEqual(a.Files, b.Files) || !reflect.DeepEqual(a.Locations, b.Locations) {
		t.Fatalf("module header differs: %q %v vs %q %v", a.Arch, a.Files, b.Arch, b.Files)
	}
	if len(a.Functions) != len(b.Functions) {
		t.Fatalf("%d vs %d functions", len(a.Functions), len(b.Functions))
	}
	for i, f := range a.Functions {
		g := b.Functions[i]
		if f.Name != g.Name || f.Section != g.Section || f.Start != g.Start || f.End != g.End || f.Size != g.Size ||
			f.Entry != g.Entry || f.Global != g.Global || !reflect.DeepEqual(f.Labels, g.Labels) {
			t.Fatalf("function %d header differs", i)
		}
		if len(f.Insts) != len(g.Insts) {
			t.Fatalf("%s: %d vs %d instructions", f.Name, len(f.Insts), len(g.Insts))
		}
		for k := range f.Insts {
			if !reflect.DeepEqual(noNaN(f.Insts[k]), noNaN(g.Insts[k])) {
				t.Fatalf("%s: instruction %d differs:\n%+v\n%+v", f.Name, k, f.Insts[k], g.Insts[k])
			}
		}
	}
}

// noNaN makes NaN immediates comparable.
func noNaN(in Instruction) Instruction {
	ops := append([]Operand(nil), in.Operands...)
	for i := range ops {
		if ops[i].Float != ops[i].Float {
			ops[i].Float = 0
		}
	}
	in.Operands = ops
	return in
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, s := range samples {
		m := mustParse(t, s)
		enc := m.Encode()
		d, err := Decode(enc)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		sameModule(t, m, d)
		if again := d.Encode(); !bytes.Equal(again, enc) {
			t.Errorf("%s: re-encoding differs", s)
		}
		var a, b bytes.Buffer
		m.Structure().WriteText(&a, true)
		d.Structure().WriteText(&b, true)
		if a.String() != b.String() {
			t.Errorf("%s: structure differs after decoding", s)
		}
		for i, f := range m.Functions {
			if !reflect.DeepEqual(f.AccessKinds(), d.Functions[i].AccessKinds()) {
				t.Errorf("%s: %s: access kinds differ after decoding", s, f.Name)
			}
		}
	}
	// a module known from the cubin alone round-trips too
	c, err := ParseCubin(readTD(t, "cflow/c.sm90.cubin"))
	if err != nil {
		t.Fatal(err)
	}
	cm := c.Module()
	d, err := Decode(cm.Encode())
	if err != nil {
		t.Fatal(err)
	}
	sameModule(t, cm, d)
}

// TestDecodeCorrupt: every truncation and many single-byte changes of a
// real encoding give an error or a valid module, never a panic.
func TestDecodeCorrupt(t *testing.T) {
	enc := mustParse(t, "probe/k.hex.txt").Encode()
	for n := 0; n < len(enc); n++ {
		if _, err := Decode(enc[:n]); err == nil {
			t.Fatalf("truncation to %d bytes decoded", n)
		} else {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("truncation to %d: %T %v", n, err, err)
			}
		}
	}
	b := append([]byte(nil), enc...)
	step := 3
	if testing.Short() {
		step = 17
	}
	decoded := 0
	for i := 0; i < len(b); i += step {
		for _, x := range []byte{0xff, 0x80, 0x01} {
			old := b[i]
			b[i] ^= x
			if m, err := Decode(b); err == nil {
				// a valid module must be usable (checked on a sample: the
				// analyses dominate the test's time)
				if decoded++; decoded%8 == 0 {
					for _, f := range m.Functions {
						f.AccessKinds()
					}
					m.Structure()
				}
			}
			b[i] = old
		}
	}
	if _, err := Decode(append(append([]byte(nil), enc...), 0)); err == nil {
		t.Error("trailing data accepted")
	}
	bad := append([]byte(nil), enc...)
	bad[len(encMagic)-1] = 9
	if _, err := Decode(bad); err == nil {
		t.Error("unknown version accepted")
	}
}

func TestCache(t *testing.T) {
	enc := mustParse(t, "probe/k.hex.txt").Encode()
	var calls atomic.Int32
	release := make(chan struct{})
	c := NewCache(func(key string) (*Module, error) {
		calls.Add(1)
		<-release
		if key == "bad" {
			return nil, errors.New("no such module")
		}
		return Decode(enc)
	})
	var wg sync.WaitGroup
	got := make([]*Module, 16)
	for i := range got {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			m, err := c.Get("k")
			if err != nil {
				t.Error(err)
			}
			got[i] = m
		}(i)
	}
	for calls.Load() == 0 {
		// wait until one loader runs; the others must queue behind it
	}
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Errorf("loader called %d times, want 1", calls.Load())
	}
	for _, m := range got {
		if m != got[0] || m == nil {
			t.Fatal("Gets returned different modules")
		}
	}
	if _, err := c.Get("bad"); err == nil {
		t.Error("loader error lost")
	}
	if _, err := c.Get("bad"); err == nil || calls.Load() != 3 {
		t.Errorf("a failed load must not be cached (calls %d)", calls.Load())
	}
	if m, ok := c.Lookup("k"); !ok || m != got[0] {
		t.Error("Lookup")
	}
	if _, ok := c.Lookup("other"); ok {
		t.Error("Lookup of a missing key")
	}
	c.Add("x", got[0])
	if c.Len() != 2 {
		t.Errorf("Len = %d", c.Len())
	}
	c.Delete("x")
	if _, ok := c.Lookup("x"); ok || c.Len() != 1 {
		t.Error("Delete")
	}
	if _, err := NewCache(nil).Get("k"); err == nil {
		t.Error("nil loader")
	}
	if ContentHash([]byte("abc")) != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Error("ContentHash is not SHA-256")
	}
}

// TestConcurrentUse: a module is shared by the collector's goroutines;
// lazily built analyses must be safe to request concurrently (run with
// -race).
func TestConcurrentUse(t *testing.T) {
	m := mustParse(t, "cflow/c.sm90.hex.txt")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i, f := range m.Functions {
				if (i+g)%2 == 0 {
					f.AccessKinds()
				}
				for k := range f.Insts {
					if _, ok := m.Structure().Lookup(f.Name, f.Insts[k].Offset-f.Start); !ok {
						t.Errorf("%s+%#x not found", f.Name, f.Insts[k].Offset)
						return
					}
				}
				f.DefUse().Producers(0)
			}
		}(g)
	}
	wg.Wait()
}
