package synth

import (
	"testing"

	"gpuprof/collector/rawstream"
)

// The rewritten stream keeps every frame, adds one FUNCTION with module id
// 0 per module, just before the module's first launch, which names it;
// the module and its functions come after that launch (late: after the
// launch's own frames), and never before.
func TestLazyLoading(t *testing.T) {
	stream := write(t, 0, Options{Seed: 4})
	in := frames(t, stream)
	for _, late := range []bool{false, true} {
		b, err := LazyLoading(stream, late)
		if err != nil {
			t.Fatal(err)
		}
		out := frames(t, b)
		modules, orphans := 0, map[uint32]int{}
		firstLaunch := -1
		for i, f := range out {
			switch f := f.(type) {
			case *rawstream.Module:
				modules++
				if firstLaunch < 0 {
					t.Errorf("late=%v: module %d at frame %d, before any launch", late, f.ModuleID, i)
				}
			case *rawstream.Function:
				if f.ModuleID == 0 {
					orphans[f.FunctionID] = i
				}
			case *rawstream.Launch:
				if firstLaunch < 0 {
					firstLaunch = i
					if at, ok := orphans[f.FunctionID]; !ok || at != i-1 {
						t.Errorf("late=%v: the first launch names function %d, not the one reported just before it", late, f.FunctionID)
					}
				}
			}
		}
		if modules != 1 || len(orphans) != 1 || len(out) != len(in)+1 {
			t.Errorf("late=%v: %d modules, %d early functions, %d frames of %d", late, modules, len(orphans), len(out), len(in))
		}
		if late && out[firstLaunch+1].Kind() == rawstream.KindModule {
			t.Errorf("late: the module comes right after the launch")
		}
		if !late && out[firstLaunch+1].Kind() != rawstream.KindModule {
			t.Errorf("the module does not come right after the first launch: %v", out[firstLaunch+1].Kind())
		}
	}
}
