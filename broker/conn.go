package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Options says how to reach a broker: the embedded one (Embedded.Options)
// or an existing cluster.
type Options struct {
	// URLs of the servers (several of one cluster for failover); an entry
	// may itself be a comma-separated list, as --nats takes it.
	URLs []string
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string
	// NKeySeedFile authenticates with an nkey seed instead; NKeySeed is the
	// seed itself (a job's collectors get theirs in the environment, from
	// gpuprof run through the launcher).
	NKeySeedFile, NKeySeed string
	// User and Password, or Token, for servers configured with them.
	User, Password, Token string
	// CAFile verifies the servers' TLS certificates; CertFile and KeyFile
	// are this client's certificate for servers that verify clients.
	CAFile, CertFile, KeyFile string
	// CAPEM verifies the servers' certificates as CAFile does, from the
	// certificate itself (a job's own CA, handed to its collectors in the
	// environment).
	CAPEM []byte
	// Name shows in the server's connection list ("gpuprof collect rank 3").
	Name string
	// InboxPrefix replaces "_INBOX" for reply subjects (InboxPrefix(job,
	// role)), so per-job permissions can confine each role to its own
	// replies; empty keeps the default.
	InboxPrefix string
	// ConnectTimeout bounds the first connection (default 10s).
	ConnectTimeout time.Duration
	// ReconnectWait between reconnection attempts (default 250ms); a client
	// keeps trying for ever, since a broker restart must not lose a rank.
	ReconnectWait time.Duration
}

// HeaderRoom is what a message's NATS headers (message id and the like) may
// take of the server's max payload, which counts headers too.
const HeaderRoom = 1024

// Conn is a connection with its JetStream context.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream

	// Replicas of the buckets this connection creates (1 on a single
	// server, 3 on a cluster); streams take theirs from StreamOptions.
	Replicas int

	mu       sync.Mutex
	asyncErr error
	modules  map[string]jetstream.ObjectStore
}

// Connect reaches the broker described by o.
func Connect(o Options) (*Conn, error) {
	var urls []string
	for _, u := range o.URLs {
		for _, s := range strings.Split(u, ",") {
			if s = strings.TrimSpace(s); s != "" {
				urls = append(urls, s)
			}
		}
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("broker: no server URL")
	}
	c := &Conn{}
	wait := o.ReconnectWait
	if wait == 0 {
		wait = 250 * time.Millisecond
	}
	timeout := o.ConnectTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(wait),
		nats.ReconnectJitter(50*time.Millisecond, 200*time.Millisecond),
		nats.Timeout(timeout),
		// Buffer publishes while reconnecting; past this the publisher sees
		// an error and retries rather than losing the message.
		nats.ReconnectBufSize(32 << 20),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// Permission violations arrive here, not at the publish: keep
			// the last one so a publish that times out can name it.
			c.mu.Lock()
			c.asyncErr = err
			c.mu.Unlock()
		}),
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		nk, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("broker: nkey seed %s: %w", o.NKeySeedFile, err)
		}
		opts = append(opts, nk)
	}
	if o.NKeySeed != "" {
		nk, err := nkeyOption(o.NKeySeed)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nk)
	}
	if len(o.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.CAPEM) {
			return nil, fmt.Errorf("broker: the CA certificate given holds no PEM certificate")
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, fmt.Errorf("broker: TLS client certificate needs both a certificate and a key file")
		}
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect to %s: %w", strings.Join(urls, ","), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: JetStream on %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	c.NC, c.JS = nc, js
	return c, nil
}

// NewJetStream returns another JetStream context on the same connection,
// with its own asynchronous publish bookkeeping (ackTimeout bounds the wait
// for each publish acknowledgement).
func (c *Conn) NewJetStream(ackTimeout time.Duration) (jetstream.JetStream, error) {
	return jetstream.New(c.NC, jetstream.WithPublishAsyncMaxPending(1<<16), jetstream.WithPublishAsyncTimeout(ackTimeout))
}

// Close closes the connection.
func (c *Conn) Close() { c.NC.Close() }

// AsyncErr is the last error the server sent outside a request (a
// permission violation, a slow consumer), or nil.
func (c *Conn) AsyncErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncErr
}

// MaxPayload is the server's max payload (headers included).
func (c *Conn) MaxPayload() int { return int(c.NC.MaxPayload()) }

// ChunkPayload is the largest message body to publish: the server's max
// payload less HeaderRoom.
func (c *Conn) ChunkPayload() int { return max(c.MaxPayload()-HeaderRoom, 4096) }

// StreamOptions are a job's stream limits.
type StreamOptions struct {
	// Replicas: 1 on a single server, 3 on a cluster.
	Replicas int
	// MaxBytes bounds the job's two streams together (default
	// DefaultStreamMaxBytes; -1: no limit but the server's): the tree
	// stream (partials, final) gets a quarter, the input stream (batches)
	// the rest. When the input stream is full, publishes are refused
	// (discard new) and publishers back off and retry: an overfull broker
	// pushes back instead of dropping data, and the reducers, whose
	// partials go to the other stream, keep merging and purging.
	MaxBytes int64
	// Duplicates is how long a message id is remembered, so a retried
	// publish is stored once; it must exceed the publishers' retry horizon
	// (default DefaultDuplicates).
	Duplicates time.Duration
	// MaxAge drops messages older than this (0: kept until the job's
	// streams are deleted).
	MaxAge time.Duration
}

