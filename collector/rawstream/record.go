package rawstream

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
)

// Space is the memory space of an access record.
type Space uint8

const (
	SpaceNone   Space = 0 // block event
	SpaceGlobal Space = 1
	SpaceShared Space = 2
	SpaceLocal  Space = 3
)

func (s Space) String() string {
	switch s {
	case SpaceNone:
		return "none"
	case SpaceGlobal:
		return "global"
	case SpaceShared:
		return "shared"
	case SpaceLocal:
		return "local"
	}
	return fmt.Sprintf("space(%d)", uint8(s))
}

// Flags of an access record.
type Flags uint8

const (
	FlagRead       Flags = 1 << 0
	FlagWrite      Flags = 1 << 1
	FlagAtomic     Flags = 1 << 2
	FlagPrefetch   Flags = 1 << 3
	FlagBlockEnter Flags = 1 << 4
	FlagBlockExit  Flags = 1 << 5
)

// RecordHeaderSize is the fixed part of an access record.
const RecordHeaderSize = 24

// Encodings of a record's lane entries (header byte 21; 0: plain). Most
// warp accesses are coalesced (lane addresses base + stride × lane) and many
// carry one value in every lane; storing those once cuts a 4-byte access
// of a full warp from 408 bytes to 168 (affine) or 44 (both), which is
// what the library's socket and the collector's reader have to move.
const (
	EncAffine  uint8 = 1 << 0 // a u64 base and a u64 stride replace the addresses: lane l's is base + stride·l
	EncUniform uint8 = 1 << 1 // one value, carried by every active lane, replaces the values
)

// Record is one warp-level access or block record. Lanes holds, per set bit
// of Active from lane 0 up, a u64 address then Size value bytes, whatever
// the record's encoding on the wire (compact records are expanded; see
// Access.RecordHeaders for the iteration that leaves them alone).
type Record struct {
	PC     uint64
	Block  uint32
	Warp   uint16
	Space  Space
	Flags  Flags
	Active uint32
	Size   uint8
	Enc    uint8 // the wire encoding (EncAffine, EncUniform)
	Lanes  []byte

	buf []byte // expanded lanes of a compact record, reused
	raw []byte // the lane entries as on the wire (AppendAddrs)
}

// NumLanes is the number of lane entries (0 for block events).
func (r *Record) NumLanes() int {
	if r.Size == 0 {
		return 0
	}
	return bits.OnesCount32(r.Active)
}

// Lane returns the address and value of the i-th lane entry (not lane i:
// the i-th set bit of Active).
func (r *Record) Lane(i int) (addr uint64, value []byte) {
	stride := 8 + int(r.Size)
	e := r.Lanes[i*stride : (i+1)*stride]
	return binary.LittleEndian.Uint64(e), e[8:]
}

// validSize reports whether s is a lane access size the stream allows.
func validSize(s uint8) bool {
	switch s {
	case 0, 1, 2, 4, 8, 16:
		return true
	}
	return false
}

// recordError describes a malformed record at offset off within the
// records area.
type recordError struct {
	off   int
	field string
	msg   string
}

// lanesSize is the length of the lane entries of na lanes of size bytes in
// encoding enc.
func lanesSize(na int, size int, enc uint8) int {
	n := 8*na + size*na
	if enc&EncAffine != 0 {
		n += 16 - 8*na
	}
	if enc&EncUniform != 0 {
		n += size - size*na
	}
	return n
}

