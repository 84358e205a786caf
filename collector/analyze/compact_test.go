package analyze

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
)

// TestCompactStreamsSameProfile: a capture whose records are re-encoded as
// the library now writes them (affine addresses, uniform values) gives the
// identical profile: the workers expand compact records, the sequencer
// reads only their headers.
func TestCompactStreamsSameProfile(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/captures/*.redundancy.p1.gpr")
	if len(files) == 0 {
		t.Skip("no captures")
	}
	for _, f := range files {
		base := filepath.Base(f)
		prog := strings.SplitN(base, ".", 2)[0]
		st := &SASS{NVDisasm: "-", Files: []string{filepath.Join("../../testdata/sass", prog)}}
		plain, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w := rawstream.NewWriter(&buf)
		d := rawstream.NewDecoder(bytes.NewReader(plain))
		for {
			fr, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if a, ok := fr.(*rawstream.Access); ok {
				if fr, err = a.Compact(); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Write(fr); err != nil {
				t.Fatal(err)
			}
		}
		if buf.Len() >= len(plain) {
			t.Errorf("%s: compact stream %d bytes, plain %d", base, buf.Len(), len(plain))
		}
		want := analyse(t, plain, 3, 40, st).Encode()
		got := analyse(t, buf.Bytes(), 3, 40, st).Encode()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the compact stream's profile differs from the plain one's", base)
		}
	}
}