const (
	// DefaultStreamMaxBytes bounds a job's streams unless told otherwise.
	DefaultStreamMaxBytes = 8 << 30
	// DefaultDuplicates is the streams' duplicate window.
	DefaultDuplicates = 10 * time.Minute
)

// EnsureStream creates job's streams (or updates them to these limits)
// with replicas copies and the default limits.
func (c *Conn) EnsureStream(ctx context.Context, job string, replicas int) (jetstream.Stream, error) {
	return c.EnsureStreamWith(ctx, job, StreamOptions{Replicas: replicas})
}

// StreamConfig is the configuration of job's input stream
// (StreamName: batches, done items, end signal).
func StreamConfig(job string, o StreamOptions) jetstream.StreamConfig {
	cfg := streamConfig(StreamName(job), "gpuprof job "+job+": batches, done items, end signal", InputSubjects(job), o)
	if cfg.MaxBytes > 0 {
		cfg.MaxBytes -= treeBytes(cfg.MaxBytes)
	}
	return cfg
}

// TreeStreamConfig is the configuration of job's tree stream
// (TreeStreamName: partials, final profile).
func TreeStreamConfig(job string, o StreamOptions) jetstream.StreamConfig {
	cfg := streamConfig(TreeStreamName(job), "gpuprof job "+job+": reducers' partials, final profile", TreeSubjects(job), o)
	if cfg.MaxBytes > 0 {
		cfg.MaxBytes = treeBytes(cfg.MaxBytes)
	}
	return cfg
}

// treeBytes is the tree stream's share of a job's byte limit.
func treeBytes(total int64) int64 { return max(total/4, 1) }

func streamConfig(name, desc string, subjects []string, o StreamOptions) jetstream.StreamConfig {
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultStreamMaxBytes
	}
	if o.Duplicates == 0 {
		o.Duplicates = DefaultDuplicates
	}
	return jetstream.StreamConfig{
		Name:        name,
		Description: desc,
		Subjects:    subjects,
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    o.MaxBytes,
		MaxMsgs:     -1,
		MaxAge:      o.MaxAge,
		Duplicates:  o.Duplicates,
		// Reducers delete superseded partials and purge merged batches.
		DenyDelete: false,
		DenyPurge:  false,
	}
}

// EnsureStreamWith creates or updates job's two streams with o and returns
// the input stream.
func (c *Conn) EnsureStreamWith(ctx context.Context, job string, o StreamOptions) (jetstream.Stream, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	// The input stream first: one made by an older version holds every
	// subject of the job, which the tree stream's would overlap.
	var in jetstream.Stream
	for i, cfg := range []jetstream.StreamConfig{StreamConfig(job, o), TreeStreamConfig(job, o)} {
		var s jetstream.Stream
		err := RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
			var err error
			s, err = c.JS.CreateOrUpdateStream(ctx, cfg)
			return err
		})
		if err != nil {
			var ae *jetstream.APIError
			// 10047: the account's or server's storage cannot reserve the
			// limit, which counts once per replica.
			if errors.As(err, &ae) && (ae.Code == 400 || ae.ErrorCode == 10047) && cfg.MaxBytes > 0 {
				return nil, fmt.Errorf("broker: stream %s (max %d bytes, %d replicas): %w (a smaller stream limit may fit the server or account)", cfg.Name, cfg.MaxBytes, cfg.Replicas, err)
			}
			return nil, fmt.Errorf("broker: stream %s: %w", cfg.Name, err)
		}
		if i == 0 {
			in = s
		}
	}
	return in, nil
}

// Stream returns job's existing input stream.
func (c *Conn) Stream(ctx context.Context, job string) (jetstream.Stream, error) {
	return c.stream(ctx, job, StreamName(job))
}

// TreeStream returns job's existing tree stream.
func (c *Conn) TreeStream(ctx context.Context, job string) (jetstream.Stream, error) {
	return c.stream(ctx, job, TreeStreamName(job))
}

func (c *Conn) stream(ctx context.Context, job, name string) (jetstream.Stream, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	var s jetstream.Stream
	err := RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		var err error
		s, err = c.JS.Stream(ctx, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("broker: stream %s: %w", name, err)
	}
	return s, nil
}

// DeleteJob removes job's streams (with their consumers) and module bucket.
func (c *Conn) DeleteJob(ctx context.Context, job string) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	for _, name := range []string{StreamName(job), TreeStreamName(job)} {
		err := c.JS.DeleteStream(ctx, name)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("broker: delete stream %s: %w", name, err)
		}
	}
	err := c.JS.DeleteObjectStore(ctx, ModuleBucket(job))
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("broker: delete bucket %s: %w", ModuleBucket(job), err)
	}
	return nil
}

// nkeyOption authenticates with the nkey seed given as text. The key pair
// signs the server's nonce; the seed is not kept in the options.
func nkeyOption(seed string) (nats.Option, error) {
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(seed)))
	if err != nil {
		return nil, fmt.Errorf("broker: nkey seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("broker: nkey seed: %w", err)
	}
	return nats.Nkey(pub, kp.Sign), nil
}
