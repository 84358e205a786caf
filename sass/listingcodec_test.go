package sass

import (
	"bytes"
	"strings"
	"testing"
)

func TestListingCodec(t *testing.T) {
	text := []byte(strings.Repeat("        /*0010*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;\n", 100))
	enc := EncodeListing(text)
	if len(enc) >= len(text) {
		t.Errorf("encoded %d bytes into %d", len(text), len(enc))
	}
	got, err := DecodeListing(enc)
	if err != nil || !bytes.Equal(got, text) {
		t.Fatalf("round trip: %v, %d bytes back of %d", err, len(got), len(text))
	}
	if _, err := DecodeListing([]byte("not zstd")); err == nil || !strings.Contains(err.Error(), "nvdisasm listing") {
		t.Errorf("garbage decoded: %v", err)
	}
}
