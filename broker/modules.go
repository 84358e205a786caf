package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/profile"
)

// Module object kinds: the cubin bytes, and the structure parsed from them
// (whatever encoding its producer chose; the store keeps bytes).
const (
	ModuleCubin = "cubin"
	ModuleSASS  = "sass"
)

// FunctionKind is the object kind of the listing of one function of a
// module (docs/sass.md, "Sharing listings"): listings are made and shared
// function by function, so a module's objects are its cubin (when small
// enough), and one listing per function that ran.
func FunctionKind(fn string) string {
	return fmt.Sprintf("fn%016x", xxhash.Sum64String(fn))
}

// ErrModuleNotFound is returned by GetModule for a module nobody uploaded.
var ErrModuleNotFound = errors.New("broker: module not in the store")

// moduleStore binds job's bucket once per connection.
func (c *Conn) moduleStore(ctx context.Context, job string) (jetstream.ObjectStore, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	c.mu.Lock()
	obs := c.modules[job]
	c.mu.Unlock()
	if obs != nil {
		return obs, nil
	}
	err := RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		var err error
		obs, err = c.JS.ObjectStore(ctx, ModuleBucket(job))
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			obs, err = c.JS.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket:      ModuleBucket(job),
				Description: "gpuprof job " + job + ": GPU modules by content hash",
				Storage:     jetstream.FileStorage,
				Replicas:    c.replicas(),
			})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("broker: module bucket %s: %w", ModuleBucket(job), err)
	}
	c.mu.Lock()
	if c.modules == nil {
		c.modules = map[string]jetstream.ObjectStore{}
	}
	c.modules[job] = obs
	c.mu.Unlock()
	return obs, nil
}

func (c *Conn) replicas() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.Replicas, 1)
}

func moduleName(h profile.ModuleHash, kind string) (string, error) {
	if kind == "" {
		return "", fmt.Errorf("broker: module %v: empty kind", h)
	}
	for i, ch := range kind {
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9') {
			return "", fmt.Errorf("broker: module %v: kind %q: character %q at byte %d is not allowed (use a-z 0-9)", h, kind, ch, i)
		}
	}
	return h.String() + "." + kind, nil
}

// PutModule stores data as module h's object of kind, unless it is stored
// already: the first rank to see a module uploads it and the others check
// and skip (uploaded reports which). Two ranks racing both upload the same
// bytes, which is harmless. Cubin bytes must hash to h.
func (c *Conn) PutModule(ctx context.Context, job string, h profile.ModuleHash, kind string, data []byte) (uploaded bool, err error) {
	name, err := moduleName(h, kind)
	if err != nil {
		return false, err
	}
	if kind == ModuleCubin && profile.ModuleHash(xxhash.Sum64(data)) != h {
		return false, fmt.Errorf("broker: module %v: cubin bytes hash to %v", h, profile.ModuleHash(xxhash.Sum64(data)))
	}
	obs, err := c.moduleStore(ctx, job)
	if err != nil {
		return false, err
	}
	err = Retry(ctx, DefaultRetry, func() error {
		info, err := obs.GetInfo(ctx, name)
		if err == nil && !info.Deleted && info.Size == uint64(len(data)) {
			uploaded = false
			return nil
		}
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return err
		}
		_, err = obs.PutBytes(ctx, name, data)
		uploaded = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("broker: put module %s in %s: %w", name, ModuleBucket(job), err)
	}
	return uploaded, nil
}

// HasModule reports whether module h's object of kind is stored.
func (c *Conn) HasModule(ctx context.Context, job string, h profile.ModuleHash, kind string) (bool, error) {
	name, err := moduleName(h, kind)
	if err != nil {
		return false, err
	}
	obs, err := c.moduleStore(ctx, job)
	if err != nil {
		return false, err
	}
	var has bool
	err = RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		info, err := obs.GetInfo(ctx, name)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			has = false
			return nil
		}
		has = err == nil && !info.Deleted
		return err
	})
	return has, err
}

