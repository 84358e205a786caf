package profile

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"gpuprof/profile/chunk"
)

// A batch is what a collector publishes: one item of a rank's profile. On the
// wire it is one or more chunks, each a fixed header plus a slice of the
// zstd-compressed profile encoding, so no message exceeds the broker's
// maximum payload.
//
// Chunk header (little-endian):
//
//	magic    [4]byte "GPB1"
//	version  u16     BatchVersion
//	flags    u16     bit 0: done item (the rank's last), bit 1: synthetic
//	rank     i32
//	seq      u32     the item's sequence number
//	chunk    u16     index of this chunk
//	chunks   u16     number of chunks
//	nodes    u32     counts of the item (for logs and progress)
//	pairs    u32
//	objects  u32
//	rawLen   u32     uncompressed profile bytes
//	bodyLen  u32     compressed bytes in the whole body
//	sum      u64     xxhash64 of the whole compressed body
//	jobLen   u16     then the job name
//	payload  the chunk's part of the compressed body
const (
	batchMagic = "GPB1"
	// BatchVersion is the batch schema version.
	BatchVersion = 1
	// FlagDone marks a rank's done item.
	FlagDone = 1
	// FlagSynthetic marks an item made from generated data.
	FlagSynthetic = 2
	headerFixed   = 4 + 2 + 2 + 4 + 4 + 2 + 2 + 4*5 + 8 + 2
	// MaxRawBytes bounds an item's uncompressed encoding on decode, so a
	// corrupt header cannot make a reducer allocate without bound.
	MaxRawBytes = chunk.MaxRawBytes
)

// Header is a decoded chunk header: the item it belongs to and, in the
// envelope, the body and the chunk's place in it.
type Header struct {
	chunk.Envelope
	Version      uint16
	Flags        uint16
	Rank         int32
	Seq          uint32
	Nodes, Pairs uint32
	Objects      uint32
}

// ID is the (job/rank/seq) name used as the broker's message id, with the
// chunk index, so a retried publish is stored once.
func (h *Header) ID() string { return fmt.Sprintf("%s/%d/%d/%d", h.Job, h.Rank, h.Seq, h.Chunk) }

// Items are compressed at zstd's default level, in one frame.
var batchZ = chunk.NewCompressor(zstd.SpeedDefault)

// EncodeBatch encodes item p (which must hold exactly one item) as chunks of
// at most maxPayload bytes each.
func EncodeBatch(p *Profile, done bool, maxPayload int) ([][]byte, error) {
	rank, single := p.singleRank()
	if !single || p.Items[rank].GetCardinality() != 1 {
		return nil, fmt.Errorf("profile: EncodeBatch: the profile holds %d items of %d ranks, want one item", p.MergedItems(), len(p.Items))
	}
	seq := p.Items[rank].Minimum()
	raw := p.Encode()
	if len(raw) > MaxRawBytes {
		return nil, fmt.Errorf("profile: EncodeBatch: rank %d seq %d: %d bytes exceeds %d", rank, seq, len(raw), MaxRawBytes)
	}
	body := batchZ.Compress(raw, 0)
	h := Header{Version: BatchVersion, Rank: rank, Seq: seq,
		Nodes: uint32(len(p.Nodes)), Pairs: uint32(len(p.Temporal) + len(p.Spatial)), Objects: uint32(len(p.Objects))}
	h.Job = p.Job
	h.Seal(raw, body)
	if done {
		h.Flags |= FlagDone
	}
	if p.Synthetic {
		h.Flags |= FlagSynthetic
	}
	chunks, err := chunk.Split(&h.Envelope, body, headerFixed+len(p.Job), maxPayload, func(b []byte, _ *chunk.Envelope) []byte { return h.append(b) })
	if err != nil {
		return nil, fmt.Errorf("profile: EncodeBatch: rank %d seq %d: %w", rank, seq, err)
	}
	return chunks, nil
}

func (h *Header) append(b []byte) []byte {
	b = append(b, batchMagic...)
	b = binary.LittleEndian.AppendUint16(b, h.Version)
	b = binary.LittleEndian.AppendUint16(b, h.Flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Rank))
	b = binary.LittleEndian.AppendUint32(b, h.Seq)
	b = binary.LittleEndian.AppendUint16(b, h.Chunk)
	b = binary.LittleEndian.AppendUint16(b, h.Chunks)
	for _, v := range []uint32{h.Nodes, h.Pairs, h.Objects, h.RawLen, h.BodyLen} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, h.Sum)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.Job)))
	return append(b, h.Job...)
}

// BatchError says what is wrong with a batch, naming rank, sequence and
// offset where they are known.
type BatchError struct {
	Rank   int32
	Seq    uint32
	Offset int
	Msg    string
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("batch rank %d seq %d: offset %d: %s", e.Rank, e.Seq, e.Offset, e.Msg)
}

