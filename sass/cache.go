package sass

import "sync"

// Cache holds modules by content hash and loads each at most once at a
// time: concurrent Gets of a missing key wait for a single call of the
// loader. A failed load is not cached, so a later Get tries again.
// Modules are kept until Delete; a job has few distinct cubins.
type Cache struct {
	load    func(key string) (*Module, error)
	mu      sync.Mutex
	entries map[string]*cacheEntry
}

type cacheEntry struct {
	done chan struct{}
	m    *Module
	err  error
}

// NewCache returns a cache that calls load for keys it does not hold. The
// loader typically fetches the parsed module from the broker (Decode), or
// runs nvdisasm on the cubin and publishes the result.
func NewCache(load func(key string) (*Module, error)) *Cache {
	return &Cache{load: load, entries: make(map[string]*cacheEntry)}
}

// Get returns the module for key, loading it if needed.
func (c *Cache) Get(key string) (*Module, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.mu.Unlock()
		<-e.done
		return e.m, e.err
	}
	e := &cacheEntry{done: make(chan struct{})}
	c.entries[key] = e
	c.mu.Unlock()

	func() {
		defer func() {
			if r := recover(); r != nil {
				e.err = &FormatError{Offset: -1, Msg: "module loader panicked"}
			}
		}()
		if c.load == nil {
			e.err = &FormatError{Offset: -1, Msg: "no loader for module " + key}
			return
		}
		e.m, e.err = c.load(key)
	}()
	if e.err == nil && e.m == nil {
		e.err = &FormatError{Offset: -1, Msg: "loader returned no module for " + key}
	}
	if e.err != nil {
		c.mu.Lock()
		if c.entries[key] == e {
			delete(c.entries, key)
		}
		c.mu.Unlock()
	}
	close(e.done)
	return e.m, e.err
}

// Lookup returns the module for key if it is loaded, without loading.
func (c *Cache) Lookup(key string) (*Module, bool) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-e.done:
		return e.m, e.err == nil
	default:
		return nil, false
	}
}

// Add stores a module under key, replacing what was there.
func (c *Cache) Add(key string, m *Module) {
	e := &cacheEntry{done: make(chan struct{}), m: m}
	close(e.done)
	c.mu.Lock()
	c.entries[key] = e
	c.mu.Unlock()
}

// Delete forgets key.
func (c *Cache) Delete(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// Len returns the number of modules held or being loaded.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
