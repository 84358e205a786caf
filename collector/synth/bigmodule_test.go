package synth

import (
	"bytes"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/sass"
)

// The generated cubin reads as a cubin: every kernel with its size, its
// section and the symbol index that counts the section symbols before it;
// the generated listing parses to the same kernels.
func TestBigModuleIsACubin(t *testing.T) {
	m := NewBigModule(40, 1<<20)
	m.PyFile = "/tmp/triton/kernel.py"
	c, err := sass.ParseCubin(m.Cubin)
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "sm_90" || len(c.Functions) != len(m.Names) {
		t.Fatalf("arch %s, %d functions", c.Arch, len(c.Functions))
	}
	for i, f := range c.Functions {
		if f.Name != m.Names[i] || f.Symbol != m.Symbol[i] || f.Size != m.Sizes[i] || !f.Entry || f.Section != ".text."+m.Names[i] {
			t.Fatalf("function %d: %+v", i, f)
		}
	}
	l, err := sass.Parse(m.Listing(m.Names[0], m.Names[7]))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Functions) != 2 || l.Arch != "sm_90" {
		t.Fatalf("%d functions, arch %q", len(l.Functions), l.Arch)
	}
	for _, k := range []int{0, 7} {
		f := l.Func(m.Names[k])
		if f == nil || f.Size != m.Sizes[k] || len(f.Insts) != int(m.Sizes[k]/16) {
			t.Fatalf("kernel %d in the listing: %+v", k, f)
		}
		if len(f.CFG().Loops) != 1 {
			t.Errorf("kernel %d: %d loops", k, len(f.CFG().Loops))
		}
	}
	if loc, ok := l.LineAt(m.Names[0], 0x40); !ok || l.File(loc.File) != m.PyFile {
		t.Errorf("kernel 0's line: %v %v", l.File(loc.File), ok)
	}
}

func TestBigStreamDecodes(t *testing.T) {
	m := NewBigModule(30, 1<<20)
	var b bytes.Buffer
	if err := WriteBigStream(&b, m, BigStreamOptions{Launched: []int{3, 9}}); err != nil {
		t.Fatal(err)
	}
	d := rawstream.NewDecoder(&b)
	kinds := map[rawstream.Kind]int{}
	for {
		f, err := d.Next()
		if err != nil {
			break
		}
		kinds[f.Kind()]++
		if mod, ok := f.(*rawstream.Module); ok && !bytes.Equal(mod.Bytes, m.Cubin) {
			t.Fatal("module bytes differ")
		}
	}
	if !d.Ended() || kinds[rawstream.KindFunction] != 30 || kinds[rawstream.KindLaunch] != 4 || kinds[rawstream.KindModule] != 1 {
		t.Fatalf("frames %v", kinds)
	}
}
