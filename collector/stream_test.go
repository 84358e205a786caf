package collector

import (
	"strings"
	"testing"
	"time"
)

// The hint to sample launches comes where the application waited long,
// and for a large part of its run, on the analysis of a stream traced at
// every launch; not for a short wait, a long run's small wait, or a run
// that sampled its launches already.
func TestSamplingHint(t *testing.T) {
	for _, tc := range []struct {
		wait, wall time.Duration
		k          int
		hint       bool
	}{
		{38 * time.Second, 65 * time.Second, 0, true}, // miniBUDE's value tracing on the H100
		{38 * time.Second, 65 * time.Second, 1, true},
		{38 * time.Second, 65 * time.Second, 10, false},
		{3 * time.Second, 6 * time.Second, 0, false},
		{6 * time.Second, 60 * time.Second, 0, false},
	} {
		h := samplingHint(145317711, tc.wait, tc.wall, tc.k)
		if (h != "") != tc.hint {
			t.Errorf("wait %v of %v, K=%d: hint %q, want one: %v", tc.wait, tc.wall, tc.k, h, tc.hint)
		}
		if h != "" && (!strings.Contains(h, "--kernel-sampling 10") || !strings.Contains(h, "145317711") || !strings.Contains(h, "38s")) {
			t.Errorf("hint %q does not say the wait, the records and the flag", h)
		}
	}
}
