package analysis

// The options stand apart from Advise (advise.go) so that the kernel view
// below it can take them without depending on it.

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
