package reducer

import (
	"testing"
	"time"
)

// An interruption's end message sets a node's clock back so that its
// deadline falls "within" after the message, whatever its rank timeout;
// a plain end message, or one giving more than the timeout, starts the
// clock at the message.
func TestEndClock(t *testing.T) {
	at := time.Unix(1000, 0)
	for _, c := range []struct {
		body    string
		timeout time.Duration
		want    time.Time
	}{
		{"exit 0", time.Minute, at},
		{"exit 130 within 3s", time.Minute, at.Add(3*time.Second - time.Minute)},
		{"exit 130 within 2m", time.Minute, at},
		{"exit 130 within nonsense", time.Minute, at},
	} {
		if got := endClock(at, []byte(c.body), c.timeout); !got.Equal(c.want) {
			t.Errorf("%q, timeout %v: clock %v, want %v", c.body, c.timeout, got, c.want)
		}
	}
}
