package sass

import (
	"errors"
	"os"
	"testing"
)

func readTD(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(td + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCubin(t *testing.T) {
	c, err := ParseCubin(readTD(t, "probe/k.sm90.cubin"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "sm_90" || c.ABIVersion != 8 {
		t.Errorf("arch %q abi %d", c.Arch, c.ABIVersion)
	}
	// The ELF symbol table agrees with nvdisasm's .size directives.
	text := mustParse(t, "probe/k.sass.txt")
	if len(c.Functions) != len(text.Functions) {
		t.Fatalf("%d functions in the cubin, %d in the text", len(c.Functions), len(text.Functions))
	}
	for _, cf := range c.Functions {
		f := text.Func(cf.Name)
		if f == nil {
			t.Errorf("%s: not in the text", cf.Name)
			continue
		}
		if cf.Section != f.Section || cf.Value != f.Start || cf.Size != f.Size || cf.End != f.End || cf.Entry != f.Entry || cf.Global != f.Global {
			t.Errorf("%s: cubin %+v vs text start %#x end %#x size %#x entry %v", cf.Name, cf, f.Start, f.End, f.Size, f.Entry)
		}
		if uint64(len(cf.Code)) != cf.End-cf.Value || cf.FileOffset == 0 {
			t.Errorf("%s: %d code bytes at file offset %#x", cf.Name, len(cf.Code), cf.FileOffset)
		}
	}
	for name, arch := range map[string]string{"probe/k.sm80.cubin": "sm_80", "probe/k.sm100.cubin": "sm_100",
		"probe/k.sm120.cubin": "sm_120", "hpctoolkit-loops/loops.gpubin": "sm_80"} {
		c, err := ParseCubin(readTD(t, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if c.Arch != arch {
			t.Errorf("%s: arch %q, want %s", name, c.Arch, arch)
		}
	}
}

// TestCubinEncodings: the code bytes in the cubin are the encodings that
// nvdisasm -hex prints, for every instruction of every function.
func TestCubinEncodings(t *testing.T) {
	for _, p := range [][2]string{
		{"probe/k.sm80.cubin", "probe/k.sm80.hex.txt"},
		{"probe/k.sm90.cubin", "probe/k.hex.txt"},
		{"probe/k.sm100.cubin", "probe/k.sm100.hex.txt"},
		{"probe/k.sm120.cubin", "probe/k.sm120.hex.txt"},
		{"cflow/c.sm90.cubin", "cflow/c.sm90.hex.txt"},
		{"cflow/c.sm100.cubin", "cflow/c.sm100.hex.txt"},
		{"hpctoolkit-loops/loops.gpubin", "hpctoolkit-loops/loops.hex.txt"},
	} {
		c, err := ParseCubin(readTD(t, p[0]))
		if err != nil {
			t.Fatal(err)
		}
		cm := c.Module()
		hm := mustParse(t, p[1])
		n := 0
		for _, f := range hm.Functions {
			cf := cm.Func(f.Name)
			if cf == nil || len(cf.Insts) != len(f.Insts) {
				t.Errorf("%s: %s missing or of another length", p[0], f.Name)
				continue
			}
			for i := range f.Insts {
				a, b := &f.Insts[i], &cf.Insts[i]
				if a.Offset != b.Offset || a.Enc != b.Enc {
					t.Errorf("%s: %s+%#x: text %#x, cubin %#x", p[0], f.Name, a.Offset, a.Enc, b.Enc)
					break
				}
				ca, _ := a.Control()
				cb, _ := b.Control()
				if ca != cb {
					t.Errorf("control bits differ")
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s: nothing compared", p[0])
		}
	}
}

// TestAttachCubin: text without -hex plus the cubin gives the control bits.
func TestAttachCubin(t *testing.T) {
	m := mustParse(t, "probe/k.sass.txt")
	c, err := ParseCubin(readTD(t, "probe/k.sm90.cubin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AttachCubin(c); err != nil {
		t.Fatal(err)
	}
	h := mustParse(t, "probe/k.hex.txt")
	for i, f := range m.Functions {
		for k := range f.Insts {
			if f.Insts[k].Enc != h.Functions[i].Insts[k].Enc || !f.Insts[k].HasEnc {
				t.Fatalf("%s+%#x: encoding differs after AttachCubin", f.Name, f.Insts[k].Offset)
			}
		}
	}
	shm := m.Func("_Z3shmPi")
	if p := shm.DefUse().Producers(shm.InstAt(0x50)); len(p) != 1 || shm.Insts[p[0]].Offset != 0x10 {
		t.Errorf("producers after AttachCubin: %v", p)
	}
	if err := m.AttachCubin(c); err == nil {
		t.Error("AttachCubin after analysis must fail")
	}
	// a cubin of another architecture does not belong to this text
	other, _ := ParseCubin(readTD(t, "probe/k.sm100.cubin"))
	var fe *FormatError
	if err := mustParse(t, "probe/k.hex.txt").AttachCubin(other); !errors.As(err, &fe) {
		t.Errorf("mismatched cubin: %v", err)
	}
}

func TestCubinModule(t *testing.T) {
	m, err := Load(readTD(t, "probe/k.sm90.cubin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Functions) != 5 || m.Arch != "sm_90" {
		t.Fatalf("%d functions arch %s", len(m.Functions), m.Arch)
	}
	f, so := m.FuncAt("_Z6reloadPKfPfii", 0x5e0)
	if f == nil || f.Name != "$_Z6reloadPKfPfii$_Z6helperPKfi" || so != 0x5e0 {
		t.Errorf("FuncAt: %v %#x", f, so)
	}
	c, ok := f.Insts[f.InstAt(0x5e0)].Control()
	if !ok || c.WriteBarrier < 0 {
		t.Errorf("the LDG at 0x5e0 sets a scoreboard: %v", c)
	}
	if c, ok := m.Structure().Lookup("_Z3shmPi", 0x10); !ok || c.Func.Name != "_Z3shmPi" {
		t.Errorf("Lookup without nvdisasm: %+v", c)
	}
	if tm, err := Load(readTD(t, "probe/k.sass.txt")); err != nil || len(tm.Functions) != 5 {
		t.Errorf("Load(text): %v", err)
	}
}

func TestParseCubinErrors(t *testing.T) {
	good := readTD(t, "probe/k.sm90.cubin")
	cases := map[string][]byte{
		"empty":     nil,
		"not elf":   []byte("hello, world"),
		"truncated": good[:100],
	}
	x86 := append([]byte(nil), good...)
	x86[18], x86[19] = 62, 0 // EM_X86_64
	cases["wrong machine"] = x86
	for name, b := range cases {
		var fe *FormatError
		if _, err := ParseCubin(b); !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *FormatError", name, err)
		}
	}
}

func TestControlBits(t *testing.T) {
	m := mustParse(t, "probe/k.hex.txt")
	f := m.Func("_Z3shmPi")
	ctl := func(off uint64) Control {
		c, ok := f.Insts[f.InstAt(off)].Control()
		if !ok {
			t.Fatalf("%#x: no control bits", off)
		}
		return c
	}
	for _, c := range []struct {
		off  uint64
		want Control
		str  string
	}{
		// S2R R7, SR_TID.X: variable latency, sets write scoreboard 0
		{0x10, Control{Stall: 7, Yield: true, WriteBarrier: 0, ReadBarrier: -1}, "B------:R-:W0:Y:S07"},
		// IMAD.SHL.U32 R0, R7.reuse, ...: waits on SB0, keeps source slot 0 in the reuse cache
		{0x50, Control{Stall: 1, Yield: true, WriteBarrier: -1, ReadBarrier: -1, WaitMask: 1, Reuse: 1}, "B0-----:R-:W-:Y:S01"},
		// ULEA waits on SB1 set by S2UR
		{0x40, Control{Stall: 1, Yield: true, WriteBarrier: -1, ReadBarrier: -1, WaitMask: 2}, "B-1----:R-:W-:Y:S01"},
		// STS: reads its sources, no result
		{0xa0, Control{Stall: 7, Yield: true, WriteBarrier: -1, ReadBarrier: -1}, "B------:R-:W-:Y:S07"},
	} {
		got := ctl(c.off)
		if got != c.want || got.String() != c.str {
			t.Errorf("%#x: %+v %s, want %+v %s", c.off, got, got, c.want, c.str)
		}
	}
	if !ctl(0x10).VariableLatency() || ctl(0x50).VariableLatency() || !ctl(0x50).Waits(0) || ctl(0x50).Waits(1) {
		t.Error("VariableLatency/Waits")
	}
	if _, ok := mustParse(t, "probe/k.sass.txt").Functions[0].Insts[0].Control(); ok {
		t.Error("no control bits without -hex")
	}
}
