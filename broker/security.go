package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Role is what a client of a job may do on an external cluster.
type Role string

const (
	// RoleCollector publishes one job's batches, done items and status
	// heartbeats and uploads its GPU modules; nothing else.
	RoleCollector Role = "collector"
	// RoleReducer is gpuprof run and gpuprof reduce: it creates the job's
	// stream and module bucket, consumes, publishes partials and the final
	// profile, purges, and reads modules, all within the job.
	RoleReducer Role = "reducer"
)

// Roles lists the roles in the order configs name them.
var Roles = []Role{RoleCollector, RoleReducer}

// JobAccount is the NATS account of job on a cluster configured by
// WriteJobConfig. An account per job keeps jobs apart twice: subjects and
// streams are per account, and within it each role's permissions.
func JobAccount(job string) string { return "GPUPROF_" + job }

// InboxPrefix is the reply-subject prefix of a job's clients in role:
// JetStream answers requests there, so the permissions let each role
// subscribe to its own inboxes only (a collector cannot read the
// deliveries its job's reducers fetch).
func InboxPrefix(job string, role Role) string {
	return "_GPUPROF_INBOX." + job + "." + string(role)
}

// ModuleStream is the stream behind job's module bucket.
func ModuleStream(job string) string { return "OBJ_" + ModuleBucket(job) }

// Permissions are the subjects a client may publish and subscribe to;
// anything else is refused by the server.
type Permissions struct {
	Publish, Subscribe []string
}

// JobPermissions returns the allow lists of role in job: what the role's
// clients use on the broker (checked against the real server in the
// cluster tests), scoped to the job's subjects, stream and module bucket.
func JobPermissions(job string, role Role) (Permissions, error) {
	if err := ValidateJob(job); err != nil {
		return Permissions{}, err
	}
	stream, tree, mod := StreamName(job), TreeStreamName(job), ModuleStream(job)
	modData := "$O." + ModuleBucket(job) + ".>"
	inbox := InboxPrefix(job, role) + ".>"
	switch role {
	case RoleCollector:
		return Permissions{
			Publish: []string{
				SubjectPrefix + "." + job + ".batch.*",
				SubjectPrefix + "." + job + ".done.*",
				StatusSubjects(job),
				// Module uploads: chunks and metadata, the bucket's
				// lookup, an existing object's metadata, and the purge of
				// a replaced object's chunks (two ranks racing to upload
				// the same module).
				modData,
				"$JS.API.STREAM.INFO." + mod,
				"$JS.API.STREAM.MSG.GET." + mod,
				"$JS.API.STREAM.PURGE." + mod,
				"$JS.API.DIRECT.GET." + mod,
				"$JS.API.DIRECT.GET." + mod + ".>",
				// Reading a listing another rank stored: the object store
				// reads an object's chunks through an ordered consumer
				// (create, its flow control). Without these a rank waiting
				// for the listing retried the denied read until its
				// structure bound, 30 s, and placed the kernel flat.
				"$JS.API.CONSUMER.*." + mod,
				"$JS.API.CONSUMER.*." + mod + ".>",
				"$JS.FC." + mod + ".>",
			},
			Subscribe: []string{inbox},
		}, nil
	case RoleReducer:
		var pub []string
		pub = append(pub, SubjectPrefix+"."+job+".>", modData, "$JS.API.INFO")
		for _, s := range []string{stream, tree, mod} {
			pub = append(pub,
				"$JS.API.STREAM.*."+s,     // create, update, info, delete, purge
				"$JS.API.STREAM.MSG.*."+s, // get, delete
				"$JS.API.DIRECT.GET."+s,
				"$JS.API.DIRECT.GET."+s+".>",
				"$JS.API.CONSUMER.*."+s,        // ephemeral create, names, list
				"$JS.API.CONSUMER.*."+s+".>",   // create, info, delete
				"$JS.API.CONSUMER.*.*."+s+".>", // durable create, next message
				"$JS.ACK."+s+".>",
				"$JS.FC."+s+".>",
			)
		}
		// The collectors' status heartbeats: gpuprof run follows them.
		return Permissions{Publish: pub, Subscribe: []string{inbox, StatusSubjects(job)}}, nil
	}
	return Permissions{}, fmt.Errorf("broker: unknown role %q (want %s or %s)", role, RoleCollector, RoleReducer)
}

// JobConfigOptions tune WriteJobConfig.
type JobConfigOptions struct {
	// MaxFileStore bounds the job account's JetStream file storage in
	// bytes (0: the server's limits only).
	MaxFileStore int64
}

