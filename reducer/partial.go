package reducer

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"gpuprof/profile"
)

// A partial is a tree node's cumulative merged profile, published upward
// (and, from the root, the final profile). Like a batch it travels as
// chunks of a zstd-compressed canonical encoding, each under the server's
// max payload; unlike a batch it holds many items, so it has its own
// header naming the node and a version that grows with every publish: a
// parent keeps only the highest complete version of each child.
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
	Flags         uint16
	Level         uint16
	Node          uint32
	PVer          uint64
	Chunk, Chunks uint16
	RawLen        uint32
	BodyLen       uint32
	Sum           uint64
	Clock         int64
	LastDone      int64
	Items         uint64
	Ranks         uint32
	Sealed        uint32
	Batches       uint64
	BytesIn       uint64
	Job           string
	payloadOff    int
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
		Chunk: le.Uint16(msg[22:]), Chunks: le.Uint16(msg[24:]), RawLen: le.Uint32(msg[26:]), BodyLen: le.Uint32(msg[30:]),
		Sum: le.Uint64(msg[34:]), Clock: int64(le.Uint64(msg[42:])), LastDone: int64(le.Uint64(msg[50:])), Items: le.Uint64(msg[58:]),
		Ranks: le.Uint32(msg[66:]), Sealed: le.Uint32(msg[70:]), Batches: le.Uint64(msg[74:]), BytesIn: le.Uint64(msg[82:])}
	jl := int(le.Uint16(msg[90:]))
	bad := func(off int, m string) (*partialHeader, error) {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, off, m}
	}
	if h.Chunks == 0 || h.Chunk >= h.Chunks {
		return bad(22, fmt.Sprintf("chunk %d of %d", h.Chunk, h.Chunks))
	}
	if h.RawLen > profile.MaxRawBytes {
		return bad(26, fmt.Sprintf("raw length %d over the limit", h.RawLen))
	}
	if partialFixed+jl > len(msg) {
		return bad(90, fmt.Sprintf("job name of %d bytes runs past the end", jl))
	}
	h.Job = string(msg[partialFixed : partialFixed+jl])
	h.payloadOff = partialFixed + jl
	return h, nil
}

// Partials are transient and on the critical path at the end of a job, so
// they favour compression speed (the fastest level costs ~7% in size on
// realistic profiles, and a third of the time).
var (
	zencPool = sync.Pool{New: func() any { e, _ := zstd.NewWriter(nil, profile.EncoderOptions(zstd.SpeedFastest)...); return e }}
	zdecOnce sync.Once
	zdec     *zstd.Decoder
)

func zdecoder() *zstd.Decoder {
	zdecOnce.Do(func() {
		zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(profile.MaxRawBytes))
	})
	return zdec
}

// zframe is the size of the pieces a large partial is compressed in:
// independent zstd frames, compressed in parallel and concatenated, which
// any zstd decoder reads as one body (a root's final profile of tens of MB
// is otherwise compressed on one core on the tail's critical path).
var zframe = 4 << 20

func compress(raw []byte) []byte {
	if len(raw) <= 2*zframe {
		zw := zencPool.Get().(*zstd.Encoder)
		defer zencPool.Put(zw)
		return zw.EncodeAll(raw, nil)
	}
	parts := make([][]byte, (len(raw)+zframe-1)/zframe)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			zw := zencPool.Get().(*zstd.Encoder)
			parts[i] = zw.EncodeAll(raw[i*zframe:min(len(raw), (i+1)*zframe)], nil)
			zencPool.Put(zw)
		}()
	}
	wg.Wait()
	return slices.Concat(parts...)
}

