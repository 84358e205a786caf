package analysis

import (
	"math"
	"strconv"
	"strings"

	"gpuprof/profile"
)

// The time statistics stand apart from the imbalance advice (imbalance.go)
// because the speedup estimators read the timed launches too.

// KernelStats are a kernel context's statistics across ranks and kernel
// instances.
type KernelStats struct {
	Ranks    uint64
	Time     Spread // gpu.time_ns over ranks
	Launches Spread // gpu.launches over ranks
	// PerLaunch is the mean time of one instance on each rank that ran it.
	PerLaunch map[int32]float64
	// InstanceMean/Min/Max/Stddev describe the time of one instance over
	// all instances of all ranks (CUDAAdvisor's per-call-path statistics).
	// With the collector's instance metrics (PerInstance true): the mean
	// and standard deviation exactly, from the sums of times and of their
	// squares; min and max as the bounds of the extreme quarter-octave
	// histogram buckets (InstanceMin ≤ true min < InstanceMinHi, and
	// InstanceMaxLo ≤ true max < InstanceMax). Without them: the mean
	// exactly, min, max and standard deviation over the ranks'
	// per-instance means (NaN with fewer than two ranks).
	InstanceMean, InstanceMin, InstanceMax, InstanceStddev float64
	InstanceMinHi, InstanceMaxLo                           float64
	PerInstance                                            bool
	Instances                                              uint64 // timed instances
}

// Instance-time metrics the collector adds (collector/online/launchstats.go).
var (
	mTimeSqHi = profile.Metric("gpu.time_sq_hi")
	mTimeSqLo = profile.Metric("gpu.time_sq_lo")
)

const timeHistPrefix = "gpu.time_hist."

// timeBucketLow is the smallest time of histogram bucket i (a quarter
// octave: i = 4k+s covers [2^k (1+s/4), 2^k (1+(s+1)/4))).
func timeBucketLow(i int) float64 {
	return math.Ldexp(1+float64(i%4)/4, i/4)
}

// Stats computes kernel context k's statistics.
func (x *Index) Stats(k profile.NodeID) KernelStats {
	s := KernelStats{Ranks: uint64(len(x.P.Ranks)), Time: x.Spread(k, profile.GPUTime), Launches: x.Spread(k, profile.GPULaunches), PerLaunch: map[int32]float64{}}
	if s.Launches.Raw.Sum > 0 {
		s.InstanceMean = float64(s.Time.Raw.Sum) / float64(s.Launches.Raw.Sum)
	}
	if x.instanceStats(k, &s) {
		return s
	}
	var xs []float64
	for _, r := range x.P.SortedRanks() {
		if pl, ok := perLaunch(x.P.PerRank[r][k]); ok {
			s.PerLaunch[r] = pl
			xs = append(xs, pl)
		}
	}
	s.InstanceStddev = math.NaN()
	if len(xs) > 0 {
		s.InstanceMin, s.InstanceMax = xs[0], xs[0]
		mean := 0.0
		for _, v := range xs {
			s.InstanceMin, s.InstanceMax = math.Min(s.InstanceMin, v), math.Max(s.InstanceMax, v)
			mean += v
		}
		mean /= float64(len(xs))
		if len(xs) > 1 {
			ss := 0.0
			for _, v := range xs {
				ss += (v - mean) * (v - mean)
			}
			s.InstanceStddev = math.Sqrt(ss / float64(len(xs)))
		}
	}
	s.InstanceMinHi, s.InstanceMaxLo = s.InstanceMin, s.InstanceMax
	return s
}

// timeHist reads the instance-time histogram: the timed instances and
// the lowest and highest bucket with any (-1 when none).
func timeHist(vs profile.Values) (count uint64, lo, hi int) {
	lo, hi = -1, -1
	for _, mv := range vs {
		name := mv.ID.Name()
		if !strings.HasPrefix(name, timeHistPrefix) || mv.V == 0 {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(name, timeHistPrefix))
		if err != nil || i < 0 || i > 4*64 {
			continue
		}
		count += mv.V
		if lo < 0 || i < lo {
			lo = i
		}
		if i > hi {
			hi = i
		}
	}
	return count, lo, hi
}

// perLaunch is a rank's mean time per timed launch: over the instances
// its histogram counts, else over its launches (a merged profile also
// counts the launches of passes that timed nothing).
func perLaunch(v profile.Values) (float64, bool) {
	t := v.Get(profile.GPUTime)
	n, _, _ := timeHist(v)
	if n == 0 {
		n = v.Get(profile.GPULaunches)
	}
	if t == 0 || n == 0 {
		return 0, false
	}
	return float64(t) / float64(n), true
}

// TimedLaunches is kernel context k's launches with a measured time (a
// merged profile also counts the launches of passes that timed nothing).
func (x *Index) TimedLaunches(k profile.NodeID) uint64 {
	n := x.P.Nodes[k]
	if n == nil {
		return 0
	}
	c, _, _ := timeHist(n.Metrics)
	return c
}

// instanceStats fills the per-instance statistics from the instance-time
// histogram and squares at k (false when the profile has none).
func (x *Index) instanceStats(k profile.NodeID, s *KernelStats) bool {
	n := x.P.Nodes[k]
	if n == nil {
		return false
	}
	count, lo, hi := timeHist(n.Metrics)
	if count == 0 {
		return false
	}
	for _, r := range x.P.SortedRanks() {
		v := x.P.PerRank[r][k]
		if pl, ok := perLaunch(v); ok {
			s.PerLaunch[r] = pl
		}
	}
	// The mean of the timed instances: the time is only summed over them.
	s.PerInstance, s.Instances = true, count
	mean := float64(n.Metrics.Get(profile.GPUTime)) / float64(count)
	s.InstanceMean = mean
	sq := math.Ldexp(float64(n.Metrics.Get(mTimeSqHi)), 32) + float64(n.Metrics.Get(mTimeSqLo))
	s.InstanceStddev = math.NaN()
	if count > 1 {
		s.InstanceStddev = math.Sqrt(math.Max(0, sq/float64(count)-mean*mean))
	}
	s.InstanceMin, s.InstanceMinHi = timeBucketLow(lo), timeBucketLow(lo+1)
	s.InstanceMaxLo, s.InstanceMax = timeBucketLow(hi), timeBucketLow(hi+1)
	return true
}
