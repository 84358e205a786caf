package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gpuprof/broker"
)

func init() {
	register("nats-config", "write a job's NATS account, permissions and client keys for an external cluster", cmdNATSConfig)
}

func cmdNATSConfig(args []string) error {
	fs := newFlags("nats-config", "[--job J] -o DIR [flags]", `
Writes what an external NATS cluster needs to run one job with per-job
permissions, all user-only, into DIR:

  J.accounts.conf   the job's account (JetStream enabled) with two nkey
                    users: the collector may publish only the job's batches,
                    done items and status heartbeats and upload its GPU
                    modules; the reducer
                    (gpuprof run, gpuprof reduce) manages only the job's
                    stream and module bucket. Each may subscribe only to its
                    own reply inboxes.
  J.collector.nk    the collectors' nkey seed (--collector-nkey of run)
  J.reducer.nk      the reducer's nkey seed (--nkey of run and reduce)

The administrator includes the account in every server's configuration
(inside the accounts block: accounts { include "J.accounts.conf" }) and
reloads the servers (nats-server --signal reload). Running it again for the
same job makes new keys; the old ones stop working at the next reload.
docs/cluster.md has the whole procedure.`)
	job := fs.String("job", "", "job id (default: generated, and printed)")
	out := fs.String("o", "", "directory to write into (created user-only)")
	maxStore := fs.Int64("max-file-store", 0, "bound the job account's JetStream file storage to this many bytes (0: the servers' limits only)")
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if *out == "" {
		printUsage(fs)
		return errors.New("-o DIR is required")
	}
	if *job == "" {
		*job = newJobID()
	}
	jc, err := broker.WriteJobConfig(*out, *job, broker.JobConfigOptions{MaxFileStore: *maxStore})
	if err != nil {
		return err
	}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	fmt.Fprintf(os.Stdout, `job %s: account %s
  %s  server configuration: include it inside every server's accounts block, then reload
  %s  collector seed (user %s)
  %s  reducer seed (user %s)
run the job with:
  gpuprof run --job %s --nats URLS --tls-ca CA.pem --replicas 3 \
    --nkey %s --collector-nkey %s -- LAUNCHER ...
`, jc.Job, jc.Account, abs(jc.AccountsFile),
		abs(jc.SeedFiles[broker.RoleCollector]), jc.PublicKeys[broker.RoleCollector],
		abs(jc.SeedFiles[broker.RoleReducer]), jc.PublicKeys[broker.RoleReducer],
		jc.Job, abs(jc.SeedFiles[broker.RoleReducer]), abs(jc.SeedFiles[broker.RoleCollector]))
	return nil
}
