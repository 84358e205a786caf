package analysis

import (
	"strconv"

	"gpuprof/profile"
)

// Reuse is a kernel context's reuse-distance histogram of global loads at
// one granularity (CUDAAdvisor; the collector's reuse.<grain>.b<k> and
// reuse.<grain>.inf metrics, docs/advice.md).
type Reuse struct {
	// Buckets[0] counts loads at distance 0, Buckets[k] (k ≥ 1) loads at
	// distances in [2^(k-1), 2^k) distinct units.
	Buckets []uint64
	Inf     uint64 // first loads, loads after a store, distances beyond the window
	Loads   uint64
}

// ReuseHistogram reads the histogram of grain ("elem", "line"; older
// profiles also have "sector") from a kernel context's (inclusive) values.
func ReuseHistogram(vs profile.Values, grain string) Reuse {
	var h Reuse
	for k := 0; k < 64; k++ {
		v := vs.Get(profile.Metric("reuse." + grain + ".b" + strconv.Itoa(k)))
		if v == 0 && k >= 15 {
			break
		}
		h.Buckets = append(h.Buckets, v)
		h.Loads += v
	}
	h.Inf = vs.Get(profile.Metric("reuse." + grain + ".inf"))
	h.Loads += h.Inf
	return h
}

// Below counts the loads at reuse distances under 2^k.
func (h Reuse) Below(k int) uint64 {
	t := uint64(0)
	for i := 0; i <= k && i < len(h.Buckets); i++ {
		t += h.Buckets[i]
	}
	return t
}
