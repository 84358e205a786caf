package analysis

import (
	"fmt"
	"strings"

	"gpuprof/profile"
	"gpuprof/symname"
)

// Communication kernels (NCCL's collectives and point-to-point kernels,
// NVSHMEM's) move data between GPUs and wait for their peers: a rank's time
// in one is the transfer plus the time it waits for the last rank to
// arrive. Neither is the program's code to tune, and a spread of their time
// over ranks points at the work before them, on the ranks that spend the
// least time in them. They are known by name, which holds without PC
// samples (the value-tracing pass times them but never traces them: their
// polls would flood the trace and slow the transfer the peers wait for).
// docs/advice.md ("Communication kernels") states the rule.

// KindCommunication is the note Advise adds for a communication kernel;
// KindCollectiveWait the advice on ranks that wait for each other in one.
const (
	KindCommunication  = "communication kernel"
	KindCollectiveWait = "ranks wait at a collective"
)

// CommLibrary names the communication library a kernel (mangled or not)
// belongs to ("NCCL", "NVSHMEM"), or "" for other kernels.
func CommLibrary(kernel string) string {
	kernel = symname.Short(kernel)
	switch {
	case strings.HasPrefix(kernel, "nccl"):
		return "NCCL"
	case strings.HasPrefix(kernel, "nvshmem"):
		return "NVSHMEM"
	}
	return ""
}

// commLibraryOf is CommLibrary of kernel context k's function.
func (x *Index) commLibraryOf(k profile.NodeID) string {
	return CommLibrary(x.P.Nodes[k].Frame.Function)
}

// commNote is the note on communication kernel k of library lib.
func commNote(x *Index, k profile.NodeID, lib string) Advice {
	w := x.Where(k)
	// Importance is the kernel's share of the job's GPU time: a waiting
	// note's share of samples in polling loops has no counterpart here.
	return Advice{
		Kind: KindCommunication, Category: CatWaiting, Importance: x.KernelShare(k),
		KernelShare: x.KernelShare(k), Ranks: x.KernelRanks(k), Hotspots: []Where{w},
		Hint: fmt.Sprintf("%s's kernel: its time is the transfer between GPUs plus the wait for the last rank to arrive, in library code no optimizer applies to. Shorten it by sending less, overlapping it with computation, or balancing the work before it (see \"%s\" when ranks differ).",
			lib, KindCollectiveWait),
		Evidence: fmt.Sprintf("kernel named by %s (%s); %.1f%% of the job's GPU time", lib, symname.Short(x.P.Nodes[k].Frame.Function), 100*x.KernelShare(k)),
	}
}

// CollectiveWaits reports communication kernel contexts whose time differs
// across ranks. The rank that spends the least time in a collective arrived
// last: the others waited for it, so the cause lies in the work before the
// collective on that rank (GPU kernels, or host time between launches),
// which the collective's time does not measure; no speedup is estimated.
func CollectiveWaits(x *Index, th ImbalanceThresholds) []Advice {
	if len(x.P.Ranks) < 2 {
		return nil
	}
	var out []Advice
	for _, k := range x.Kernels {
		lib := x.commLibraryOf(k)
		if lib == "" || x.KernelShare(k) < th.MinShare {
			continue
		}
		st := x.Stats(k)
		if st.Time.Imbalance() < th.MinRatio || st.Time.Raw.N < st.Ranks {
			continue // balanced, or some rank never ran it (not a wait)
		}
		lo, hi := float64(st.Time.Raw.Min), float64(st.Time.Raw.Max)
		mean := st.Time.Mean()
		// Late ranks: within a quarter of the spread of the least time.
		var late, waiting []int32
		var per []string
		for _, r := range x.P.SortedRanks() {
			v := float64(x.P.PerRank[r][k].Get(profile.GPUTime))
			if v <= lo+0.25*(hi-lo) {
				late = append(late, r)
			} else if v > th.Heavy*mean {
				waiting = append(waiting, r)
			}
			if len(per) < 16 {
				per = append(per, fmt.Sprintf("%d:%s", r, fmtNs(v)))
			}
		}
		name := symname.Short(x.P.Nodes[k].Frame.Function)
		w := x.Where(k)
		w.Amount = hi - lo
		a := Advice{
			Kind: KindCollectiveWait, Category: CatImbalance,
			Hint: fmt.Sprintf("ranks wait for each other in %s's %s: rank %d spends %s in it, rank %d %s. The rank%s with the least time (%s) arrive%s last and the others wait: balance the work before the collective on %s (GPU kernels, or host time between launches), not the collective itself.",
				lib, name, st.Time.Raw.ArgMax, fmtNs(hi), st.Time.Raw.ArgMin, fmtNs(lo),
				plural(len(late)), joinRanks(late), map[bool]string{true: "", false: "s"}[len(late) > 1], map[bool]string{true: "them", false: "it"}[len(late) > 1]),
			Importance:  (mean - lo) / mean,
			SpeedupNA:   "the wait is set by the work before the collective on the late ranks, which the collective's time does not measure",
			Hotspots:    []Where{w},
			Ranks:       late,
			KernelShare: x.KernelShare(k),
		}
		// One long instance is a one-time skew (the first collective
		// absorbs the ranks' start-up), not every step's imbalance.
		if st.PerInstance && st.InstanceMaxLo >= 0.5*(hi-lo) {
			a.Hint += fmt.Sprintf(" One instance takes %s or more of the %s spread: a one-time skew (start-up, the first step) rather than an imbalance of every step.", fmtNs(st.InstanceMaxLo), fmtNs(hi-lo))
		}
		waits := joinRanks(waiting)
		if waits == "" {
			waits = "none"
		}
		a.Evidence = fmt.Sprintf("gpu.time_ns over %d ranks: max %s at rank %d, mean %s, min %s at rank %d; waiting above %.2f× the mean: ranks %s; %d instances, the longest %s-%s; per rank: %s",
			st.Ranks, fmtNs(hi), st.Time.Raw.ArgMax, fmtNs(mean), fmtNs(lo), st.Time.Raw.ArgMin, th.Heavy, waits, st.Instances, fmtNs(st.InstanceMaxLo), fmtNs(st.InstanceMax), strings.Join(per, " "))
		out = append(out, a)
	}
	return out
}