// encodePartial encodes p under header h (node, version, flags, progress)
// as chunks of at most maxPayload bytes; it fills h's sizes and checksum.
func encodePartial(h partialHeader, p *profile.Profile, maxPayload int) ([][]byte, partialHeader, error) {
	raw := p.Encode()
	if len(raw) > profile.MaxRawBytes {
		return nil, h, fmt.Errorf("partial of node %d.%d: %d bytes exceeds %d", h.Level, h.Node, len(raw), profile.MaxRawBytes)
	}
	body := compress(raw)
	h.RawLen, h.BodyLen, h.Sum = uint32(len(raw)), uint32(len(body)), xxhash.Sum64(body)
	h.Items = p.MergedItems()
	room := maxPayload - partialFixed - len(h.Job)
	if room < 64 {
		return nil, h, fmt.Errorf("partial of node %d.%d: max payload %d leaves no room after the header", h.Level, h.Node, maxPayload)
	}
	n := max((len(body)+room-1)/room, 1)
	if n > 0xffff {
		return nil, h, fmt.Errorf("partial of node %d.%d: needs %d chunks", h.Level, h.Node, n)
	}
	h.Chunks = uint16(n)
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		h.Chunk = uint16(i)
		part := body[i*room : min(len(body), (i+1)*room)]
		out = append(out, append(h.append(make([]byte, 0, partialFixed+len(h.Job)+len(part))), part...))
	}
	h.Chunk = 0
	return out, h, nil
}

// partialAsm collects the chunks of one version (pver, sum) of a node's
// partial.
type partialAsm struct {
	h     *partialHeader
	parts [][]byte
	have  int
	seqs  []uint64 // stream sequences of the chunks (for deleting superseded versions)
}

func newPartialAsm(h *partialHeader) *partialAsm {
	return &partialAsm{h: h, parts: make([][]byte, h.Chunks)}
}

// add takes a chunk of this version; it reports whether the body is
// complete.
func (a *partialAsm) add(h *partialHeader, msg []byte, seq uint64) (bool, error) {
	if h.PVer != a.h.PVer || h.Sum != a.h.Sum || h.Chunks != a.h.Chunks || h.BodyLen != a.h.BodyLen || h.Job != a.h.Job {
		return false, &PartialError{int(h.Level), int(h.Node), h.PVer, 0, "chunk does not belong to the version being assembled"}
	}
	if seq != 0 {
		a.seqs = append(a.seqs, seq)
	}
	if a.parts[h.Chunk] == nil {
		a.parts[h.Chunk] = append([]byte(nil), msg[h.payloadOff:]...)
		a.have++
	}
	return a.have == len(a.parts), nil
}

// body joins the chunks and checks length and checksum.
func (a *partialAsm) body() ([]byte, error) {
	var body []byte
	if len(a.parts) == 1 {
		body = a.parts[0]
	} else {
		body = make([]byte, 0, a.h.BodyLen)
		for _, p := range a.parts {
			body = append(body, p...)
		}
	}
	h := a.h
	if uint32(len(body)) != h.BodyLen {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.payloadOff, fmt.Sprintf("body has %d bytes, header says %d", len(body), h.BodyLen)}
	}
	if xxhash.Sum64(body) != h.Sum {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.payloadOff, "checksum mismatch"}
	}
	return body, nil
}

// decodePartial decompresses and decodes a partial's body.
func decodePartial(h *partialHeader, body []byte) (*profile.Profile, error) {
	// Size the buffer from the body too: a forged header must not make a
	// reducer allocate its claimed length up front.
	raw, err := zdecoder().DecodeAll(body, make([]byte, 0, min(int(h.RawLen), 64*len(body)+4096)))
	if err != nil {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.payloadOff, "zstd: " + err.Error()}
	}
	if uint32(len(raw)) != h.RawLen {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.payloadOff, fmt.Sprintf("decompressed %d bytes, header says %d", len(raw), h.RawLen)}
	}
	p, err := profile.Decode(raw)
	if err != nil {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.payloadOff, err.Error()}
	}
	if p.Job != h.Job && p.Job != "" {
		return nil, &PartialError{int(h.Level), int(h.Node), h.PVer, h.payloadOff, fmt.Sprintf("profile of job %q under a header of job %q", p.Job, h.Job)}
	}
	return p, nil
}
