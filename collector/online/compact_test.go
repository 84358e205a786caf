package online

import (
	"bytes"
	"testing"

	"gpuprof/collector/rawstream"
)

// TestCompactStreamsSameProfile: a capture whose records are re-encoded as
// the library now writes them (affine addresses, uniform values) gives the
// identical profile: the workers expand compact records, the sequencer
// reads only their headers.
func TestCompactStreamsSameProfile(t *testing.T) {
	for _, c := range loadCaptures(t, captureGlob("*.redundancy.p1.gpr")) {
		base, plain, st := c.name, c.data, c.st
		compact, err := rawstream.CompactStream(plain)
		if err != nil {
			t.Fatal(err)
		}
		if len(compact) >= len(plain) {
			t.Errorf("%s: compact stream %d bytes, plain %d", base, len(compact), len(plain))
		}
		want := analyse(t, plain, 3, 40, st).Encode()
		got := analyse(t, compact, 3, 40, st).Encode()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the compact stream's profile differs from the plain one's", base)
		}
	}
}
