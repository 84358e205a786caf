package brokertest

import (
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"gpuprof/broker"
)

// CA is a throwaway certificate authority for test clusters.
type CA struct{ *broker.CA }

// NewCA creates a self-signed CA valid for a day.
func NewCA(name string) (*CA, error) {
	ca, err := broker.NewCA(name, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	return &CA{ca}, nil
}

// WriteFiles writes the CA certificate to caFile and, if certFile is not
// empty, a certificate for hosts with its key; all user-only.
func (ca *CA) WriteFiles(caFile, certFile, keyFile string, hosts []string) error {
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		return err
	}
	if certFile == "" {
		return nil
	}
	c, k, err := ca.Issue(hosts[0], hosts)
	if err != nil {
		return fmt.Errorf("brokertest: certificate for %v: %w", hosts, err)
	}
	if err := os.WriteFile(certFile, c, 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyFile, k, 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}