// ModuleSize returns the size of module h's object of kind, or
// ErrModuleNotFound (the root reads it before deciding to fetch a cubin).
func (c *Conn) ModuleSize(ctx context.Context, job string, h profile.ModuleHash, kind string) (uint64, error) {
	name, err := moduleName(h, kind)
	if err != nil {
		return 0, err
	}
	obs, err := c.moduleStore(ctx, job)
	if err != nil {
		return 0, err
	}
	var size uint64
	err = RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		info, err := obs.GetInfo(ctx, name)
		if err == nil && info.Deleted {
			err = jetstream.ErrObjectNotFound
		}
		if err == nil {
			size = info.Size
		}
		return err
	})
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, fmt.Errorf("%w: %s in %s", ErrModuleNotFound, name, ModuleBucket(job))
	}
	if err != nil {
		return 0, fmt.Errorf("broker: module %s in %s: %w", name, ModuleBucket(job), err)
	}
	return size, nil
}

// GetModule returns module h's object of kind, or ErrModuleNotFound.
// Cubin bytes are checked against h, so a corrupt store is an error, not a
// wrong disassembly.
func (c *Conn) GetModule(ctx context.Context, job string, h profile.ModuleHash, kind string) ([]byte, error) {
	name, err := moduleName(h, kind)
	if err != nil {
		return nil, err
	}
	obs, err := c.moduleStore(ctx, job)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = Retry(ctx, DefaultRetry, func() error {
		var err error
		data, err = obs.GetBytes(ctx, name)
		return err
	})
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s in %s", ErrModuleNotFound, name, ModuleBucket(job))
	}
	if err != nil {
		return nil, fmt.Errorf("broker: get module %s from %s: %w", name, ModuleBucket(job), err)
	}
	if kind == ModuleCubin && profile.ModuleHash(xxhash.Sum64(data)) != h {
		return nil, fmt.Errorf("broker: module %s in %s: stored bytes hash to %v", name, ModuleBucket(job), profile.ModuleHash(xxhash.Sum64(data)))
	}
	return data, nil
}

// Claims: producing a module's derived object (the nvdisasm listing) is
// costly, so the ranks of a job agree on one producer. A claim is a message
// on its own subject in the module bucket's stream, published only if the
// subject has none yet (JetStream checks the expected last sequence per
// subject atomically), so exactly one rank wins. Later messages on the
// subject say how the producer fared. Living in the bucket's stream, claims
// need no permissions beyond the module uploads' and go with the bucket.
// Their subjects (several tokens) never collide with the object store's
// chunk subjects (one nuid token) and its metadata subjects are untouched.

// Claim states, the payload of a claim message (a free-text detail
// follows).
const (
	claimHeld   = "claimed"
	claimDone   = "done"
	claimFailed = "failed"
)

// ErrModuleNotClaimed is returned by AwaitModule when nobody claimed the
// object: nothing is on its way.
var ErrModuleNotClaimed = errors.New("broker: module object not claimed by any rank")

// ErrModuleAbandoned is returned by AwaitModule when the claimant gave up
// (its error follows).
var ErrModuleAbandoned = errors.New("broker: module object abandoned by its claimant")

func claimSubject(job string, h profile.ModuleHash, kind string) (string, error) {
	name, err := moduleName(h, kind)
	if err != nil {
		return "", err
	}
	return "$O." + ModuleBucket(job) + ".C.claim." + name, nil
}

