package rawstream

import (
	"bytes"
	"testing"
)

// MODULE_HASH round-trips, and a decoder that does not know it (any
// extension kind but this one) skips it as the wire format says.
func TestModuleHashFrame(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	mh := &ModuleHash{ModuleID: 3, ContentKey: 0xfeed, Hash: 0x1234567890abcdef, Size: 104 << 20}
	for _, f := range []Frame{&Hello{Version: 3, Mode: ModePCSampling}, mh, &Module{ModuleID: 3, ContentKey: 0xfeed, Size: 104 << 20}, &End{}} {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	raw := b.Bytes()
	d := NewDecoder(bytes.NewReader(raw))
	var got []Frame
	for {
		f, err := d.Next()
		if err != nil {
			break
		}
		got = append(got, f)
	}
	if !d.Ended() || len(got) != 4 {
		t.Fatalf("%d frames", len(got))
	}
	if g, ok := got[1].(*ModuleHash); !ok || *g != *mh || g.Kind().String() != "MODULE_HASH" {
		t.Fatalf("got %#v", got[1])
	}
	// As an old decoder sees it: the same frame under another extension
	// kind is skipped and counted.
	old := bytes.Clone(raw)
	i := bytes.Index(old, []byte{0x00, 0x04, 0x00, 0x00}) // kind 1024, little-endian
	old[i+1] = 0x05                                       // kind 1280
	d = NewDecoder(bytes.NewReader(old))
	n := 0
	for {
		if _, err := d.Next(); err != nil {
			break
		}
		n++
	}
	if !d.Ended() || n != 3 || d.Skipped() != 1 {
		t.Fatalf("%d frames, %d skipped", n, d.Skipped())
	}
}
