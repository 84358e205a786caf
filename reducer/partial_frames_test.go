package reducer

import (
	"bytes"
	"testing"

	"gpuprof/profile"
	"gpuprof/profile/chunk"
	"gpuprof/profile/proftest"
)

// A partial large enough to be compressed as several zstd frames in
// parallel decodes to the same profile, and a corrupted frame is an error
// naming the node.
func TestPartialFrames(t *testing.T) {
	old := zframe
	zframe = 512
	defer func() { zframe = old }()
	p := profile.New("job")
	for r := int32(0); r < 4; r++ {
		for _, it := range proftest.Rank("job", 2, proftest.Small, r, 1) {
			if err := p.Merge(it); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw := p.Encode()
	if len(raw) < 8*zframe {
		t.Fatalf("profile of %d bytes: too small for several frames", len(raw))
	}
	chunks, _, err := encodePartial(partialHeader{Envelope: chunk.Envelope{Job: "job"}, Level: 1, Node: 2}, p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parsePartialHeader(chunks[0])
	if err != nil {
		t.Fatal(err)
	}
	body := chunks[0][h.PayloadOffset:]
	if bytes.Count(body, []byte{0x28, 0xb5, 0x2f, 0xfd}) < len(raw)/zframe {
		t.Fatalf("%d bytes compressed without the frames expected", len(raw))
	}
	q, err := decodePartial(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(q.Encode(), raw) {
		t.Fatal("a partial in several frames decodes to another profile")
	}
	bad := append([]byte(nil), body...)
	bad[len(bad)/2] ^= 0xff
	if _, err := decodePartial(h, bad); err == nil {
		t.Fatal("a corrupted frame decoded")
	}
}
