// Package analysis turns a merged profile into advice: GVProf's value
// redundancy insights, GPA's stall blaming, optimizers and speedup
// estimators, GPUscout's static SASS checks, CUDAAdvisor's divergence and
// reuse metrics, and whole-cluster imbalance.
package analysis

import "gpuprof/profile"

// Where locates a finding in the program.
type Where struct {
	Context  profile.NodeID // calling context (kernel, loop, line or instruction node)
	Kernel   string         // kernel function (demangled where possible)
	Function string         // GPU function holding the hotspot
	File     string
	Line     uint32
	Loop     string // loop header file:line, "" if not in a loop
	PC       *profile.PC
	Object   *profile.ObjectID // data object, for data-centric findings
	SASS     string            // the instruction text, where known
}

// Advice is one ranked finding.
type Advice struct {
	Kind       string  // optimizer or insight name, e.g. "constant replacement", "memory coalescing"
	Category   string  // "redundancy", "stall", "static", "divergence", "imbalance"
	Hint       string  // what to do, in a sentence or two
	Importance float64 // share of the kernel's samples/accesses/time it concerns (0..1)
	Speedup    float64 // estimated speedup of the kernel (1 = none); 0 if not estimated
	Hotspots   []Where // the first is the main one
	Ranks      []int32 // ranks it applies to; nil means all
	Evidence   string  // the measured numbers behind it
}
