package reducer

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go/jetstream"

	"gpuprof/profile"
	"gpuprof/profile/chunk"
)

// A partial is a tree node's cumulative merged profile, published upward
// (and, from the root, the final profile). Like a batch it travels in the
// chunk envelope (profile/chunk: chunks of a zstd-compressed canonical
// encoding, each under the server's max payload); unlike a batch it holds
// many items, so it has its own header naming the node and a version that
// grows with every publish: a parent keeps only the highest complete
// version of each child.
//
// Chunk header (little-endian):
//
//	magic      [4]byte "GPR1"
//	version    u16     partialVersion
//	flags      u16     bit 0: finished (every rank below is sealed), bit 1: final (the root's)
//	level      u16
//	node       u32
//	pver       u64     the node's publish counter
//	chunk      u16
//	chunks     u16
//	rawLen     u32     uncompressed profile bytes
//	bodyLen    u32     compressed bytes in the whole body
//	sum        u64     xxhash64 of the whole compressed body
//	clock      i64     unix ns when the node's rank-timeout clock started (0: not yet)
//	lastDone   i64     unix ns of the latest done item below (broker time; 0: none)
//	items      u64     (rank, seq) items merged
//	ranks      u32     ranks below the node
//	sealed     u32     of them finished (sealed, or sealed as incomplete)
//	batches    u64     batch items merged below (progress)
//	bytesIn    u64     batch bytes consumed below (progress)
//	jobLen     u16     then the job name
//	payload
const (
	partialMagic   = "GPR1"
	partialVersion = 1
	flagFinished   = 1
	flagFinal      = 2
	partialFixed   = 4 + 2 + 2 + 2 + 4 + 8 + 2 + 2 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 4 + 8 + 8 + 2
)

type partialHeader struct {
	chunk.Envelope
	Flags    uint16
	Level    uint16
	Node     uint32
	PVer     uint64
	Clock    int64
	LastDone int64
	Items    uint64
	Ranks    uint32
	Sealed   uint32
	Batches  uint64
	BytesIn  uint64
}

func (h *partialHeader) finished() bool { return h.Flags&flagFinished != 0 }

// msgID is the chunk's broker message id: a retried publish of the same
// bytes is stored once, and different bytes never share an id, even when a
// restarted node reuses a version number.
func (h *partialHeader) msgID() string {
	kind := "p"
	if h.Flags&flagFinal != 0 {
		kind = "final"
	}
	return fmt.Sprintf("%s/%s/%d.%d/%d/%016x/%d", h.Job, kind, h.Level, h.Node, h.PVer, h.Sum, h.Chunk)
}

func (h *partialHeader) append(b []byte) []byte {
	le := binary.LittleEndian
	b = append(b, partialMagic...)
	b = le.AppendUint16(b, partialVersion)
	b = le.AppendUint16(b, h.Flags)
	b = le.AppendUint16(b, h.Level)
	b = le.AppendUint32(b, h.Node)
	b = le.AppendUint64(b, h.PVer)
	b = le.AppendUint16(b, h.Chunk)
	b = le.AppendUint16(b, h.Chunks)
	b = le.AppendUint32(b, h.RawLen)
	b = le.AppendUint32(b, h.BodyLen)
	b = le.AppendUint64(b, h.Sum)
	b = le.AppendUint64(b, uint64(h.Clock))
	b = le.AppendUint64(b, uint64(h.LastDone))
	b = le.AppendUint64(b, h.Items)
	b = le.AppendUint32(b, h.Ranks)
	b = le.AppendUint32(b, h.Sealed)
	b = le.AppendUint64(b, h.Batches)
	b = le.AppendUint64(b, h.BytesIn)
	b = le.AppendUint16(b, uint16(len(h.Job)))
	return append(b, h.Job...)
}

// PartialError says what is wrong with a partial chunk, naming its node,
// version and offset.
type PartialError struct {
	Level, Node int
	PVer        uint64
	Offset      int
	Msg         string
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("partial of node %d.%d version %d: offset %d: %s", e.Level, e.Node, e.PVer, e.Offset, e.Msg)
}

// error names h's node and version in an envelope's error.
func (h *partialHeader) error(err error) error {
	var ce *chunk.Error
	if errors.As(err, &ce) {
		return &PartialError{int(h.Level), int(h.Node), h.PVer, ce.Offset, ce.Msg}
	}
	return err
}

