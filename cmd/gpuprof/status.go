package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"gpuprof/broker"
	"gpuprof/collector"
	"gpuprof/profile"
)

// Collector status heartbeats. Every collector publishes the state of each
// rank it publishes (one per CUDA process of its command) on the rank's
// status subject (plain NATS, not stored) when it changes and every
// statusEvery while it lives; gpuprof run follows them. They tell run when
// every rank's application has ended (which starts the rank-timeout clock
// although the collectors, and so the launcher, still run), and why a rank
// the reducers sealed incomplete is so: its collector never connected,
// stopped responding (crashed or stalled), is still analysing, or was
// interrupted.

// statusEvery is the heartbeat period; a collector silent for
// statusSilent is taken for crashed or stalled.
const (
	statusEvery  = 2 * time.Second
	statusSilent = 3 * statusEvery
)

// Collector states.
const (
	stateRunning     = "running"     // the application runs (or the replay is read)
	stateAnalysing   = "analysing"   // the application exited; the analysis goes on
	stateInterrupted = "interrupted" // a signal came; what was measured is being published
	stateDone        = "done"        // the done item is published
	stateFailed      = "failed"      // the collector gave up (its error in Detail)
)

// rankStatus is one heartbeat.
type rankStatus struct {
	Rank   int32  `json:"rank"`
	State  string `json:"state"`
	Exit   *int   `json:"exit,omitempty"`   // the application's status, once it exited
	Signal string `json:"signal,omitempty"` // the interruption
	Host   string `json:"host"`
	PID    int    `json:"pid"` // the collector's
	// Conn is the collector's connection name on the broker (one
	// connection carries all its ranks).
	Conn   string `json:"conn,omitempty"`
	Detail string `json:"detail,omitempty"`
	// AppEnd is when the application exited (Unix ns, the collector's
	// clock), 0 while it runs.
	AppEnd int64 `json:"app_end,omitempty"`
}

// statusReporter publishes the heartbeats of one collector's ranks.
type statusReporter struct {
	nc         *nats.Conn
	job        string
	host, conn string
	mu         sync.Mutex
	ranks      map[int32]*rankStatus
	signal     string // the interruption, once one came
	stop       chan struct{}
	wg         sync.WaitGroup
}

// newStatusReporter starts the heartbeats of the ranks a collector will
// name (update, note); conn is its connection's name.
func newStatusReporter(nc *nats.Conn, job, conn string) *statusReporter {
	host, _ := os.Hostname()
	r := &statusReporter{nc: nc, job: job, host: host, conn: conn, ranks: map[int32]*rankStatus{}, stop: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(statusEvery)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.mu.Lock()
				rs := make([]int32, 0, len(r.ranks))
				for rank := range r.ranks {
					rs = append(rs, rank)
				}
				r.mu.Unlock()
				for _, rank := range rs {
					r.send(rank)
				}
			}
		}
	}()
	return r
}

// update changes rank's status (a rank not seen yet starts running, or
// interrupted after an interruption) and publishes it at once.
func (r *statusReporter) update(rank int32, f func(*rankStatus)) {
	r.mu.Lock()
	st := r.ranks[rank]
	if st == nil {
		st = &rankStatus{Rank: rank, State: stateRunning, Host: r.host, PID: os.Getpid(), Conn: r.conn}
		if r.signal != "" {
			st.State, st.Signal = stateInterrupted, r.signal
		}
		r.ranks[rank] = st
	}
	f(st)
	r.mu.Unlock()
	r.send(rank)
}

// note follows the collector's account of a rank (collector.Options.OnRank).
func (r *statusReporter) note(rank int32, state collector.RankState, exit int) {
	r.update(rank, func(s *rankStatus) {
		switch state {
		case collector.RankExited:
			// The command ended (a done rank stays done: its command
			// may have run on, starting more ranks).
			if s.State == stateRunning {
				s.State = stateAnalysing
			}
			if s.Exit == nil {
				s.Exit, s.AppEnd = &exit, time.Now().UnixNano()
			}
		case collector.RankDone:
			s.State = stateDone
		}
	})
}

// interrupted marks every rank not done as interrupted by sig, and those
// named later.
func (r *statusReporter) interrupted(sig string) {
	r.mu.Lock()
	r.signal = sig
	var rs []int32
	for rank, st := range r.ranks {
		if st.State != stateDone && st.State != stateFailed {
			st.State, st.Signal = stateInterrupted, sig
			rs = append(rs, rank)
		}
	}
	r.mu.Unlock()
	for _, rank := range rs {
		r.send(rank)
	}
}

