package sass

import (
	"fmt"
	"os"
	"testing"
)

func TestDebugKinds(t *testing.T) {
	fn := os.Getenv("SASSDEBUG")
	if fn == "" {
		t.Skip()
	}
	m := mustParse(t, fn)
	for _, f := range m.Functions {
		ks := f.AccessKinds()
		for i := range f.Insts {
			if ks[i].Vec > 0 {
				l := m.Location(f.Insts[i].Loc)
				fmt.Printf("%-40s %#05x %-50s %-22s %s\n", f.Name, f.Insts[i].Offset, f.Insts[i].Text(), ks[i], m.PosString(l.Pos))
			}
		}
	}
}

func TestDebugKindStats(t *testing.T) {
	if os.Getenv("SASSSTATS") == "" {
		t.Skip()
	}
	for _, fn := range []string{"probe/k.sm80.hex.txt", "probe/k.hex.txt", "probe/k.sm100.hex.txt", "probe/k.sm120.hex.txt", "cflow/c.sm80.hex.txt", "cflow/c.sm90.hex.txt", "cflow/c.sm100.hex.txt", "cflow/c.sm120.hex.txt", "hpctoolkit-loops/loops.hex.txt"} {
		m := mustParse(t, fn)
		n, fb := 0, 0
		for _, f := range m.Functions {
			for _, k := range f.AccessKinds() {
				if k.Vec > 0 {
					n++
					if k.Fallback {
						fb++
					}
				}
			}
		}
		fmt.Printf("%-32s mem %4d fallback %3d\n", fn, n, fb)
	}
}

func TestDebugStruct(t *testing.T) {
	fn := os.Getenv("SASSSTRUCT")
	if fn == "" {
		t.Skip()
	}
	m := mustParse(t, fn)
	m.Structure().WriteText(os.Stdout, os.Getenv("INSTS") != "")
}
