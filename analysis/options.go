package analysis

// The options and their thresholds stand apart from Advise (advise.go) so
// that the analyses below it can take them without depending on it.

// Options tune Advise.
type Options struct {
	// Redundancy thresholds (zero value: DefaultRedundancy).
	Redundancy *RedundancyThresholds
	// SamplingOnly ignores executed-instruction counts (GPA's sampling
	// mode) even where the profile has them.
	SamplingOnly bool
	// MinImportance drops stall advice matching less of its kernel's
	// samples (default 0.01).
	MinImportance float64
	// MinSpeedup drops estimated advice below this speedup (default 1.005).
	MinSpeedup float64
	// Static adds GPUscout's static checks of the modules the profile
	// references, joined with their samples.
	Static bool
	// Imbalance thresholds (zero value: DefaultImbalance).
	Imbalance *ImbalanceThresholds
	// Top keeps the first Top advice (0 keeps all).
	Top int
	// GPAOnly estimates with GPA's rules alone: dependency stalls
	// apportioned by the blamer only, eq. 5/6 for every latency-hiding
	// optimizer, no relief of throttle stalls elsewhere (docs/advice.md
	// says what the default adds).
	GPAOnly bool
}

func (o *Options) defaults() {
	if o.Redundancy == nil {
		d := DefaultRedundancy
		o.Redundancy = &d
	}
	if o.Imbalance == nil {
		d := DefaultImbalance
		o.Imbalance = &d
	}
	if o.MinImportance == 0 {
		o.MinImportance = 0.01
	}
	if o.MinSpeedup == 0 {
		o.MinSpeedup = 1.005
	}
}

// RedundancyThresholds decide when a redundancy becomes an insight; the
// defaults and their reasons are in docs/insights.md.
type RedundancyThresholds struct {
	MinAccesses   uint64  // lane accesses below which value statistics are noise
	MinShare      float64 // share of the kernel's accesses of that kind
	DominantShare float64 // lower bound of the top value's share for "dominant"
	FewDistinct   float64 // distinct values that still fit an 8-bit code
	CloseRelRange float64 // (max-min)/max(|min|,|max|) for "close values"
	MinSpatial    float64 // eq. 2 ratio for the few-distinct and close classes
	MinTemporal   float64 // eq. 1 ratio of the later PC of a temporal pair
}

// DefaultRedundancy are the thresholds documented in docs/insights.md.
var DefaultRedundancy = RedundancyThresholds{
	MinAccesses:   64,
	MinShare:      0.01,
	DominantShare: 0.5,
	FewDistinct:   256,
	CloseRelRange: 0.1,
	MinSpatial:    0.5,
	MinTemporal:   0.3,
}

// ImbalanceThresholds decide when a kernel context's spread over ranks is
// reported (docs/insights.md).
type ImbalanceThresholds struct {
	MinRatio float64 // max/mean GPU time over the job's ranks
	MinShare float64 // the kernel context's share of the job's GPU time
	Heavy    float64 // ranks above Heavy × mean are named
}

// DefaultImbalance: a 10% excess on the slowest rank of a kernel taking at
// least 1% of the job's GPU time.
var DefaultImbalance = ImbalanceThresholds{MinRatio: 1.1, MinShare: 0.01, Heavy: 1.1}
