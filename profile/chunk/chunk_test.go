package chunk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A test format: an 8-byte header (chunk, chunks, job length) and the job.
func testHead(b []byte, e *Envelope) []byte {
	b = binary.LittleEndian.AppendUint16(b, e.Chunk)
	b = binary.LittleEndian.AppendUint16(b, e.Chunks)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Job)))
	return append(b, e.Job...)
}

func testParse(t *testing.T, sealed Envelope, msg []byte) *Envelope {
	t.Helper()
	e := sealed
	e.Chunk, e.Chunks = binary.LittleEndian.Uint16(msg), binary.LittleEndian.Uint16(msg[2:])
	e.PayloadOffset = 8 + int(binary.LittleEndian.Uint32(msg[4:]))
	if err := e.CheckChunk(0); err != nil {
		t.Fatal(err)
	}
	return &e
}

// Bodies of every size cut into chunks of every payload come back whole,
// with the chunks in any order and some of them twice, and decompress to
// what was compressed, in one frame or in several.
func TestSplitAssemble(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCompressor(zstd.SpeedFastest)
	for _, size := range []int{0, 1, 100, 5000, 70000} {
		raw := make([]byte, size)
		for i := range raw {
			raw[i] = byte(rng.IntN(7)) // compressible
		}
		for _, frame := range []int{0, 1024} {
			body := c.Compress(raw, frame)
			var e Envelope
			e.Job = "job"
			e.Seal(raw, body)
			for _, payload := range []int{80, 200, 1 << 20} {
				chunks, err := Split(&e, body, 8+len(e.Job), payload, testHead)
				if err != nil {
					t.Fatal(err)
				}
				if want := max((len(body)+payload-11-1)/(payload-11), 1); len(chunks) != want || int(e.Chunks) != want {
					t.Fatalf("size %d payload %d: %d chunks, want %d", size, payload, len(chunks), want)
				}
				order := append(rng.Perm(len(chunks)), 0)
				var a Assembler
				for k, i := range order {
					if len(chunks[i]) > payload {
						t.Fatalf("chunk of %d bytes over the payload %d", len(chunks[i]), payload)
					}
					done, err := a.Add(testParse(t, e, chunks[i]), chunks[i])
					if err != nil {
						t.Fatal(err)
					}
					if done != (k >= len(chunks)-1) || a.Have() != min(k+1, len(chunks)) {
						t.Fatalf("after %d of %d chunks: complete %v, have %d", k+1, len(chunks), done, a.Have())
					}
				}
				got, err := a.Body()
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("size %d payload %d: body %d bytes, %v", size, payload, len(got), err)
				}
				back, err := Decompress(a.Envelope(), got)
				if err != nil || !bytes.Equal(back, raw) {
					t.Fatalf("size %d frame %d: decompressed %d bytes, %v", size, frame, len(back), err)
				}
			}
		}
	}
}

// A chunk of another body is refused; a body of the wrong length or
// checksum, or one that does not decompress to its stated size, is an
// error at the payload's offset; a payload with no room, or a body that
// needs more than 65535 chunks, does not split.
func TestAssemblerRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	raw := make([]byte, 2000)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	body := NewCompressor(zstd.SpeedDefault).Compress(raw, 0)
	var e Envelope
	e.Job = "job"
	e.Seal(raw, body)
	chunks, err := Split(&e, body, 11, 100, testHead)
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(*Envelope){
		func(o *Envelope) { o.Sum++ },
		func(o *Envelope) { o.BodyLen++ },
		func(o *Envelope) { o.Chunks++ },
		func(o *Envelope) { o.Job = "other" },
	} {
		var a Assembler
		if _, err := a.Add(testParse(t, e, chunks[0]), chunks[0]); err != nil {
			t.Fatal(err)
		}
		o := testParse(t, e, chunks[1])
		change(o)
		if _, err := a.Add(o, chunks[1]); err == nil || !strings.Contains(err.Error(), "does not belong") {
			t.Errorf("a chunk of another body: %v", err)
		}
	}
	for name, c := range map[string]struct {
		e    func(*Envelope)
		body []byte
	}{
		"checksum mismatch": {func(*Envelope) {}, append(append([]byte(nil), body[:len(body)-1]...), body[len(body)-1]^1)},
		"body has":          {func(*Envelope) {}, body[:len(body)-1]},
	} {
		o := e
		o.Chunk, o.Chunks, o.PayloadOffset = 0, 1, 11
		c.e(&o)
		var a Assembler
		msg := append(make([]byte, 11), c.body...)
		if _, err := a.Add(&o, msg); err != nil {
			t.Fatal(err)
		}
		_, err := a.Body()
		var ce *Error
		if !errors.As(err, &ce) || ce.Offset != 11 || !strings.Contains(ce.Msg, name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	short := e
	short.RawLen--
	if _, err := Decompress(&short, body); err == nil || !strings.Contains(err.Error(), "decompressed") {
		t.Errorf("a stated size that is wrong: %v", err)
	}
	if _, err := Decompress(&e, []byte("not zstd")); err == nil || !strings.Contains(err.Error(), "zstd") {
		t.Errorf("not zstd: %v", err)
	}
	if _, err := Split(&e, body, 11, 70, testHead); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Errorf("no room: %v", err)
	}
	if _, err := Split(&e, make([]byte, 0x10000*64), 0, 64, testHead); err == nil || !strings.Contains(err.Error(), "chunks") {
		t.Errorf("too many chunks: %v", err)
	}
	for _, bad := range []Envelope{{Chunk: 0, Chunks: 0}, {Chunk: 3, Chunks: 3}} {
		if err := bad.CheckChunk(5); err == nil {
			t.Errorf("chunk %d of %d accepted", bad.Chunk, bad.Chunks)
		}
	}
}