// ClaimModule claims the production of module h's object of kind: of all
// the callers of a job, exactly one gets true. owner (e.g. "rank 3 pid
// 4711 on host") must be unique per caller; it is recorded for the
// others' messages. The claimant must end with SettleModule.
func (c *Conn) ClaimModule(ctx context.Context, job string, h profile.ModuleHash, kind, owner string) (bool, error) {
	subj, err := claimSubject(job, h, kind)
	if err != nil {
		return false, err
	}
	if _, err := c.moduleStore(ctx, job); err != nil {
		return false, err
	}
	mine := claimHeld + " " + owner
	var won bool
	err = RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		_, err := c.JS.Publish(ctx, subj, []byte(mine), jetstream.WithExpectLastSequencePerSubject(0))
		if isWrongLastSeq(err) {
			// Also what a retried claim whose first acknowledgement was
			// lost sees: then the subject holds our claim, unsettled.
			last, gerr := c.claimState(ctx, job, subj)
			if gerr != nil {
				return gerr
			}
			won = last == mine
			return nil
		}
		won = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("broker: claim %s in %s: %w", subj, ModuleBucket(job), err)
	}
	return won, nil
}

func isWrongLastSeq(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// claimState returns the last message on a claim subject ("" when there
// is none).
func (c *Conn) claimState(ctx context.Context, job, subj string) (string, error) {
	s, err := c.JS.Stream(ctx, "OBJ_"+ModuleBucket(job)) // the object store's stream (ADR-20 naming)
	if err != nil {
		return "", err
	}
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(m.Data), nil
}

// SettleModule ends a claim: failure "" says the object is stored, else
// why the claimant gave up (waiters stop waiting and produce the object
// themselves). A rank that produced the object after the claimant failed
// settles it too.
func (c *Conn) SettleModule(ctx context.Context, job string, h profile.ModuleHash, kind, failure string) error {
	subj, err := claimSubject(job, h, kind)
	if err != nil {
		return err
	}
	v := claimDone
	if failure != "" {
		v = claimFailed + " " + failure
	}
	err = RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		_, err := c.JS.Publish(ctx, subj, []byte(v))
		return err
	})
	if err != nil {
		return fmt.Errorf("broker: settle %s in %s: %w", subj, ModuleBucket(job), err)
	}
	return nil
}

// AwaitPoll bounds the interval between two looks at a claim while
// AwaitModule waits (it starts at a fortieth of it and doubles).
var AwaitPoll = 500 * time.Millisecond

// AwaitModule waits for module h's object of kind: it returns the object
// once stored, ErrModuleNotClaimed if nobody claimed it, ErrModuleAbandoned
// if the claimant failed, and the context's error when ctx ends first
// (bound the wait with it: a claimant that died never settles). It polls:
// waiting needs no consumer, hence no permission beyond the uploads'.
func (c *Conn) AwaitModule(ctx context.Context, job string, h profile.ModuleHash, kind string) ([]byte, error) {
	subj, err := claimSubject(job, h, kind)
	if err != nil {
		return nil, err
	}
	if _, err := c.moduleStore(ctx, job); err != nil {
		return nil, err
	}
	wait := AwaitPoll / 40
	for {
		// The object first: a claimant that stored it and died before
		// settling still delivers.
		data, err := c.GetModule(ctx, job, h, kind)
		if !errors.Is(err, ErrModuleNotFound) {
			return data, err
		}
		st, err := c.claimState(ctx, job, subj)
		switch {
		case err != nil:
			return nil, fmt.Errorf("broker: claim %s in %s: %w", subj, ModuleBucket(job), err)
		case st == "":
			return nil, fmt.Errorf("%w: %s in %s", ErrModuleNotClaimed, kind, ModuleBucket(job))
		case strings.HasPrefix(st, claimFailed):
			return nil, fmt.Errorf("%w: %s: %s", ErrModuleAbandoned, subj, strings.TrimSpace(strings.TrimPrefix(st, claimFailed)))
		case st == claimDone:
			// settled after the object was stored: read it once more
			return c.GetModule(ctx, job, h, kind)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("broker: waiting for %s (%s) in %s: %w", h.String()+"."+kind, st, ModuleBucket(job), ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, AwaitPoll)
	}
}
