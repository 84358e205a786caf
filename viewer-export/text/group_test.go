package text

import (
	"fmt"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/internal/exporttest"
)

// The same finding at two calling contexts of one kernel (spmv launched
// from main and from restart_step) is one item of the report: its first
// context's numbers, each context's caller and numbers, and what the two
// save together (10% × (1 - 1/1.25) + 10% × (1 - 1/1.5) = 2.0% + 3.3% =
// 5.3%, above the 5% under which the report says there is nothing big to
// gain, though each context alone is under it); two findings of one
// context stay two items, and so does the same finding in a framework
// phase.
func TestSiblingAdviceOneItem(t *testing.T) {
	p := exporttest.Showcase(8)
	kernels := exporttest.SiblingSpmv(p)
	if len(kernels) != 2 {
		t.Fatalf("%d spmv contexts", len(kernels))
	}
	finding := func(k profile.NodeID, speedup float64, hint, phase string) analysis.Advice {
		return analysis.Advice{Kind: "sibling finding", Category: analysis.CatStall, Hint: hint, Phase: phase, Importance: 0.3,
			Speedup: speedup, KernelShare: 0.1, Hotspots: []analysis.Where{{Context: k, Kernel: "spmv_csr_f64"}}}
	}
	adv := []analysis.Advice{
		finding(kernels[0], 1.5, "reorder the sibling work", ""),
		finding(kernels[1], 1.25, "reorder the sibling work", ""),
		finding(kernels[0], 1.2, "reorder the sibling work", ""),           // a second finding of the first context
		finding(kernels[1], 1.1, "reorder the sibling work", "autotuning"), // in a framework phase
	}
	groups := AdviceGroups(p, SortAdvice(adv))
	sizes := []int{}
	for _, g := range groups {
		sizes = append(sizes, len(g))
	}
	if fmt.Sprint(sizes) != "[2 1 1]" {
		t.Fatalf("groups of %v advice, want [2 1 1]", sizes)
	}
	var b strings.Builder
	if err := Write(&b, p, adv, Options{}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"at 2 calling contexts of the same code, which save 5.3% of the job's GPU time together:",
		"(est. speedup 1.50x, importance 30.0%)",
		"(est. speedup 1.25x, importance 30.0%)",
		"restart_step",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Nothing big to gain") {
		t.Errorf("the report says nothing big to gain, where the sibling finding saves 5.3%%:\n%s", got)
	}
	if c := strings.Count(got, "] sibling finding"); c != 3 {
		t.Errorf("the finding heads %d items, want 3:\n%s", c, got)
	}
}