func parsePartialHeader(msg []byte) (*partialHeader, error) {
	if len(msg) < partialFixed {
		return nil, &PartialError{-1, -1, 0, len(msg), fmt.Sprintf("%d bytes, shorter than a partial header", len(msg))}
	}
	if string(msg[:4]) != partialMagic {
		return nil, &PartialError{-1, -1, 0, 0, "bad magic"}
	}
	le := binary.LittleEndian
	if v := le.Uint16(msg[4:]); v != partialVersion {
		return nil, &PartialError{-1, -1, 0, 4, fmt.Sprintf("schema version %d, want %d", v, partialVersion)}
	}
	h := &partialHeader{Flags: le.Uint16(msg[6:]), Level: le.Uint16(msg[8:]), Node: le.Uint32(msg[10:]), PVer: le.Uint64(msg[14:]),
		Clock: int64(le.Uint64(msg[42:])), LastDone: int64(le.Uint64(msg[50:])), Items: le.Uint64(msg[58:]),
		Ranks: le.Uint32(msg[66:]), Sealed: le.Uint32(msg[70:]), Batches: le.Uint64(msg[74:]), BytesIn: le.Uint64(msg[82:])}
	h.Chunk, h.Chunks = le.Uint16(msg[22:]), le.Uint16(msg[24:])
	h.RawLen, h.BodyLen, h.Sum = le.Uint32(msg[26:]), le.Uint32(msg[30:]), le.Uint64(msg[34:])
	jl := int(le.Uint16(msg[90:]))
	bad := func(off int, m string) (*partialHeader, error) {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, off, m}
	}
	if err := h.CheckChunk(22); err != nil {
		return nil, h.error(err)
	}
	if h.RawLen > chunk.MaxRawBytes {
		return bad(26, fmt.Sprintf("raw length %d over the limit", h.RawLen))
	}
	if partialFixed+jl > len(msg) {
		return bad(90, fmt.Sprintf("job name of %d bytes runs past the end", jl))
	}
	h.Job = string(msg[partialFixed : partialFixed+jl])
	h.PayloadOffset = partialFixed + jl
	return h, nil
}

// Partials are transient and on the critical path at the end of a job, so
// they favour compression speed (the fastest level costs ~7% in size on
// realistic profiles, and a third of the time).
var partialZ = chunk.NewCompressor(zstd.SpeedFastest)

// zframe is the size of the pieces a large partial is compressed in:
// independent zstd frames, compressed in parallel and concatenated, which
// any zstd decoder reads as one body (a root's final profile of tens of MB
// is otherwise compressed on one core on the tail's critical path).
var zframe = 4 << 20

// encodePartial encodes p under header h (node, version, flags, progress)
// as chunks of at most maxPayload bytes; it fills h's sizes and checksum.
func encodePartial(h partialHeader, p *profile.Profile, maxPayload int) ([][]byte, partialHeader, error) {
	raw := p.Encode()
	if len(raw) > chunk.MaxRawBytes {
		return nil, h, fmt.Errorf("partial of node %d.%d: %d bytes exceeds %d", h.Level, h.Node, len(raw), chunk.MaxRawBytes)
	}
	body := partialZ.Compress(raw, zframe)
	h.Seal(raw, body)
	h.Items = p.MergedItems()
	out, err := chunk.Split(&h.Envelope, body, partialFixed+len(h.Job), maxPayload, func(b []byte, _ *chunk.Envelope) []byte { return h.append(b) })
	if err != nil {
		return nil, h, fmt.Errorf("partial of node %d.%d: %w", h.Level, h.Node, err)
	}
	return out, h, nil
}

// assembly is a body being put together from its chunks, and the messages
// that brought them, unacknowledged until what the body carries is
// durable.
type assembly struct {
	chunk.Assembler
	msgs []jetstream.Msg
}

// partialAsm collects the chunks of one version (pver, sum) of a node's
// partial.
type partialAsm struct {
	assembly
	h    *partialHeader // the first chunk's
	seqs []uint64       // stream sequences of the chunks (for deleting superseded versions)
}

func newPartialAsm(h *partialHeader) *partialAsm { return &partialAsm{h: h} }

// add takes a chunk of this version; it reports whether the body is
// complete.
func (a *partialAsm) add(h *partialHeader, msg []byte, seq uint64) (bool, error) {
	misfit := &PartialError{int(h.Level), int(h.Node), h.PVer, 0, "chunk does not belong to the version being assembled"}
	if h.PVer != a.h.PVer {
		return false, misfit
	}
	done, err := a.Add(&h.Envelope, msg)
	if err != nil {
		return false, misfit
	}
	if seq != 0 {
		a.seqs = append(a.seqs, seq)
	}
	return done, nil
}

// body joins the chunks and checks length and checksum.
func (a *partialAsm) body() ([]byte, error) {
	body, err := a.Body()
	return body, a.h.error(err)
}

// decodePartial decompresses and decodes a partial's body.
func decodePartial(h *partialHeader, body []byte) (*profile.Profile, error) {
	raw, err := chunk.Decompress(&h.Envelope, body)
	if err != nil {
		return nil, h.error(err)
	}
	p, err := profile.Decode(raw)
	if err != nil {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.PayloadOffset, err.Error()}
	}
	if p.Job != h.Job && p.Job != "" {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.PayloadOffset, fmt.Sprintf("profile of job %q under a header of job %q", p.Job, h.Job)}
	}
	return p, nil
}
