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
	caps := loadCaptures(t, captureGlob("*.redundancy.p1.gpr"))
	// A PyTorch training step: framework kernels nobody here wrote, with
	// vector and 16-byte accesses the test programs do not have.
	for _, c := range loadCaptures(t, captureGlob("torch_train.redundancy.gpr")) {
		c.st = &SASS{NVDisasm: "-", Files: []string{"../../testdata/sass/torch"}}
		caps = append(caps, c)
	}
	for _, c := range caps {
		// The PyTorch capture was recorded compact: its plain twin is its
		// records expanded.
		base, plain, st := c.name, plainStream(t, c.data), c.st
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

// plainStream is stream with every compact record written plain.
func plainStream(t *testing.T, stream []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := rawstream.NewWriter(&out)
	fs, _, _ := decodeAll(t, stream)
	for _, f := range fs {
		if a, ok := f.(*rawstream.Access); ok {
			p := &rawstream.Access{LaunchID: a.LaunchID}
			for it := a.Records(); it.Next(); {
				p.Append(it.Record())
			}
			f = p
		}
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}
