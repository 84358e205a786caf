package broker

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// JobAuth is what a job's embedded broker admits: the job's own account
// with one nkey user per role, generated for this job (WriteJobConfig's
// files, in a user-only directory), and, when the broker listens for other
// hosts, a CA of its own whose certificate the clients verify. Nothing
// else connects: a client without a key, or with another job's, is
// refused, and each role may do only what JobPermissions allows (a
// collector cannot read other ranks' batches, the partials or the final
// profile).
type JobAuth struct {
	*JobConfig
	Dir string
	// CA signs the server's certificate (nil: no TLS, a loopback broker).
	CA *CA
	// ServerTLS is the server's configuration (nil without CA).
	ServerTLS *tls.Config
}

// NewJobAuth writes job's account and keys into dir (created user-only)
// and, if tlsHosts is not empty, makes a CA and a server certificate for
// those names and addresses: the ones collectors on other hosts dial.
func NewJobAuth(dir, job string, tlsHosts []string) (*JobAuth, error) {
	jc, err := WriteJobConfig(dir, job, JobConfigOptions{})
	if err != nil {
		return nil, err
	}
	a := &JobAuth{JobConfig: jc, Dir: dir}
	if len(tlsHosts) > 0 {
		// Valid for a month: longer than a batch job runs.
		if a.CA, err = NewCA("gpuprof job "+job, 30*24*time.Hour); err != nil {
			return nil, fmt.Errorf("broker: job %s: CA: %w", job, err)
		}
		if a.ServerTLS, err = a.CA.ServerTLS(tlsHosts); err != nil {
			return nil, err
		}
		if err := writePrivate(filepath.Join(dir, job+".ca.pem"), a.CA.PEM); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Seed returns role's nkey seed.
func (a *JobAuth) Seed(role Role) (string, error) {
	b, err := os.ReadFile(a.SeedFiles[role])
	if err != nil {
		return "", fmt.Errorf("broker: job %s: %s seed: %w", a.Job, role, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ClientOptions are role's credentials (the seed file, and the CA if the
// broker uses TLS); the caller adds the URLs.
func (a *JobAuth) ClientOptions(role Role, name string) Options {
	o := Options{Name: name, NKeySeedFile: a.SeedFiles[role], InboxPrefix: InboxPrefix(a.Job, role)}
	if a.CA != nil {
		o.CAPEM = a.CA.PEM
	}
	return o
}

// serverOptions are the server options that admit only the job: its
// account and users, read back from the configuration WriteJobConfig
// wrote (so the embedded broker enforces exactly what a cluster given
// gpuprof nats-config's files does), and TLS.
func (a *JobAuth) serverOptions() (*server.Options, error) {
	conf := filepath.Join(a.Dir, a.Job+".embedded.conf")
	body := fmt.Sprintf("# gpuprof run's embedded broker for job %s\naccounts {\n  include %q\n}\n", a.Job, AccountsFileName(a.Job))
	if err := writePrivate(conf, []byte(body)); err != nil {
		return nil, err
	}
	so, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("broker: job %s: embedded broker configuration: %w", a.Job, err)
	}
	if a.ServerTLS != nil {
		so.TLSConfig = a.ServerTLS.Clone()
		so.TLS = true
		so.TLSTimeout = 5
	}
	return so, nil
}
