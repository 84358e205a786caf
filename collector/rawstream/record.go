package rawstream

import (
	"encoding/binary"
	"fmt"
	"math/bits"
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

// Record is one warp-level access or block record. Lanes holds, per set bit
// of Active from lane 0 up, a u64 address then Size value bytes.
type Record struct {
	PC     uint64
	Block  uint32
	Warp   uint16
	Space  Space
	Flags  Flags
	Active uint32
	Size   uint8
	Lanes  []byte
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

// parseRecord reads one record from b. It returns the record, its length,
// or what is wrong with it.
func parseRecord(b []byte, r *Record) (int, *recordError) {
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
	if r.Space > SpaceLocal {
		return 0, &recordError{14, "space", fmt.Sprintf("%d is not a space", b[14])}
	}
	if !validSize(r.Size) {
		return 0, &recordError{20, "size", fmt.Sprintf("%d is not a lane access size", r.Size)}
	}
	n := 0
	if r.Size > 0 {
		n = bits.OnesCount32(r.Active) * (8 + int(r.Size))
	}
	if len(b)-RecordHeaderSize < n {
		return 0, &recordError{RecordHeaderSize, "lanes", fmt.Sprintf("%d active lanes of %d bytes need %d bytes, %d left",
			bits.OnesCount32(r.Active), r.Size, n, len(b)-RecordHeaderSize)}
	}
	r.Lanes = b[RecordHeaderSize : RecordHeaderSize+n]
	return RecordHeaderSize + n, nil
}

// ParseRecord reads the record at the start of b (Access.Data from some
// record's offset on) into r and returns its length.
func ParseRecord(b []byte, r *Record) (int, error) {
	n, e := parseRecord(b, r)
	if e != nil {
		return 0, fmt.Errorf("rawstream: record at byte %d: %s: %s", e.off, e.field, e.msg)
	}
	return n, nil
}

// Records iterates over the records of an Access frame without copying.
type Records struct {
	data []byte
	off  int
	left uint32
	idx  int
	rec  Record
	err  error
}

// Records returns an iterator over a's records.
func (a *Access) Records() Records { return Records{data: a.Data, left: a.Count, idx: -1} }

// Next advances to the next record; false at the end or on a malformed
// record (see Err).
func (it *Records) Next() bool {
	if it.left == 0 || it.err != nil {
		return false
	}
	n, e := parseRecord(it.data[it.off:], &it.rec)
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

// Append appends a whole record (r.Lanes already encoded).
func (a *Access) Append(r *Record) {
	a.AppendRecord(r.PC, r.Block, r.Warp, r.Space, r.Flags, r.Active, r.Size)
	a.Data = append(a.Data, r.Lanes...)
}

// Reset empties a for reuse with another launch.
func (a *Access) Reset(launch uint64) {
	a.LaunchID, a.Count, a.Data = launch, 0, a.Data[:0]
}