// parseRecord reads one record from b. It returns the record, its length,
// or what is wrong with it. With expand false, the lanes of a compact
// record are checked but not expanded (Lanes is nil): the sequencer only
// needs headers.
func parseRecord(b []byte, r *Record, expand bool) (int, *recordError) {
	if len(b) < RecordHeaderSize {
		return 0, &recordError{0, "header", fmt.Sprintf("%d bytes left, a record header needs %d", len(b), RecordHeaderSize)}
	}
	le := binary.LittleEndian
	r.PC = le.Uint64(b)
	r.Block = le.Uint32(b[8:])
	r.Warp = le.Uint16(b[12:])
	r.Space = Space(b[14])
	r.Flags = Flags(b[15])
	r.Active = le.Uint32(b[16:])
	r.Size = b[20]
	r.Enc = b[21]
	if r.Space > SpaceLocal {
		return 0, &recordError{14, "space", fmt.Sprintf("%d is not a space", b[14])}
	}
	if !validSize(r.Size) {
		return 0, &recordError{20, "size", fmt.Sprintf("%d is not a lane access size", r.Size)}
	}
	na := bits.OnesCount32(r.Active)
	if r.Enc&^(EncAffine|EncUniform) != 0 {
		return 0, &recordError{21, "encoding", fmt.Sprintf("unknown bits in %#x", r.Enc)}
	}
	if r.Enc != 0 && (r.Size == 0 || na == 0) {
		return 0, &recordError{21, "encoding", fmt.Sprintf("%#x on a record without lane entries", r.Enc)}
	}
	n := 0
	if r.Size > 0 {
		n = lanesSize(na, int(r.Size), r.Enc)
	}
	if len(b)-RecordHeaderSize < n {
		return 0, &recordError{RecordHeaderSize, "lanes", fmt.Sprintf("%d active lanes of %d bytes (encoding %d) need %d bytes, %d left",
			na, r.Size, r.Enc, n, len(b)-RecordHeaderSize)}
	}
	raw := b[RecordHeaderSize : RecordHeaderSize+n]
	r.raw = raw
	switch {
	case r.Enc == 0:
		r.Lanes = raw
	case expand:
		r.buf = expandLanes(r.buf, raw, r.Active, int(r.Size), r.Enc)
		r.Lanes = r.buf
	default:
		r.Lanes = nil
	}
	return RecordHeaderSize + n, nil
}

// expandLanes writes the plain lane entries of a compact record's raw
// lanes into dst. 4- and 8-byte lanes, nearly every record, take a loop
// of their own that stores whole words: the general loop's two copies
// per lane were a quarter of a live collector's CPU on the H100 when both
// worker pools expanded every record (they now read them in place:
// Record.Wire, AppendAddrs).
func expandLanes(dst, raw []byte, active uint32, size int, enc uint8) []byte {
	le := binary.LittleEndian
	na := bits.OnesCount32(active)
	stride := 8 + size
	dst = slices.Grow(dst[:0], na*stride)[:na*stride]
	affine, uniform := enc&EncAffine != 0, enc&EncUniform != 0
	var base, step uint64
	var vals []byte
	if affine {
		base, step = le.Uint64(raw), le.Uint64(raw[8:])
		vals = raw[16:]
	} else {
		vals = raw[8*na:]
	}
	if size == 4 || size == 8 {
		expandWords(dst, raw, vals, active, base, step, affine, uniform, size)
		return dst
	}
	for m, e := active, 0; m != 0; m, e = m&(m-1), e+1 {
		ent := dst[e*stride : (e+1)*stride]
		if affine {
			le.PutUint64(ent, base+step*uint64(bits.TrailingZeros32(m)))
		} else {
			copy(ent[:8], raw[8*e:])
		}
		if uniform {
			copy(ent[8:], vals[:size])
		} else {
			copy(ent[8:], vals[e*size:(e+1)*size])
		}
	}
	return dst
}

// expandWords is expandLanes for 4- and 8-byte lanes (size), whose
// values are stored as whole words.
func expandWords(dst, raw, vals []byte, active uint32, base, step uint64, affine, uniform bool, size int) {
	le := binary.LittleEndian
	stride := 8 + size
	var v uint64
	if uniform {
		v = readWord(vals, size)
	}
	for m, e := active, 0; m != 0; m, e = m&(m-1), e+1 {
		ent := dst[e*stride : (e+1)*stride : (e+1)*stride]
		if affine {
			le.PutUint64(ent, base+step*uint64(bits.TrailingZeros32(m)))
		} else {
			le.PutUint64(ent, le.Uint64(raw[8*e:]))
		}
		if !uniform {
			v = readWord(vals[size*e:], size)
		}
		if size == 4 {
			le.PutUint32(ent[8:], uint32(v))
		} else {
			le.PutUint64(ent[8:], v)
		}
	}
}

