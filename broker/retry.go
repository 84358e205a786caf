package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RetryPolicy is exponential backoff with jitter, bounded by a horizon.
type RetryPolicy struct {
	Min, Max time.Duration
	// Horizon: give up once this long has passed since the first try. It
	// must stay below the stream's duplicate window, so that a publish
	// retried up to the horizon is still stored once.
	Horizon time.Duration
}

// DefaultRetry rides out a broker restart or a leader election.
var DefaultRetry = RetryPolicy{Min: 50 * time.Millisecond, Max: 2 * time.Second, Horizon: 2 * time.Minute}

// Delay is the wait before retry number n (0 for the first retry).
func (p RetryPolicy) Delay(n int) time.Duration {
	d := p.Min
	for i := 0; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	// ±25% jitter keeps many ranks from retrying in lockstep.
	return d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Retryable reports whether err is transient: the broker is away, slow,
// electing a leader, or full (discard-new pushback), so trying again later
// may succeed. Other errors (too large, no such stream, bad request,
// closed connection) are not.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrConnectionClosed),
		errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrJetStreamPublisherClosed):
		return false
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, jetstream.ErrTooManyStalledMsgs), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrServerShutdown), errors.Is(err, nats.ErrStaleConnection),
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged), errors.Is(err, jetstream.ErrNoHeartbeat):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) {
		// The connection dropped under a write; it reconnects by itself.
		return true
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		// 503: store failed (stream full under discard-new), insufficient
		// resources, no leader; 408: request timeout; 10158: the same
		// message id is being stored right now; 429 (10167): the server
		// has too many JetStream requests pending (seen with 128 reducer
		// nodes publishing at once), a back-off clears it; 10005 for an
		// offline peer: a replica cannot be placed on a node that is
		// restarting, or that the meta leader has not heard from yet just
		// after the cluster formed (seen in the 3-node tests).
		return ae.Code == 503 || ae.Code == 408 || ae.Code == 429 || ae.ErrorCode == 10158 || ae.ErrorCode == 10167 ||
			ae.ErrorCode == 10005 && strings.Contains(ae.Description, "peer offline")
	}
	return false
}

// Full reports whether err is the stream refusing a message because it is
// at its limits (discard-new pushback).
func Full(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == 10077 || ae.ErrorCode == 10023)
}

// Retry calls f until it succeeds, fails with an error that is not
// Retryable, the policy's horizon passes, or ctx ends. The error returned
// is f's last, wrapped with the number of tries when there were several.
func Retry(ctx context.Context, p RetryPolicy, f func() error) error {
	start := time.Now()
	for n := 0; ; n++ {
		err := f()
		if err == nil || !Retryable(err) || ctx.Err() != nil {
			if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				return fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return err
		}
		d := p.Delay(n)
		if p.Horizon > 0 && time.Since(start)+d > p.Horizon {
			return fmt.Errorf("%w (gave up after %d tries in %v)", err, n+1, time.Since(start).Round(time.Millisecond))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (while retrying: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// APITimeout bounds one JetStream API request (a stream or bucket lookup
// or creation) inside RetryAPI: a response lost under load then costs one
// try, not the caller's whole deadline (a loaded test run once waited its
// full minute on a bucket lookup that was never answered).
var APITimeout = 10 * time.Second

// RetryAPI is Retry for JetStream API requests: each try gets a context
// bounded by APITimeout, and a try that runs out of it is retried while
// ctx lasts.
func RetryAPI(ctx context.Context, p RetryPolicy, f func(ctx context.Context) error) error {
	return Retry(ctx, p, func() error {
		actx, cancel := context.WithTimeout(ctx, APITimeout)
		defer cancel()
		return f(actx)
	})
}

// PublishRetry publishes m to stream under msgID and waits for the
// stream's acknowledgement, retrying transient failures under p. The
// message id makes retries safe: a copy the stream already stored is
// acknowledged as a duplicate, not stored twice. js should time out
// acknowledgements (Conn.NewJetStream); tries reports how many publishes
// it took, and retrying, if not nil, is told of each failure retried.
func PublishRetry(ctx context.Context, js jetstream.JetStream, m *nats.Msg, msgID, stream string, p RetryPolicy, retrying func(error)) (ack *jetstream.PubAck, tries int, err error) {
	var last error
	err = Retry(ctx, p, func() error {
		if tries++; tries > 1 && retrying != nil {
			retrying(last)
		}
		ack, last = publishOnce(ctx, js, m, msgID, stream)
		return last
	})
	return ack, tries, err
}

func publishOnce(ctx context.Context, js jetstream.JetStream, m *nats.Msg, msgID, stream string) (*jetstream.PubAck, error) {
	paf, err := js.PublishMsgAsync(m, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(stream))
	if err != nil {
		return nil, err
	}
	select {
	case a := <-paf.Ok():
		return a, nil
	case err := <-paf.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