func (r *statusReporter) send(rank int32) {
	r.mu.Lock()
	b, _ := json.Marshal(r.ranks[rank])
	r.mu.Unlock()
	// Lost heartbeats cost nothing: the next one follows.
	r.nc.Publish(broker.StatusSubject(r.job, rank), b)
}

// close stops the heartbeats and publishes the last states: a rank whose
// done item went out stays done, the others take state (detail says why).
func (r *statusReporter) close(state, detail string) {
	close(r.stop)
	r.wg.Wait()
	r.mu.Lock()
	var rs []int32
	for rank, st := range r.ranks {
		if st.State != stateDone {
			st.State, st.Detail = state, detail
		}
		rs = append(rs, rank)
	}
	r.mu.Unlock()
	for _, rank := range rs {
		r.send(rank)
	}
	r.nc.FlushTimeout(time.Second)
}

// collectorConnName names a collector's connection on the broker: its own
// rank and process (its ranks' heartbeats carry the name).
func collectorConnName(rank int32, pid int) string {
	return fmt.Sprintf("gpuprof collect rank %d pid %d", rank, pid)
}

// statusBoard is run's view of the collectors' heartbeats.
type statusBoard struct {
	// connected, when set (the embedded broker), lists the clients
	// connected now: a collector whose connection is gone exited.
	connected func() (map[string]int, error)

	mu      sync.Mutex
	last    map[int32]rankStatus
	heard   map[int32]time.Time
	changed chan struct{} // a rank's application ended (buffered, 1)
	frozen  *heartbeats   // what freeze kept
	sub     *nats.Subscription
}