// readWord reads a 4- or 8-byte little-endian value.
func readWord(b []byte, size int) uint64 {
	if size == 4 {
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

// ParseRecord reads the record at the start of b (Access.Data from some
// record's offset on) into r and returns its length.
func ParseRecord(b []byte, r *Record) (int, error) {
	n, e := parseRecord(b, r, true)
	if e != nil {
		return 0, fmt.Errorf("rawstream: record at byte %d: %s: %s", e.off, e.field, e.msg)
	}
	return n, nil
}

// ParseRecordHeader is ParseRecord without the expansion: a compact
// record's lanes are checked but left as the wire has them (Lanes is
// nil), for passes that read them in place (Wire, AppendAddrs) or expand
// them only where they must (Expand).
func ParseRecordHeader(b []byte, r *Record) (int, error) {
	n, e := parseRecord(b, r, false)
	if e != nil {
		return 0, fmt.Errorf("rawstream: record at byte %d: %s: %s", e.off, e.field, e.msg)
	}
	return n, nil
}

// AppendAddrs appends the addresses of r's lane entries, in the order of
// Lanes, to dst: from the wire's lanes (Wire), so a compact record needs
// no expansion (affine addresses are computed, the others read in place).
func (r *Record) AppendAddrs(dst []uint64) []uint64 {
	le := binary.LittleEndian
	w, ok := r.Wire()
	switch {
	case ok && w.Affine:
		for m := r.Active; m != 0; m &= m - 1 {
			dst = append(dst, w.Base+w.Step*uint64(bits.TrailingZeros32(m)))
		}
	case ok:
		for e := 0; e+8 <= len(w.Addrs); e += 8 {
			dst = append(dst, le.Uint64(w.Addrs[e:]))
		}
	default: // plain lanes: parsed plain or expanded, or made in memory
		lanes := r.Lanes
		if lanes == nil {
			lanes = r.raw
		}
		stride := 8 + int(r.Size)
		for e := 0; e < r.NumLanes(); e++ {
			dst = append(dst, le.Uint64(lanes[e*stride:]))
		}
	}
	return dst
}

// Wire is a compact record's lane entries as the wire carries them: for
// passes that read them in place rather than expanded.
type Wire struct {
	Affine, Uniform bool
	Base, Step      uint64 // Affine: lane l's address is Base + Step·l
	Addrs           []byte // not Affine: one u64 address per active lane
	Vals            []byte // Uniform: one value; else one per active lane
}

// Wire returns the wire form of a record parsed without its lanes
// expanded (ParseRecordHeader, RecordHeaders); ok is false for a record
// whose Lanes are plain, which are then to be read instead.
func (r *Record) Wire() (w Wire, ok bool) {
	if r.Lanes != nil || r.Enc == 0 || r.NumLanes() == 0 {
		return Wire{}, false
	}
	le := binary.LittleEndian
	w.Affine, w.Uniform = r.Enc&EncAffine != 0, r.Enc&EncUniform != 0
	raw := r.raw
	if w.Affine {
		w.Base, w.Step = le.Uint64(raw), le.Uint64(raw[8:])
		w.Vals = raw[16:]
	} else {
		na := r.NumLanes()
		w.Addrs, w.Vals = raw[:8*na], raw[8*na:]
	}
	return w, true
}

// Expand expands the lanes of a record parsed without them (Lanes nil)
// into the plain layout; a plain record is left as it is.
func (r *Record) Expand() {
	if r.Lanes != nil || r.Size == 0 {
		return
	}
	if r.Enc == 0 {
		r.Lanes = r.raw
		return
	}
	r.buf = expandLanes(r.buf, r.raw, r.Active, int(r.Size), r.Enc)
	r.Lanes = r.buf
}

// Records iterates over the records of an Access frame without copying
// (compact records are expanded into a buffer the iterator reuses).
type Records struct {
	data    []byte
	off     int
	left    uint32
	idx     int
	rec     Record
	err     error
	headers bool
}

// Records returns an iterator over a's records.
func (a *Access) Records() Records { return Records{data: a.Data, left: a.Count, idx: -1} }

// RecordHeaders returns an iterator over a's records that checks every
// record but leaves a compact record's lanes unexpanded (Lanes nil): for
// passes that need only the headers.
func (a *Access) RecordHeaders() Records {
	return Records{data: a.Data, left: a.Count, idx: -1, headers: true}
}

// Next advances to the next record; false at the end or on a malformed
// record (see Err).
func (it *Records) Next() bool {
	if it.left == 0 || it.err != nil {
		return false
	}
	n, e := parseRecord(it.data[it.off:], &it.rec, !it.headers)
	if e != nil {
		it.err = fmt.Errorf("rawstream: record %d at byte %d of the records: %s: %s", it.idx+1, it.off+e.off, e.field, e.msg)
		return false
	}
	it.off += n
	it.left--
	it.idx++
	return true
}

// Record is the current record; valid until the next call to Next.
func (it *Records) Record() *Record { return &it.rec }

// Index is the current record's index in the frame.
func (it *Records) Index() int { return it.idx }

// Offset is the byte offset of the next record within Data.
func (it *Records) Offset() int { return it.off }

// Err is the error that stopped the iteration, if any.
func (it *Records) Err() error { return it.err }

// AppendRecord appends a record header to a; exactly NumLanes lane entries
// must follow through AppendLane.
func (a *Access) AppendRecord(pc uint64, block uint32, warp uint16, space Space, flags Flags, active uint32, size uint8) {
	le := binary.LittleEndian
	b := le.AppendUint64(a.Data, pc)
	b = le.AppendUint32(b, block)
	b = le.AppendUint16(b, warp)
	b = append(b, byte(space), byte(flags))
	b = le.AppendUint32(b, active)
	a.Data = append(b, size, 0, 0, 0)
	a.Count++
}

// AppendLane appends one lane entry: the address and the value bytes
// (len(value) must be the record's size).
func (a *Access) AppendLane(addr uint64, value []byte) {
	a.Data = binary.LittleEndian.AppendUint64(a.Data, addr)
	a.Data = append(a.Data, value...)
}

// Append appends a whole record, plain (r.Lanes in the plain layout).
func (a *Access) Append(r *Record) {
	a.AppendRecord(r.PC, r.Block, r.Warp, r.Space, r.Flags, r.Active, r.Size)
	a.Data = append(a.Data, r.Lanes...)
}

// AppendCompact appends a whole record (r.Lanes in the plain layout) in
// the most compact encoding that holds it exactly, as the injection
// library writes records.
func (a *Access) AppendCompact(r *Record) {
	a.AppendRecord(r.PC, r.Block, r.Warp, r.Space, r.Flags, r.Active, r.Size)
	na, size := r.NumLanes(), int(r.Size)
	if na == 0 {
		a.Data = append(a.Data, r.Lanes...)
		return
	}
	le := binary.LittleEndian
	stride := 8 + size
	l0 := bits.TrailingZeros32(r.Active)
	a0 := le.Uint64(r.Lanes)
	var step uint64
	affine, uniform := true, true
	if rest := r.Active & (r.Active - 1); rest != 0 {
		dl := int64(bits.TrailingZeros32(rest) - l0)
		d := int64(le.Uint64(r.Lanes[stride:]) - a0)
		affine = d%dl == 0
		step = uint64(d / dl)
	}
	base := a0 - step*uint64(l0)
	v0 := r.Lanes[8:stride]
	for m, e := r.Active, 0; m != 0; m, e = m&(m-1), e+1 {
		ent := r.Lanes[e*stride : (e+1)*stride]
		affine = affine && le.Uint64(ent) == base+step*uint64(bits.TrailingZeros32(m))
		uniform = uniform && bytes.Equal(ent[8:], v0)
	}
	var enc uint8
	if affine {
		enc |= EncAffine
		a.Data = le.AppendUint64(le.AppendUint64(a.Data, base), step)
	} else {
		for e := 0; e < na; e++ {
			if !uniform {
				a.Data = append(a.Data, r.Lanes[e*stride:(e+1)*stride]...)
			} else {
				a.Data = append(a.Data, r.Lanes[e*stride:e*stride+8]...)
			}
		}
	}
	if uniform {
		enc |= EncUniform
		a.Data = append(a.Data, v0...)
	} else if affine {
		for e := 0; e < na; e++ {
			a.Data = append(a.Data, r.Lanes[e*stride+8:(e+1)*stride]...)
		}
	}
	// The header's byte 21 (AppendRecord wrote it as 0).
	a.Data[len(a.Data)-lanesSize(na, size, enc)-RecordHeaderSize+21] = enc
}

// Compact returns a copy of a with every record in its most compact
// encoding (recorded streams of plain records shrink; the records decode
// the same).
func (a *Access) Compact() (*Access, error) {
	c := &Access{LaunchID: a.LaunchID, Data: make([]byte, 0, len(a.Data)/2)}
	it := a.Records()
	for it.Next() {
		c.AppendCompact(it.Record())
	}
	return c, it.Err()
}

// CompactStream re-encodes a recorded stream with every Access frame
// compact, as the library writes them since wire version 2: captures
// recorded before shrink, and decode to the same records.
func CompactStream(data []byte) ([]byte, error) {
	var out bytes.Buffer
	w := NewWriter(&out)
	d := NewDecoder(bytes.NewReader(data))
	for {
		f, err := d.Next()
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		if a, ok := f.(*Access); ok {
			if f, err = a.Compact(); err != nil {
				return nil, err
			}
		}
		if err := w.Write(f); err != nil {
			return nil, err
		}
	}
}

// Reset empties a for reuse with another launch.
func (a *Access) Reset(launch uint64) {
	a.LaunchID, a.Count, a.Data = launch, 0, a.Data[:0]
}
