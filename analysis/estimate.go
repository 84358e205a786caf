package analysis

import "math"

// GPA's speedup estimators (TPDS 2021, §3.4). T is the kernel's samples,
// M the samples an optimizer matched, A active samples.

// StallElimination is eq. 3: every matched sample (active or latency)
// disappears, S = T/(T-M).
func StallElimination(T, M float64) float64 {
	if T <= 0 || M <= 0 {
		return 1
	}
	return T / (T - math.Min(M, 0.99*T))
}

// LatencyHiding is eq. 5 (eq. 6 when A is the active samples of the
// optimization's scope, nested scopes included): latency samples can be
// hidden only behind issued work, S = T/(T-min(A, M^L)).
func LatencyHiding(T, ML, A float64) float64 {
	if T <= 0 {
		return 1
	}
	return StallElimination(T, math.Min(A, ML))
}

// IssueRate is eq. 9/10: the probability that a scheduler with w warps,
// each issuing with probability rI, issues in a cycle.
func IssueRate(rI, w float64) float64 {
	if w <= 0 {
		return 0
	}
	return 1 - math.Pow(1-rI, w)
}

// Parallelism is eq. 7-11: the speedup of changing the active warps per
// scheduler from w to wNew, with rI the ratio of issued samples among all
// samples and f the optimizer's factor. The work each scheduler does
// scales with its warps (C_W) and its speed with its issue rate (C_I):
// S = C_I / C_W × f.
func Parallelism(w, wNew, rI, f float64) float64 {
	if w <= 0 || wNew <= 0 || rI <= 0 {
		return 1
	}
	cw := wNew / w
	ci := IssueRate(rI, wNew) / IssueRate(rI, w)
	return ci / cw * f
}
