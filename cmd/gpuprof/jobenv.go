package main

import (
	"fmt"
	"os"
	"strings"

	"gpuprof/broker"
)

// How gpuprof run hands a job's broker to its ranks: in the environment,
// which launchers forward (mpirun -x, srun --export, torchrun's workers
// inherit it), never on a command line that ps shows every user.
const (
	JobEnv  = "GPUPROF_JOB"
	NATSEnv = "GPUPROF_NATS"
	// NKeySeedEnv is the collector role's nkey seed itself.
	NKeySeedEnv = "GPUPROF_NKEY_SEED"
	// CAEnv is the PEM certificate of the CA the broker's certificate is
	// verified with (the job's own, when ranks run on other hosts).
	CAEnv = "GPUPROF_NATS_CA_PEM"
)

// secretEnv lists the variables a collector takes out of its environment
// once read, so the application it starts does not inherit them.
var secretEnv = []string{NKeySeedEnv, "GPUPROF_NATS_PASSWORD", ValueKeyEnv}

// envCredentials completes o from the environment gpuprof run set: the
// seed (unless a seed file or credentials file was given) and the CA.
func envCredentials(o *broker.Options) {
	if s := os.Getenv(NKeySeedEnv); s != "" && o.NKeySeedFile == "" && o.CredsFile == "" {
		o.NKeySeed = s
	}
	if pem := os.Getenv(CAEnv); pem != "" && o.CAFile == "" {
		o.CAPEM = []byte(pem)
	}
	for _, v := range secretEnv {
		if v != ValueKeyEnv { // valueHasher reads it later
			os.Unsetenv(v)
		}
	}
}

// rankEnv is what run gives its ranks for the broker bo, with the
// collectors' credentials: NAME=value entries, and the names, for
// launchers that forward variables by name.
func rankEnv(job string, bo broker.Options) ([]string, error) {
	env := []string{JobEnv + "=" + job, NATSEnv + "=" + strings.Join(bo.URLs, ",")}
	switch {
	case bo.NKeySeed != "":
		env = append(env, NKeySeedEnv+"="+bo.NKeySeed)
	case bo.NKeySeedFile != "":
		b, err := os.ReadFile(bo.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("the collectors' nkey seed: %w", err)
		}
		env = append(env, NKeySeedEnv+"="+strings.TrimSpace(string(b)))
	}
	if len(bo.CAPEM) > 0 {
		env = append(env, CAEnv+"="+string(bo.CAPEM))
	}
	if bo.Password != "" {
		env = append(env, "GPUPROF_NATS_PASSWORD="+bo.Password)
	}
	return env, nil
}

// envNames are the names of NAME=value entries.
func envNames(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		out = append(out, name)
	}
	return out
}
