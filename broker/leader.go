package broker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConsumerLeaderChanged says another server now leads a consumer: what
// the old leader was delivering when it failed may be lost to the client
// yet count as delivered, and would come back only after AckWait.
var ErrConsumerLeaderChanged = errors.New("broker: the consumer's leader changed (a cluster node failed); deliveries in flight may be lost")

// LeaderWatch notices that a replicated consumer's leader changed, so its
// user can recreate the consumer and have lost deliveries back at once, as
// after a reconnect. A node killed on a cluster leaves no other trace on a
// client connected elsewhere: its pull requests just expire.
type LeaderWatch struct {
	cons   jetstream.Consumer
	every  time.Duration
	last   time.Time
	leader string
}

// NewLeaderWatch watches cons, asking its leader at most every interval.
func NewLeaderWatch(cons jetstream.Consumer, every time.Duration) *LeaderWatch {
	return &LeaderWatch{cons: cons, every: every}
}

// Changed asks who leads the consumer (unless it asked less than the
// interval ago) and reports whether it is another server than at the
// previous answer. No answer (an election under way, a single server)
// changes nothing. The first call records the leader.
func (w *LeaderWatch) Changed(ctx context.Context) bool {
	if !w.last.IsZero() && time.Since(w.last) < w.every {
		return false
	}
	w.last = time.Now()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := w.cons.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		return false
	}
	prev := w.leader
	w.leader = info.Cluster.Leader
	return prev != "" && prev != w.leader
}

// Leader is the leader at the last answer ("" before any).
func (w *LeaderWatch) Leader() string { return w.leader }
