package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"gpuprof/collector/online"
)

// ValueKeyEnv carries the job's value-hashing key from gpuprof run to its
// collectors (--no-values): in the environment, never on a command line.
const ValueKeyEnv = "GPUPROF_VALUE_KEY"

// newValueKey makes a job's value-hashing key, hex-encoded.
func newValueKey() string {
	k := make([]byte, online.ValueKeyLen)
	rand.Read(k)
	return hex.EncodeToString(k)
}

// valueHasher is the hasher of collect --no-values: keyed by the job's key
// from gpuprof run, or by a key of this rank's own when collect runs alone
// (one rank: its hashes need match no other's). The key leaves the
// environment, so the application does not inherit it.
func valueHasher() (*online.ValueHasher, error) {
	key := os.Getenv(ValueKeyEnv)
	os.Unsetenv(ValueKeyEnv)
	if key == "" {
		key = newValueKey()
	}
	k, err := hex.DecodeString(key)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", ValueKeyEnv, err)
	}
	return online.NewValueHasher(k)
}
