package capture

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
)

// A stream cut inside a frame is trimmed up to its last whole frame and
// the output ends there too (no END is made up); a corrupt one is an
// error naming the file.
func TestTrimCutAndCorruptStreams(t *testing.T) {
	m := synth.NewBigModule(10, 1<<20)
	var whole bytes.Buffer
	if err := synth.WriteBigStream(&whole, m, synth.BigStreamOptions{Launched: []int{2}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut.gpr")
	if err := os.WriteFile(cut, whole.Bytes()[:whole.Len()-40], 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, err := Trim(cut, &out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || r.FunctionsKept != 1 || len(r.Modules) != 1 || len(r.Modules[0].Functions) != 1 {
		t.Fatalf("%+v", r)
	}
	d := rawstream.NewDecoder(&out)
	hashes := 0
	for {
		f, err := d.Next()
		if err != nil {
			re, ok := err.(*rawstream.Error)
			if !ok || !re.Truncated {
				t.Fatalf("the output ends with %v, want a truncation", err)
			}
			break
		}
		switch x := f.(type) {
		case *rawstream.ModuleHash:
			hashes++
			if x.Hash != r.Modules[0].Hash {
				t.Errorf("hash %x, want %x", x.Hash, r.Modules[0].Hash)
			}
		case *rawstream.Module:
			if x.HasBytes || x.Size != uint32(len(m.Cubin)) {
				t.Errorf("module %+v", x)
			}
		}
	}
	if hashes != 1 {
		t.Errorf("%d MODULE_HASH frames", hashes)
	}
	bad := filepath.Join(dir, "bad.gpr")
	b := bytes.Clone(whole.Bytes())
	b[0] = 99 // not HELLO
	os.WriteFile(bad, b, 0o600)
	if _, err := Trim(bad, &out, Options{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("bad.gpr")) {
		t.Errorf("corrupt input: %v", err)
	}
}
