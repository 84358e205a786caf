package analysis

import (
	"fmt"
	"sort"

	"gpuprof/profile"
	"gpuprof/symname"
)

// KernelTrafficLines describes each sampled kernel context's traffic for
// the held-out harness's -heldout.evidence.
func KernelTrafficLines(p *profile.Profile, mods ModuleSource) []string {
	x := NewIndex(p)
	var out []string
	var ks []profile.NodeID
	for k := range x.KernelTime {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	for _, k := range ks {
		kv, err := newKernelView(x, k, mods, Options{})
		if err != nil || kv == nil || kv.T == 0 {
			continue
		}
		n := p.Nodes[k]
		launches := float64(x.TimedLaunches(k))
		perLaunch := float64(x.KernelTime[k]) / max(1, launches)
		sectors := kv.kernelBytes()
		bt := float64(n.Metrics.Get(profile.GPUBlocksTrace))
		grid := 0.0
		if pp := kv.parallelism(); pp != nil {
			grid = pp.cfg.GridBlocks
		}
		foot, _ := kv.footprint()
		perL := 0.0
		if bt > 0 {
			perL = sectors / bt * grid
		}
		out = append(out, fmt.Sprintf("%s: %.0f launches %.1f us/launch; T=%.0f mem %.0f%% A %.0f%%; traced sector bytes %.0f over %.0f blocks traced, grid %.0f: %.1f MB/launch = %.0f GB/s; footprint %.1f MB = %.0f GB/s",
			symname.Short(n.Frame.Function), launches, perLaunch/1000, kv.T, 100*kv.memSamples()/kv.T, 100*kv.A/kv.T, sectors, bt, grid, perL/1e6, perL/perLaunch, foot/1e6, foot/perLaunch))
	}
	return out
}
