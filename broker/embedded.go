package broker

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configures an in-process nats-server.
type EmbeddedOptions struct {
	// Dir holds JetStream's file storage (created user-only if missing).
	Dir string
	// Host to listen on; default the loopback address. gpuprof run listens
	// on a routable address only when ranks run on other hosts, and then
	// with Auth's TLS.
	Host string
	// Port: 0 picks a random free port.
	Port int
	// MaxPayload in bytes; 0 keeps the server's default (1 MiB).
	MaxPayload int32
	// MaxStore bounds JetStream file storage in bytes; 0 lets the server
	// choose from the free disk space.
	MaxStore int64
	// User and Password, when set, are required of every client.
	User, Password string
	// Auth, when set, admits only one job's clients, each in its role, over
	// TLS if Auth has a CA (gpuprof run always sets it).
	Auth *JobAuth
}

// Embedded is a running (or stopped, restartable) in-process broker.
type Embedded struct {
	mu   sync.Mutex
	opts EmbeddedOptions
	srv  *server.Server
	// URL clients connect to; it stays the same across restarts.
	URL string
}

// StartEmbedded starts a JetStream server on a random loopback port with
// its file storage in dir.
func StartEmbedded(dir string) (*Embedded, error) {
	return StartEmbeddedWith(EmbeddedOptions{Dir: dir})
}

// StartEmbeddedWith starts a JetStream server with o.
func StartEmbeddedWith(o EmbeddedOptions) (*Embedded, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("broker: embedded server needs a storage directory")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("broker: storage directory: %w", err)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	e := &Embedded{opts: o}
	if err := e.start(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Embedded) start() error {
	o := e.opts
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	so := &server.Options{}
	if o.Auth != nil {
		var err error
		if so, err = o.Auth.serverOptions(); err != nil {
			return err
		}
	}
	so.ServerName = "gpuprof-embedded"
	so.Host, so.Port = o.Host, port
	so.JetStream, so.StoreDir, so.JetStreamMaxStore = true, o.Dir, o.MaxStore
	so.MaxPayload = o.MaxPayload
	// Reducer nodes of one process share a connection and each fetches
	// megabytes ahead; the default 64 MiB of pending data per client
	// would have the server cut it.
	so.MaxPending = 256 << 20
	so.NoLog, so.NoSigs = true, true
	so.Username, so.Password = o.User, o.Password
	s, err := server.NewServer(so)
	if err != nil {
		return fmt.Errorf("broker: embedded server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("broker: embedded server on %s:%d did not become ready", o.Host, o.Port)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return fmt.Errorf("broker: embedded server started without JetStream (storage %s)", o.Dir)
	}
	// Keep the port for restarts, so clients reconnect to the same URL.
	_, p, err := net.SplitHostPort(s.Addr().String())
	if err != nil {
		s.Shutdown()
		return fmt.Errorf("broker: embedded server address %v: %w", s.Addr(), err)
	}
	e.opts.Port, _ = strconv.Atoi(p)
	e.srv = s
	scheme := "nats://"
	if o.Auth != nil && o.Auth.CA != nil {
		scheme = "tls://"
	}
	e.URL = scheme + net.JoinHostPort(o.Host, p)
	return nil
}

// Server is the running server (nil while stopped).
func (e *Embedded) Server() *server.Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.srv
}

// Dir is the storage directory.
func (e *Embedded) Dir() string { return e.opts.Dir }

// Running reports whether the server is up.
func (e *Embedded) Running() bool { return e.Server() != nil }

// Shutdown stops the server and waits until it has; stored messages stay in
// Dir for a Restart.
func (e *Embedded) Shutdown() {
	e.mu.Lock()
	s := e.srv
	e.srv = nil
	e.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart stops the server if it runs and starts it again on the same port
// with the same storage: streams, consumers and their acknowledgements come
// back from disk, and clients reconnect to the same URL.
func (e *Embedded) Restart() error {
	e.Shutdown()
	e.mu.Lock()
	defer e.mu.Unlock()
	var err error
	// The old listener's port can take a moment to be free again.
	for i := 0; i < 50; i++ {
		if err = e.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Options returns client options for this server: with Auth, the
// reducer's (gpuprof run's own role); ClientOptions gives another role's.
func (e *Embedded) Options(name string) Options {
	if e.opts.Auth != nil {
		return e.ClientOptions(RoleReducer, name)
	}
	return Options{URLs: []string{e.URL}, Name: name, User: e.opts.User, Password: e.opts.Password}
}

// ClientOptions returns role's options for this server (Auth must be set).
func (e *Embedded) ClientOptions(role Role, name string) Options {
	o := e.opts.Auth.ClientOptions(role, name)
	o.URLs = []string{e.URL}
	return o
}

// ClientNames returns the names (Options.Name) of the clients connected
// now, with how many connections carry each: gpuprof run tells a
// collector that exited from one that stalls by it.
func (e *Embedded) ClientNames() (map[string]int, error) {
	s := e.Server()
	if s == nil {
		return nil, fmt.Errorf("broker: the embedded server is stopped")
	}
	cz, err := s.Connz(&server.ConnzOptions{State: server.ConnOpen, Limit: 1 << 20})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, c := range cz.Conns {
		out[c.Name]++
	}
	return out, nil
}
