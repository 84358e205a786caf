// Package brokertest runs a real NATS cluster for tests: nodes are
// separate OS processes (the test binary itself, re-executed), clustered
// with JetStream file storage, TLS from a CA made for the test, and the
// per-job accounts and permissions that gpuprof generates. A node can be
// killed with SIGKILL and restarted on its store, as a machine of a real
// cluster would.
//
// Importing the package is enough for a test binary to act as a node:
// its init runs the node when the harness re-executes the binary, so test
// packages need no TestMain of their own.
package brokertest

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// nodeEnv carries a node's configuration file to the re-executed binary.
const nodeEnv = "GPUPROF_BROKERTEST_NODE"

func init() {
	if conf := os.Getenv(nodeEnv); conf != "" {
		os.Exit(runNode(conf))
	}
}

// runNode runs nats-server with the configuration file conf until it is
// signalled or its parent (the test) goes away.
func runNode(conf string) int {
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "brokertest node: %v\n", err)
		return 2
	}
	opts.ConfigFile = conf
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "brokertest node: %v\n", err)
		return 2
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		fmt.Fprintf(os.Stderr, "brokertest node: %v\n", err)
		return 2
	}
	// A test killed by its timeout runs no cleanup: a node whose parent
	// died shuts itself down rather than outlive the test.
	parent := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != parent {
				s.Shutdown()
				return
			}
		}
	}()
	s.WaitForShutdown()
	return 0
}
