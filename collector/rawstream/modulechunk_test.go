package rawstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// chunkedStream is a version 3 stream whose module of size bytes comes in
// MODULE_DATA chunks of the given sizes (written raw, so tests can break
// the rules), then a FUNCTION and END.
func chunkedStream(t testing.TB, size uint32, chunks []int, mutate func(i int, id, off uint64) (uint64, uint64)) []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Write(everyFrame()[0]); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	hdr := le.AppendUint64(nil, 4)
	hdr = le.AppendUint64(hdr, 0xabc)
	hdr = le.AppendUint32(hdr, size)
	hdr = append(hdr, 2)
	w.WriteRaw(KindModule, hdr)
	off := uint64(0)
	for i, n := range chunks {
		id, o := uint64(4), off
		if mutate != nil {
			id, o = mutate(i, id, o)
		}
		p := le.AppendUint64(nil, id)
		p = le.AppendUint64(p, o)
		p = append(p, bytes.Repeat([]byte{byte(i + 1)}, n)...)
		w.WriteRaw(KindModuleData, p)
		off += uint64(n)
	}
	w.Write(&Function{FunctionID: 1, ModuleID: 4, Name: "k"})
	w.Write(&End{})
	return buf.Bytes()
}

func TestModuleChunksAssemble(t *testing.T) {
	b := chunkedStream(t, 10, []int{4, 4, 2}, nil)
	frames, offs, err := decodeAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 4 {
		t.Fatalf("decoded %d frames, want HELLO, MODULE, FUNCTION, END", len(frames))
	}
	m, ok := frames[1].(*Module)
	if !ok || !m.HasBytes || m.Size != 10 || !bytes.Equal(m.Bytes, []byte{1, 1, 1, 1, 2, 2, 2, 2, 3, 3}) {
		t.Fatalf("module %+v", frames[1])
	}
	if offs[1] != 8+int64(binary.LittleEndian.Uint32(b[4:])) { // right after HELLO
		t.Errorf("the module's offset %d is not its MODULE frame's", offs[1])
	}
}

func TestModuleChunkErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      []byte
		field  string
		substr string
	}{
		{"gap", chunkedStream(t, 10, []int{4, 4, 2}, func(i int, id, off uint64) (uint64, uint64) {
			if i == 1 {
				off++
			}
			return id, off
		}), "offset", "want 4"},
		{"other module", chunkedStream(t, 10, []int{4, 6}, func(i int, id, off uint64) (uint64, uint64) {
			if i == 1 {
				id = 5
			}
			return id, off
		}), "module_id", "module 4 is being assembled"},
		{"too long", chunkedStream(t, 10, []int{4, 7}, nil), "bytes", "exceed the module's size 10"},
		{"cut short", chunkedStream(t, 10, []int{4, 4}, nil), "kind", "has 8 of its 10 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeAll(tc.b)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want an *Error", err)
			}
			if e.Field != tc.field || !strings.Contains(e.Msg, tc.substr) {
				t.Fatalf("got field %q msg %q, want field %q containing %q", e.Field, e.Msg, tc.field, tc.substr)
			}
		})
	}
}

// Version 2 streams have no chunks, no MODULE_DATA and no graph bit.
func TestVersion3AdditionsRejectedInVersion2(t *testing.T) {
	v2 := func(frames ...Frame) []byte {
		h := *everyFrame()[0].(*Hello)
		h.Version = 2
		return encode(t, append([]Frame{&h}, frames...))
	}
	var raw bytes.Buffer
	w := NewWriter(&raw)
	h := *everyFrame()[0].(*Hello)
	h.Version = 2
	w.Write(&h)
	w.WriteRaw(KindModuleData, make([]byte, 20))
	for _, tc := range []struct {
		name, field string
		b           []byte
	}{
		{"graph launch", "instrumented", v2(&Launch{LaunchID: 1, Graph: true}, &End{})},
		{"MODULE_DATA", "kind", raw.Bytes()},
		{"chunked module", "has_bytes", func() []byte {
			b := chunkedStream(t, 10, []int{10}, nil)
			binary.LittleEndian.PutUint16(b[12:], 2) // HELLO's version
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeAll(tc.b)
			var e *Error
			if !errors.As(err, &e) || e.Field != tc.field {
				t.Fatalf("error %v, want one on field %q", err, tc.field)
			}
		})
	}
}

// bigModule is larger than one frame: the writers must chunk it.
func bigModule() *Module {
	b := make([]byte, MaxPayload+3*ModuleChunk/2)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return &Module{ModuleID: 9, ContentKey: 0x77, Size: uint32(len(b)), HasBytes: true, Bytes: b}
}

func TestBigModuleRoundTrip(t *testing.T) {
	m := bigModule()
	frames := []Frame{everyFrame()[0], m, &Function{FunctionID: 1, ModuleID: 9, Name: "k"}, &End{}}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, f := range frames {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	// HELLO, MODULE, 6 chunks, FUNCTION, END: END counts the chunks.
	if w.Frames() != 10 {
		t.Fatalf("wrote %d frames, want 10", w.Frames())
	}
	out, _, err := decodeAll(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || !bytes.Equal(out[1].(*Module).Bytes, m.Bytes) {
		t.Fatalf("decoded %d frames; module bytes equal: %v", len(out), len(out) > 1 && bytes.Equal(out[1].(*Module).Bytes, m.Bytes))
	}
}

// The C header chunks a big module exactly as the Go writer does.
func TestCHeaderChunksBigModule(t *testing.T) {
	exe := ccBuild(t, "big", `#include <stdio.h>
#include "gpuprof_wire.h"
int main(void) {
	uint32_t size = GPW_MAX_PAYLOAD + 3 * GPW_MODULE_CHUNK / 2;
	uint8_t *c = malloc(size);
	for (uint32_t i = 0; i < size; i++) c[i] = (uint8_t)(i * 7);
	gpw_buf b;
	gpw_buf_init(&b);
	int n = gpw_module(&b, 9, 0x77, size, 1, c);
	if (n != 7 || b.oom) { fprintf(stderr, "gpw_module wrote %d frames\n", n); return 1; }
	fwrite(b.data, 1, b.len, stdout);
	return 0;
}`)
	got, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := AppendFrame(nil, bigModule())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the C writer's %d bytes differ from the Go writer's %d", len(got), len(want))
	}
}
