package brokertest

import (
	"strings"
	"testing"

	"gpuprof/broker"
)

// ExpectRefused checks that a client with options o cannot connect, with
// an error saying one of words (lower case): what a broker that admits
// only its job tells a stranger.
func ExpectRefused(t testing.TB, what string, o broker.Options, words ...string) {
	t.Helper()
	c, err := broker.Connect(o)
	if err == nil {
		c.Close()
		t.Fatalf("%s: connected", what)
	}
	for _, w := range words {
		if strings.Contains(strings.ToLower(err.Error()), w) {
			t.Logf("%s: refused: %v", what, err)
			return
		}
	}
	t.Fatalf("%s: error %q does not say any of %q", what, err, words)
}