func watchStatus(nc *nats.Conn, job string) (*statusBoard, error) {
	b := &statusBoard{last: map[int32]rankStatus{}, heard: map[int32]time.Time{}, changed: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(broker.StatusSubjects(job), func(m *nats.Msg) {
		var st rankStatus
		if json.Unmarshal(m.Data, &st) != nil {
			return
		}
		b.mu.Lock()
		prev, had := b.last[st.Rank]
		b.last[st.Rank], b.heard[st.Rank] = st, time.Now()
		b.mu.Unlock()
		if !had || (prev.Exit == nil) != (st.Exit == nil) || prev.State != st.State {
			slog.Debug("collector status", "rank", st.Rank, "state", st.State, "host", st.Host, "pid", st.PID)
			select {
			case b.changed <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	b.sub = sub
	return b, nil
}

func (b *statusBoard) close() {
	if b != nil && b.sub != nil {
		b.sub.Unsubscribe()
	}
}

// appsEnded reports whether every one of ranks ranks said its application
// ended, and when the first one did (zero if none).
func (b *statusBoard) appsEnded(ranks int) (all bool, first time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	all = ranks > 0
	for r := int32(0); int(r) < ranks; r++ {
		st, ok := b.last[r]
		if !ok || st.Exit == nil {
			all = false
			continue
		}
		if t := b.heard[r]; first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return all, first
}

// atWork reports whether a collector heard from lately (and, where the
// broker's connections are known, still connected) is still at work at
// time at on something the tree's final profile does not hold: a command
// still running (no exit reported for its ranks: it may start more
// ranks), or a rank beyond the planned ones (an id at or past planned)
// whose done item has not gone out.
func (b *statusBoard) atWork(planned int, at time.Time) bool {
	var conns map[string]int
	if b.connected != nil {
		conns, _ = b.connected()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for r, st := range b.last {
		if st.State == stateFailed || at.Sub(b.heard[r]) > statusSilent || (conns != nil && st.Conn != "" && conns[st.Conn] == 0) {
			continue
		}
		if st.Exit == nil || (int(r) >= planned && st.State != stateDone) {
			return true
		}
	}
	return false
}

// unplanned reports whether any rank beyond the planned ones sent a
// heartbeat.
func (b *statusBoard) unplanned(planned int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for r := range b.last {
		if int(r) >= planned {
			return true
		}
	}
	return false
}

// firstAppEnd is when the first rank, planned or not, said its
// application ended (zero if none did).
func (b *statusBoard) firstAppEnd() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first time.Time
	for r, st := range b.last {
		if st.Exit == nil {
			continue
		}
		t := b.heard[r]
		if st.AppEnd != 0 {
			t = time.Unix(0, st.AppEnd) // the collector's clock
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// exitCode is the applications' status as a launcher reports it: the
// first non-zero one in rank order, else 0; known says whether every rank
// reported one.
func (b *statusBoard) exitCode(ranks int) (code int, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	known = true
	for r := int32(0); int(r) < ranks; r++ {
		st, ok := b.last[r]
		if !ok || st.Exit == nil {
			known = false
			continue
		}
		if code == 0 {
			code = *st.Exit
		}
	}
	return code, known
}

// freeze keeps what the heartbeats and the broker's connections say now,
// when run gives up on the collectors still at work: explain then tells
// what each was doing at that moment, not what ending the launcher did to
// it next (run's own SIGTERM, a collector that then finished or exited).
func (b *statusBoard) freeze() {
	v := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen == nil {
		b.frozen = v
	}
}

// now copies what the heartbeats and the connections say now.
func (b *statusBoard) now() *heartbeats {
	v := &heartbeats{any: b.connected != nil}
	if b.connected != nil {
		v.conns, _ = b.connected()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v.last, v.heard = maps.Clone(b.last), maps.Clone(b.heard)
	v.any = v.any || len(v.last) > 0
	return v
}

// heartbeats is what the collectors' heartbeats said at one moment.
type heartbeats struct {
	last  map[int32]rankStatus
	heard map[int32]time.Time
	conns map[string]int // the broker's open connections by name; nil: unknown
	any   bool           // a heartbeat came, or the broker lists connections
}

// explain adds to each incomplete rank of p why its collector did not
// finish, as its heartbeats tell it at time at (when the reducers gave
// up), from what freeze kept if it was called. On a cluster, a job that
// sent no heartbeat at all (permissions that predate them) is left as it
// is.
func (b *statusBoard) explain(p *profile.Profile, ranks int, at time.Time) {
	b.mu.Lock()
	v := b.frozen
	b.mu.Unlock()
	if v == nil {
		v = b.now()
	}
	if !v.any {
		return
	}
	rs := p.IncompleteRanks()
	seen := map[int32]bool{}
	for _, r := range rs {
		seen[r] = true
	}
	// A rank that published nothing at all is not in the profile.
	for r := int32(0); int(r) < ranks; r++ {
		if !seen[r] {
			if _, ok := p.Items[r]; !ok {
				rs = append(rs, r)
			}
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	for _, r := range rs {
		why := v.reason(r, at)
		if why == "" {
			continue
		}
		// Reasons are '+'-joined sets in a profile: none inside one.
		why = strings.ReplaceAll(why, "+", " and ")
		ri := p.Rank(r) // a rank that published nothing gets its entry here
		if ri.Incomplete == "" {
			ri.Incomplete = why
		} else if !strings.Contains(ri.Incomplete, why) {
			ri.Incomplete = why + ": " + ri.Incomplete
		}
	}
}

// reason says what rank r's collector was doing at time at ("" when its
// heartbeats say nothing the reducer's reason does not).
func (v *heartbeats) reason(r int32, at time.Time) string {
	st, ok := v.last[r]
	if !ok {
		return "collector never connected"
	}
	silent := at.Sub(v.heard[r])
	conns := v.conns
	where := fmt.Sprintf("on %s pid %d", st.Host, st.PID)
	switch {
	case st.State == stateDone:
		return ""
	case st.State == stateFailed:
		return fmt.Sprintf("collector failed %s (%s)", where, st.Detail)
	case conns != nil && st.Conn != "" && conns[st.Conn] == 0:
		return fmt.Sprintf("collector crashed or was killed %s (its connection closed while %s)", where, st.State)
	case silent > statusSilent:
		return fmt.Sprintf("collector stopped responding %s (silent for %s: crashed or stalled)", where, silent.Round(time.Second))
	case st.State == stateInterrupted:
		return fmt.Sprintf("collector still publishing after the interruption by %s %s", st.Signal, where)
	case st.State == stateAnalysing || st.Exit != nil:
		end := ""
		if st.AppEnd != 0 {
			end = fmt.Sprintf(" %s earlier", at.Sub(time.Unix(0, st.AppEnd)).Round(time.Second))
		}
		return fmt.Sprintf("collector still analysing %s (the application exited with status %d%s)", where, *st.Exit, end)
	default:
		return fmt.Sprintf("application still running %s", where)
	}
}
