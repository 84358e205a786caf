package online

import (
	"strings"
	"testing"

	"gpuprof/profile"
)

// The H100 captures of the test programs (testdata/captures) replay
// through the analysis without a decoding error or an inconsistent frame,
// the redundancy counts of the fully traced ones equal the reference's,
// and the counts testdata/cuda/README.md derives from the programs' source
// come out.
func TestCaptures(t *testing.T) {
	for _, c := range loadCaptures(t, captureGlob("*.gpr")) {
		base, stream, st := c.name, c.data, c.st
		t.Run(base, func(t *testing.T) {
			p := analyse(t, stream, 3, 40, st) // no decoding error, no anomaly, every item valid
			if strings.Contains(base, ".redundancy.") && (strings.Contains(base, ".p1.") || strings.Contains(base, ".rank0.")) {
				ref := runReference(t, stream, st)
				compare(t, base, ref, p)
				checkDominant(t, base, ref, p)
			}
			switch base {
			case "loop_reload.redundancy.p1.gpr":
				checkKernel(t, p, "accumulate_reload", 34816, 30720, -1, 34816, 0)
				checkKernel(t, p, "accumulate_registers", 4096, 0, -1, 2048, 0)
			case "single_value.redundancy.p1.gpr":
				checkSpatial(t, p, "fill_weights", profile.Store, 16382)
				checkKernel(t, p, "fill_weights", 0, 0, 0, 16384, 0)
				checkKernel(t, p, "scale_by_weights", 2*16384, 0, -1, 16384, 0)
				checkKernel(t, p, "scale_by_constant", 16384, 0, -1, 16384, 0)
			}
		})
	}
}

// kernelTotals sums a metric over the instruction nodes of the kernels
// whose name contains name.
func kernelTotals(p *profile.Profile, name string, m profile.MetricID) uint64 {
	var n uint64
	for _, nd := range p.Nodes {
		if k := p.KernelOf(nd.ID); k != profile.RootID && strings.Contains(p.Nodes[k].Frame.Function, name) {
			n += nd.Metrics.Get(m)
		}
	}
	return n
}

// checkKernel checks loads, temporally redundant loads, spatially
// redundant loads (-1: not checked), stores and temporally redundant
// stores.
func checkKernel(t *testing.T, p *profile.Profile, name string, loads, redTL uint64, redSL int64, stores, redTS uint64) {
	t.Helper()
	got := []uint64{kernelTotals(p, name, profile.MemLoads), kernelTotals(p, name, profile.RedTempLoad),
		kernelTotals(p, name, profile.MemStores), kernelTotals(p, name, profile.RedTempStore)}
	want := []uint64{loads, redTL, stores, redTS}
	for i, what := range []string{"loads", "temporally redundant loads", "stores", "temporally redundant stores"} {
		if got[i] != want[i] {
			t.Errorf("%s: %d %s, the program's source says %d", name, got[i], what, want[i])
		}
	}
	if redSL >= 0 && kernelTotals(p, name, profile.RedSpatLoad) != uint64(redSL) {
		t.Errorf("%s: %d spatially redundant loads, want %d", name, kernelTotals(p, name, profile.RedSpatLoad), redSL)
	}
}

func checkSpatial(t *testing.T, p *profile.Profile, name string, acc profile.Access, want uint64) {
	t.Helper()
	var n uint64
	for k, v := range p.Spatial {
		if k.Access == acc && strings.Contains(p.Nodes[k.Context].Frame.Function, name) {
			n += v
		}
	}
	if n != want {
		t.Errorf("%s: %d spatially redundant %vs, want %d", name, n, acc, want)
	}
}

// checkDominant compares each instruction's dominant-value count as its
// merged sketch bounds it (what profile.Fractions' dominant entries sum)
// with the exact count: never above it, and over the whole program within
// 1 point of the exact fraction (the bound loses where an instruction saw
// more distinct values than its counters keep exactly, and those values
// are rare by then: 0.65 points at most on these captures), so the
// sampling study's dominant fractions measure sampling, not the sketch.
func checkDominant(t *testing.T, name string, ref *reference, p *profile.Profile) {
	t.Helper()
	var exact, bound, acc [2]uint64
	for k, vals := range ref.vals {
		var m uint64
		for _, n := range vals {
			m = max(m, n)
		}
		st := p.PCs[k]
		if st == nil || st.Values == nil {
			t.Errorf("%s: %+v has no value sketch", name, k)
			continue
		}
		_, b := st.Values.Dominant()
		if b > m {
			t.Errorf("%s: %+v: dominant bound %d over the exact count %d", name, k, b, m)
		}
		exact[k.Access] += m
		bound[k.Access] += b
		acc[k.Access] += ref.pcs[k]
	}
	f := p.RedundancyFractions()
	for i := 0; i < 2; i++ {
		if acc[i] == 0 {
			continue
		}
		e, b := float64(exact[i])/float64(acc[i]), float64(bound[i])/float64(acc[i])
		if 100*(e-b) > 1 || f.Value[4+i] != b {
			t.Errorf("%s: %s: exact %.4f, from sketches %.4f, Fractions %.4f", name, profile.FractionNames[4+i], e, b, f.Value[4+i])
		}
		t.Logf("%s: %s exact %.4f, from sketches %.4f", name, profile.FractionNames[4+i], e, b)
	}
}
