package broker

import (
	"context"
	"errors"
	"fmt"

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
	err := Retry(ctx, DefaultRetry, func() error {
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
	err = Retry(ctx, DefaultRetry, func() error {
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