// JobConfig is what WriteJobConfig wrote.
type JobConfig struct {
	Job     string
	Account string
	// AccountsFile is the server configuration fragment: one account
	// with a user per role, to include inside the server's accounts block.
	AccountsFile string
	// SeedFiles are the clients' nkey seeds per role (mode 0600), for
	// Options.NKeySeedFile (--nkey, --collector-nkey).
	SeedFiles map[Role]string
	// PublicKeys are the users' public nkeys per role.
	PublicKeys map[Role]string
}

// AccountsFileName and SeedFileName name WriteJobConfig's files in its
// directory.
func AccountsFileName(job string) string        { return job + ".accounts.conf" }
func SeedFileName(job string, role Role) string { return job + "." + string(role) + ".nk" }

// WriteJobConfig generates a fresh user nkey per role for job and writes,
// into dir (created user-only), the clients' seed files and the server
// configuration fragment that defines the job's account with those users
// and JobPermissions. Every file is written user-only; existing files of
// the same job are replaced, so running it again revokes the old keys once
// the servers reload.
func WriteJobConfig(dir, job string, o JobConfigOptions) (*JobConfig, error) {
	if err := ValidateJob(job); err != nil {
		return nil, err
	}
	if o.MaxFileStore < 0 {
		return nil, fmt.Errorf("broker: job %s: negative max file store %d", job, o.MaxFileStore)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("broker: nats config directory: %w", err)
	}
	jc := &JobConfig{Job: job, Account: JobAccount(job), AccountsFile: filepath.Join(dir, AccountsFileName(job)),
		SeedFiles: map[Role]string{}, PublicKeys: map[Role]string{}}
	var b strings.Builder
	fmt.Fprintf(&b, "# gpuprof job %s: account, users and permissions (generated by gpuprof nats-config).\n", job)
	fmt.Fprintf(&b, "# Include it inside the servers' accounts block and reload them:\n")
	fmt.Fprintf(&b, "#   accounts { include %q }\n", AccountsFileName(job))
	fmt.Fprintf(&b, "%s: {\n", jc.Account)
	if o.MaxFileStore > 0 {
		fmt.Fprintf(&b, "  jetstream: { max_file: %d, max_mem: 0 }\n", o.MaxFileStore)
	} else {
		fmt.Fprintf(&b, "  jetstream: enabled\n")
	}
	fmt.Fprintf(&b, "  users: [\n")
	for _, role := range Roles {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("broker: job %s: %s nkey: %w", job, role, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		seedFile := filepath.Join(dir, SeedFileName(job, role))
		err = writePrivate(seedFile, append(append([]byte{}, seed...), '\n'))
		kp.Wipe() // seed is the key pair's own slice: wiped with it
		if err != nil {
			return nil, err
		}
		jc.SeedFiles[role], jc.PublicKeys[role] = seedFile, pub
		perm, err := JobPermissions(job, role)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "    # %s (seed in %s)\n", role, SeedFileName(job, role))
		fmt.Fprintf(&b, "    { nkey: %q, permissions: {\n", pub)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", confList(perm.Publish))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", confList(perm.Subscribe))
		fmt.Fprintf(&b, "    } }\n")
	}
	fmt.Fprintf(&b, "  ]\n}\n")
	if err := writePrivate(jc.AccountsFile, []byte(b.String())); err != nil {
		return nil, err
	}
	return jc, nil
}

// confList writes subjects as a server-config array of double-quoted
// strings: quoted, '$' starts no variable and '>' no map.
func confList(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// writePrivate writes data to path user-only, replacing it atomically, so
// a seed is never readable by others, not even while being written.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	return nil
}

// EnsureModuleBucket creates job's module bucket with replicas copies if
// it does not exist. gpuprof run calls it before the collectors start:
// collectors may not create streams, and the bucket needs the cluster's
// replica count to survive a node.
func (c *Conn) EnsureModuleBucket(ctx context.Context, job string, replicas int) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	err := RetryAPI(ctx, DefaultRetry, func(ctx context.Context) error {
		_, err := c.JS.ObjectStore(ctx, ModuleBucket(job))
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = c.JS.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket:      ModuleBucket(job),
				Description: "gpuprof job " + job + ": GPU modules by content hash",
				Storage:     jetstream.FileStorage,
				Replicas:    max(replicas, 1),
			})
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = nil // created meanwhile by another process of the job
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("broker: module bucket %s: %w", ModuleBucket(job), err)
	}
	return nil
}