// batchError names the item of h in an envelope's error.
func batchError(h *Header, err error) error {
	var ce *chunk.Error
	if errors.As(err, &ce) {
		return &BatchError{h.Rank, h.Seq, ce.Offset, ce.Msg}
	}
	return err
}

// ParseHeader decodes a chunk header.
func ParseHeader(msg []byte) (*Header, error) {
	if len(msg) < headerFixed {
		return nil, &BatchError{-1, 0, len(msg), fmt.Sprintf("%d bytes, shorter than a batch header", len(msg))}
	}
	if string(msg[:4]) != batchMagic {
		return nil, &BatchError{-1, 0, 0, "bad magic"}
	}
	le := binary.LittleEndian
	h := &Header{Version: le.Uint16(msg[4:]), Flags: le.Uint16(msg[6:]), Rank: int32(le.Uint32(msg[8:])), Seq: le.Uint32(msg[12:]),
		Nodes: le.Uint32(msg[20:]), Pairs: le.Uint32(msg[24:]), Objects: le.Uint32(msg[28:])}
	h.Chunk, h.Chunks = le.Uint16(msg[16:]), le.Uint16(msg[18:])
	h.RawLen, h.BodyLen, h.Sum = le.Uint32(msg[32:]), le.Uint32(msg[36:]), le.Uint64(msg[40:])
	jl := int(le.Uint16(msg[48:]))
	bad := func(off int, m string) (*Header, error) { return nil, &BatchError{h.Rank, h.Seq, off, m} }
	if h.Version != BatchVersion {
		return bad(4, fmt.Sprintf("schema version %d, want %d", h.Version, BatchVersion))
	}
	if err := h.CheckChunk(16); err != nil {
		return nil, batchError(h, err)
	}
	if h.RawLen > MaxRawBytes {
		return bad(32, fmt.Sprintf("raw length %d over the limit", h.RawLen))
	}
	if headerFixed+jl > len(msg) {
		return bad(48, fmt.Sprintf("job name of %d bytes runs past the end", jl))
	}
	h.Job = string(msg[headerFixed : headerFixed+jl])
	h.PayloadOffset = headerFixed + jl
	return h, nil
}

// ErrIncomplete is returned by Assembler.Add while chunks are missing.
var ErrIncomplete = errors.New("batch: chunks missing")

// Assembler puts the chunks of one item back together.
type Assembler struct {
	h   *Header
	asm chunk.Assembler
}

// Add takes one chunk message; it returns the decoded item once all chunks
// arrived, ErrIncomplete before that, or an error naming the bad chunk.
func (a *Assembler) Add(msg []byte) (*Profile, *Header, error) {
	h, err := ParseHeader(msg)
	if err != nil {
		return nil, nil, err
	}
	if a.h == nil {
		a.h = h
	}
	misfit := &BatchError{h.Rank, h.Seq, 0, "chunk does not belong to the item being assembled"}
	if h.Rank != a.h.Rank || h.Seq != a.h.Seq {
		return nil, h, misfit
	}
	done, err := a.asm.Add(&h.Envelope, msg)
	if err != nil {
		return nil, h, misfit
	}
	if !done {
		return nil, h, ErrIncomplete
	}
	p, err := DecodeAssembled(a.h, &a.asm)
	return p, a.h, err
}

// DecodeBatch decodes a batch that fits one chunk.
func DecodeBatch(msg []byte) (*Profile, *Header, error) {
	var a Assembler
	p, h, err := a.Add(msg)
	if errors.Is(err, ErrIncomplete) {
		return nil, h, &BatchError{h.Rank, h.Seq, 16, fmt.Sprintf("chunk %d of %d alone", h.Chunk, h.Chunks)}
	}
	return p, h, err
}

// DecodeAssembled decodes item h from its chunks, all in a.
func DecodeAssembled(h *Header, a *chunk.Assembler) (*Profile, error) {
	body, err := a.Body()
	if err != nil {
		return nil, batchError(h, err)
	}
	raw, err := chunk.Decompress(&h.Envelope, body)
	if err != nil {
		return nil, batchError(h, err)
	}
	p, err := Decode(raw)
	if err != nil {
		return nil, &BatchError{h.Rank, h.Seq, h.PayloadOffset, err.Error()}
	}
	r, single := p.singleRank()
	if !single || r != h.Rank || p.Items[r].GetCardinality() != 1 || p.Items[r].Minimum() != h.Seq || p.Job != h.Job {
		return nil, &BatchError{h.Rank, h.Seq, h.PayloadOffset, "body's item does not match the header's job, rank and sequence"}
	}
	return p, nil
}
