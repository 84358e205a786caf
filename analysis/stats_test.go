package analysis_test

import (
	"math"
	"testing"

	"gpuprof/analysis"
	"gpuprof/symname"
)

// Per-instance statistics of a real capture's kernel contexts: the
// instances counted by the histogram, the mean inside the min and max
// buckets, a finite standard deviation; and the reuse histogram's loads.
func TestInstanceStatsOnCapture(t *testing.T) {
	d, ok := findValidationDirs()
	if !ok {
		t.Fatal("no captures (testdata/captures is committed)")
	}
	p, _ := programProfile(t, d, "loop_reload")
	x := analysis.NewIndex(p)
	checked := 0
	for _, k := range x.Kernels {
		if x.KernelTime[k] == 0 {
			continue
		}
		st := x.Stats(k)
		if !st.PerInstance || st.Instances == 0 {
			t.Fatalf("%s: no per-instance statistics: %+v", p.Nodes[k].Frame.Function, st)
		}
		if !(st.InstanceMin <= st.InstanceMean && st.InstanceMean < st.InstanceMax) || st.InstanceMinHi > st.InstanceMax || (st.Instances > 1) == math.IsNaN(st.InstanceStddev) {
			t.Errorf("%s: min %g-%g mean %g max %g-%g stddev %g", p.Nodes[k].Frame.Function, st.InstanceMin, st.InstanceMinHi, st.InstanceMean, st.InstanceMaxLo, st.InstanceMax, st.InstanceStddev)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no timed kernel context")
	}
	// loop_reload's bad kernel reloads s[0] every iteration: most of its
	// element-level loads reuse an element loaded a few units earlier.
	for _, k := range x.Kernels {
		if symname.Short(p.Nodes[k].Frame.Function) != "accumulate_reload" {
			continue
		}
		h := analysis.ReuseHistogram(x.Inclusive(k), "elem")
		if h.Loads == 0 || h.Below(4) < h.Loads/2 {
			t.Errorf("accumulate_reload: %d loads, %d at distance < 16, %d without reuse", h.Loads, h.Below(4), h.Inf)
		}
	}
}
