package rawstream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Error is a malformed or truncated stream. Offset is the byte offset in the
// stream where the problem is (the frame's start for framing problems, the
// field's position for payload problems); Frame is the index of the frame
// (0 = HELLO) and Kind its kind (0 if the header itself was cut).
type Error struct {
	Offset      int64
	FrameOffset int64
	Frame       int64
	Kind        Kind
	Field       string
	Msg         string
	// Truncated: the stream ended inside a frame or without END. Every
	// whole frame before Offset was decoded.
	Truncated bool
}

func (e *Error) Error() string {
	s := fmt.Sprintf("rawstream: offset %d: frame %d", e.Offset, e.Frame)
	if e.Kind != 0 {
		s += fmt.Sprintf(" (%v at offset %d)", e.Kind, e.FrameOffset)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Msg
}

// Decoder reads frames from a stream.
type Decoder struct {
	r        *bufio.Reader
	off      int64 // bytes consumed
	frameOff int64 // offset of the frame last returned
	frames   int64 // frames read, extensions included
	skipped  int64
	hello    bool
	version  uint16 // the HELLO's
	end      bool
	err      error
	hdr      [8]byte

	// A module whose bytes come in MODULE_DATA chunks, being assembled,
	// and the offset of its MODULE frame.
	pending    *Module
	pendingOff int64
}

// NewDecoder returns a decoder reading r.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 1<<16)}
}

// Offset is the byte offset of the frame last returned by Next.
func (d *Decoder) Offset() int64 { return d.frameOff }

// Bytes is the number of bytes consumed so far.
func (d *Decoder) Bytes() int64 { return d.off }

// Frames is the number of whole frames read so far (extensions included).
func (d *Decoder) Frames() int64 { return d.frames }

// Skipped is the number of extension frames skipped.
func (d *Decoder) Skipped() int64 { return d.skipped }

// Ended reports whether END was read.
func (d *Decoder) Ended() bool { return d.end }

// Next returns the next frame. It returns io.EOF after END when the stream
// ends there, and an *Error for anything malformed; after an error every
// further call returns the same error. The returned frame owns its memory.
func (d *Decoder) Next() (Frame, error) {
	if d.err != nil {
		return nil, d.err
	}
	f, err := d.next()
	if err != nil {
		d.err = err
	}
	return f, err
}

func (d *Decoder) fail(kind Kind, at int64, field, msg string, trunc bool) error {
	return &Error{Offset: at, FrameOffset: d.off, Frame: d.frames, Kind: kind, Field: field, Msg: msg, Truncated: trunc}
}

func (d *Decoder) next() (Frame, error) {
	for {
		n, err := io.ReadFull(d.r, d.hdr[:])
		if err != nil {
			if n == 0 && errors.Is(err, io.EOF) {
				if d.end {
					return nil, io.EOF
				}
				return nil, d.fail(0, d.off, "", fmt.Sprintf("stream ends after %d frames without END", d.frames), true)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, d.fail(0, d.off, "header", fmt.Sprintf("stream ends %d bytes into a frame header", n), true)
			}
			return nil, d.fail(0, d.off+int64(n), "header", "read: "+err.Error(), false)
		}
		kind := Kind(binary.LittleEndian.Uint32(d.hdr[:]))
		length := binary.LittleEndian.Uint32(d.hdr[4:])
		if d.end {
			return nil, d.fail(kind, d.off, "", "frame after END", false)
		}
		if length > MaxPayload {
			return nil, d.fail(kind, d.off+4, "length", fmt.Sprintf("%d bytes exceeds the limit of %d", length, MaxPayload), false)
		}
		if !d.hello && kind != KindHello {
			return nil, d.fail(kind, d.off, "kind", "the first frame must be HELLO", false)
		}
		if d.hello && kind == KindHello {
			return nil, d.fail(kind, d.off, "kind", "second HELLO", false)
		}
		known := kind >= KindHello && kind <= KindModuleData || decodedExtension(kind)
		if kind == KindModuleData && d.version < 3 {
			known = false // a kind this stream's version does not have
		}
		if !known && kind < FirstExtension {
			return nil, d.fail(kind, d.off, "kind", fmt.Sprintf("unknown frame kind %d", uint32(kind)), false)
		}
		if d.pending != nil && kind != KindModuleData {
			return nil, d.fail(kind, d.off, "kind", fmt.Sprintf("MODULE %d at offset %d has %d of its %d bytes: its MODULE_DATA frames must follow it",
				d.pending.ModuleID, d.pendingOff, len(d.pending.Bytes), d.pending.Size), false)
		}
		payload, err := d.readPayload(int(length))
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil, d.fail(kind, d.off+8+int64(len(payload)), "payload",
					fmt.Sprintf("stream ends %d bytes into a payload of %d", len(payload), length), true)
			}
			return nil, d.fail(kind, d.off+8+int64(len(payload)), "payload", "read: "+err.Error(), false)
		}
		if !known {
			d.off += 8 + int64(length)
			d.frames++
			d.skipped++
			continue
		}
		if kind == KindModuleData {
			m, perr := d.moduleData(payload)
			if perr != nil {
				return nil, d.fail(kind, d.off+8+int64(perr.off), perr.field, perr.msg, false)
			}
			d.off += 8 + int64(length)
			d.frames++
			if m == nil {
				continue
			}
			d.frameOff = d.pendingOff
			d.pending = nil
			m.chunked = false
			return m, nil
		}
		f, perr := parsePayload(kind, payload, d.version)
		if perr != nil {
			return nil, d.fail(kind, d.off+8+int64(perr.off), perr.field, perr.msg, false)
		}
		if m, ok := f.(*Module); ok && m.chunked {
			// has_bytes 2: the bytes follow in MODULE_DATA frames.
			if m.Size == 0 {
				return nil, d.fail(kind, d.off+8+16, "size", "a chunked module of 0 bytes", false)
			}
			d.pending, d.pendingOff = m, d.off
			d.off += 8 + int64(length)
			d.frames++
			continue
		}
		if e, ok := f.(*End); ok && e.Frames != uint64(d.frames) {
			return nil, d.fail(kind, d.off+8, "frames", fmt.Sprintf("END says %d frames were written before it, %d were read", e.Frames, d.frames), false)
		}
		if h, ok := f.(*Hello); ok {
			d.hello = true
			d.version = h.Version
		}
		if kind == KindEnd {
			d.end = true
		}
		d.frameOff = d.off
		d.off += 8 + int64(length)
		d.frames++
		return f, nil
	}
}

// moduleData adds one MODULE_DATA chunk to the pending module and returns
// the module once its last byte arrived. The bytes grow with the chunks
// (no allocation is driven by the size field alone).
func (d *Decoder) moduleData(b []byte) (*Module, *fieldError) {
	p := &pr{b: b}
	id := p.u64("module_id")
	at := p.off
	off := p.u64("offset")
	if p.err != nil {
		return nil, p.err
	}
	m := d.pending
	switch {
	case m == nil:
		return nil, &fieldError{0, "module_id", fmt.Sprintf("MODULE_DATA for module %d without a MODULE frame announcing chunks", id)}
	case id != m.ModuleID:
		return nil, &fieldError{0, "module_id", fmt.Sprintf("%d, but module %d is being assembled", id, m.ModuleID)}
	case off != uint64(len(m.Bytes)):
		return nil, &fieldError{at, "offset", fmt.Sprintf("%d, want %d (chunks come in order, without gaps)", off, len(m.Bytes))}
	case uint64(len(m.Bytes))+uint64(len(b)-p.off) > uint64(m.Size):
		return nil, &fieldError{p.off, "bytes", fmt.Sprintf("%d bytes at offset %d exceed the module's size %d", len(b)-p.off, off, m.Size)}
	}
	if m.Bytes == nil {
		m.Bytes = make([]byte, 0, min(int(m.Size), 4*ModuleChunk))
	}
	if need := len(m.Bytes) + len(b) - p.off; need > cap(m.Bytes) {
		// Double, up to the size: append's growth by a quarter would copy
		// a 100 MB module several times over. What is allocated stays
		// within twice the bytes that came.
		grown := make([]byte, len(m.Bytes), min(int(m.Size), max(need, 2*cap(m.Bytes))))
		copy(grown, m.Bytes)
		m.Bytes = grown
	}
	m.Bytes = append(m.Bytes, b[p.off:]...)
	if len(m.Bytes) < int(m.Size) {
		return nil, nil
	}
	return m, nil
}

// readPayload reads n bytes. The first MiB is read into a buffer of its
// own, so that a cut stream claiming a huge frame does not allocate it all;
// once that much arrived, the full buffer is allocated at once.
func (d *Decoder) readPayload(n int) ([]byte, error) {
	const first = 1 << 20
	buf := make([]byte, min(n, first))
	got, err := io.ReadFull(d.r, buf)
	if err != nil || n <= first {
		return buf[:got], err
	}
	full := make([]byte, n)
	copy(full, buf)
	got, err = io.ReadFull(d.r, full[first:])
	return full[:first+got], err
}

// fieldError is a payload problem at byte off of the payload.
type fieldError struct {
	off   int
	field string
	msg   string
}

// pr reads payload fields; the first short read sticks.
type pr struct {
	b   []byte
	off int
	err *fieldError
}

func (p *pr) need(n int, field string) []byte {
	if p.err != nil {
		return nil
	}
	if len(p.b)-p.off < n {
		p.err = &fieldError{p.off, field, fmt.Sprintf("payload ends before the field (%d bytes left, %d needed)", len(p.b)-p.off, n)}
		return nil
	}
	s := p.b[p.off : p.off+n]
	p.off += n
	return s
}

func (p *pr) u8(f string) uint8 {
	if b := p.need(1, f); b != nil {
		return b[0]
	}
	return 0
}
func (p *pr) u16(f string) uint16 {
	if b := p.need(2, f); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (p *pr) u32(f string) uint32 {
	if b := p.need(4, f); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (p *pr) u64(f string) uint64 {
	if b := p.need(8, f); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
func (p *pr) str(f string) string {
	n := int(p.u16(f + " length"))
	return string(p.need(n, f))
}
func (p *pr) frames(f string) []uint64 {
	n := int(p.u16(f + " count"))
	b := p.need(8*n, f)
	if b == nil {
		return nil
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}
func (p *pr) bad(at int, field, msg string) {
	if p.err == nil {
		p.err = &fieldError{at, field, msg}
	}
}

// count reads a u32 count of entries each at least minSize bytes, and
// rejects counts the payload cannot hold (so no allocation is driven by a
// corrupt count).
func (p *pr) count(f string, minSize int) int {
	at := p.off
	n := p.u32(f)
	if p.err == nil && uint64(n)*uint64(minSize) > uint64(len(p.b)-p.off) {
		p.bad(at, f, fmt.Sprintf("%d entries cannot fit in the %d bytes left", n, len(p.b)-p.off))
		return 0
	}
	return int(n)
}

// parsePayload decodes one frame's payload; version is the stream's (from
// its HELLO), which decides what the later additions may hold. Each kind
// with more than a fixed run of fields has a parse function of its own; a
// field error sticks in p and is returned here.
func parsePayload(kind Kind, b []byte, version uint16) (Frame, *fieldError) {
	p := &pr{b: b}
	var f Frame
	strict := true
	switch kind {
	case KindHello:
		f = parseHello(p)
		strict = false // later versions may append fields
	case KindModuleHash:
		f = parseExtension(kind, p)
	case KindModule:
		f = parseModule(p, version)
	case KindFunction:
		f = &Function{FunctionID: p.u32("function_id"), ModuleID: p.u64("module_id"), PC: p.u64("pc"), Size: p.u32("size"), Name: p.str("name")}
	case KindLaunch:
		f = parseLaunch(p, version)
	case KindAccess:
		f = parseAccess(p)
	case KindKernelEnd:
		f = &KernelEnd{LaunchID: p.u64("launch_id"), StartNS: p.u64("start_ns"), EndNS: p.u64("end_ns"),
			BlocksTotal: p.u32("blocks_total"), BlocksSampled: p.u32("blocks_sampled"), Records: p.u64("records"), Dropped: p.u64("dropped")}
	case KindAlloc:
		f = parseAlloc(p)
	case KindFree:
		f = &Free{Address: p.u64("address")}
	case KindStallReasons:
		f = parseStallReasons(p)
	case KindPCSamples:
		f = parsePCSamples(p)
	case KindInstrCounts:
		f = parseInstrCounts(p)
	case KindHostModule:
		f = parseHostModule(p)
	case KindDropped:
		d := &Dropped{Records: p.u64("records"), Bytes: p.u64("bytes")}
		if p.err == nil && p.off < len(b) {
			d.PCSamples = p.u64("pc_samples")
		}
		f = d
	case KindEnd:
		f = &End{Frames: p.u64("frames"), ExitCode: int32(p.u32("exit_code"))}
	}
	if p.err != nil {
		return nil, p.err
	}
	if strict && p.off != len(b) {
		return nil, &fieldError{p.off, "payload", fmt.Sprintf("%d bytes after the last field", len(b)-p.off)}
	}
	return f, nil
}

func parseHello(p *pr) *Hello {
	if m := p.u32("magic"); p.err == nil && m != Magic {
		p.bad(0, "magic", fmt.Sprintf("%#x, want %#x", m, Magic))
	}
	h := &Hello{}
	at := p.off
	h.Version = p.u16("version")
	if p.err == nil && (h.Version < MinVersion || h.Version > Version) {
		p.bad(at, "version", fmt.Sprintf("%d, this decoder reads versions %d to %d", h.Version, MinVersion, Version))
	}
	h.Flags = p.u16("flags")
	h.Rank = int32(p.u32("rank"))
	h.PID = p.u32("pid")
	at = p.off
	h.Mode = Mode(p.u8("mode"))
	if p.err == nil && (h.Mode < ModeRedundancy || h.Mode > ModeHybrid) {
		p.bad(at, "mode", fmt.Sprintf("%d is not a mode", h.Mode))
	}
	h.BlockSampling = p.u32("block_sampling")
	h.KernelSampling = p.u32("kernel_sampling")
	h.StartNS = p.u64("start_ns")
	h.Host = p.str("host")
	h.GPU = p.str("gpu")
	h.GPUUUID = p.str("gpu_uuid")
	h.Driver = p.str("driver")
	h.CUDA = p.str("cuda")
	h.SM = p.u16("sm")
	h.Device = -1
	if h.Version >= 3 && p.err == nil {
		h.Device = int32(p.u32("device"))
		d := &h.Props
		for _, f := range []struct {
			v    *uint32
			name string
		}{{&d.SMs, "sm_count"}, {&d.ClockKHz, "clock_khz"}, {&d.MemClockKHz, "mem_clock_khz"}, {&d.MemBusBits, "mem_bus_bits"},
			{&d.L2Bytes, "l2_bytes"}, {&d.RegsPerSM, "regs_per_sm"}, {&d.SharedPerSM, "smem_per_sm"}, {&d.ThreadsPerSM, "threads_per_sm"}} {
			*f.v = p.u32(f.name)
		}
		d.MemBytes = p.u64("mem_bytes")
	}
	return h
}

func parseModule(p *pr, version uint16) *Module {
	m := &Module{ModuleID: p.u64("module_id"), ContentKey: p.u64("content_key"), Size: p.u32("size")}
	at := p.off
	hb := p.u8("has_bytes")
	switch {
	case p.err != nil:
	case hb == 2 && version < 3:
		p.bad(at, "has_bytes", fmt.Sprintf("2 (chunked) in a version %d stream", version))
	case hb > 2:
		p.bad(at, "has_bytes", fmt.Sprintf("%d, want 0, 1 or 2", hb))
	}
	m.HasBytes = hb >= 1
	m.chunked = hb == 2
	if hb == 1 {
		m.Bytes = p.need(int(m.Size), "bytes")
	}
	return m
}

func parseLaunch(p *pr, version uint16) *Launch {
	l := &Launch{LaunchID: p.u64("launch_id"), FunctionID: p.u32("function_id")}
	for i := range l.Grid {
		l.Grid[i] = p.u32("grid")
	}
	for i := range l.Block {
		l.Block[i] = p.u32("block")
	}
	l.SharedBytes = p.u32("shared_bytes")
	l.Stream = p.u64("stream")
	at := p.off
	fl := p.u8("flags")
	switch {
	case p.err != nil:
	case version < 3 && fl > 1:
		p.bad(at, "instrumented", fmt.Sprintf("%d, want 0 or 1", fl))
	case fl > 3:
		p.bad(at, "flags", fmt.Sprintf("%#x has bits other than traced (1) and graph (2)", fl))
	}
	l.Instrumented = fl&1 != 0
	l.Graph = fl&2 != 0
	l.BlockOffset = p.u32("block_offset")
	l.Host = p.frames("host")
	return l
}

// parseAccess validates every record; Data is the records' bytes, a slice
// of the payload (no copy).
func parseAccess(p *pr) *Access {
	a := &Access{LaunchID: p.u64("launch_id")}
	a.Count = uint32(p.count("count", RecordHeaderSize))
	if p.err == nil {
		start := p.off
		var r Record
		for i := uint32(0); i < a.Count; i++ {
			n, e := parseRecord(p.b[p.off:], &r, false)
			if e != nil {
				p.bad(p.off+e.off, fmt.Sprintf("record %d %s", i, e.field), e.msg)
				break
			}
			p.off += n
		}
		a.Data = p.b[start:p.off]
	}
	return a
}

func parseAlloc(p *pr) *Alloc {
	a := &Alloc{AllocID: p.u64("alloc_id"), Address: p.u64("address"), Size: p.u64("size")}
	at := p.off
	a.Memory = AllocKind(p.u8("kind"))
	if p.err == nil && (a.Memory < AllocDevice || a.Memory > AllocAsync) {
		p.bad(at, "kind", fmt.Sprintf("%d is not an allocation kind", a.Memory))
	}
	a.Host = p.frames("host")
	return a
}

func parseStallReasons(p *pr) *StallReasons {
	s := &StallReasons{}
	n := p.count("count", 6)
	s.Reasons = make([]StallReason, 0, n)
	for i := 0; i < n && p.err == nil; i++ {
		s.Reasons = append(s.Reasons, StallReason{Index: p.u32("index"), Name: p.str("name")})
	}
	return s
}

func parsePCSamples(p *pr) *PCSamples {
	s := &PCSamples{LaunchID: p.u64("launch_id")}
	n := p.count("count", 10)
	s.PCs = make([]PCSample, 0, n)
	for i := 0; i < n && p.err == nil; i++ {
		pc := PCSample{FunctionID: p.u32("function_id"), Offset: p.u32("pc_offset")}
		at := p.off
		m := int(p.u16("n"))
		if p.err == nil && m*8 > len(p.b)-p.off {
			p.bad(at, "n", fmt.Sprintf("%d reasons cannot fit in the %d bytes left", m, len(p.b)-p.off))
		}
		if p.err == nil && m > 0 {
			pc.Stalls = make([]StallCount, m)
			for j := range pc.Stalls {
				pc.Stalls[j] = StallCount{Reason: p.u32("reason_index"), Samples: p.u32("samples")}
			}
		}
		s.PCs = append(s.PCs, pc)
	}
	return s
}

func parseInstrCounts(p *pr) *InstrCounts {
	c := &InstrCounts{LaunchID: p.u64("launch_id")}
	n := p.count("count", 24)
	c.Counts = make([]InstrCount, 0, n)
	for i := 0; i < n && p.err == nil; i++ {
		c.Counts = append(c.Counts, InstrCount{FunctionID: p.u32("function_id"), Offset: p.u32("pc_offset"),
			Executed: p.u64("inst_executed"), ThreadExecuted: p.u64("thread_inst_executed")})
	}
	return c
}

func parseHostModule(p *pr) *HostModule {
	m := &HostModule{Base: p.u64("base"), Path: p.str("path"), BuildID: p.str("build_id")}
	at := p.off
	n := int(p.u16("nseg"))
	if p.err == nil && n*16 > len(p.b)-p.off {
		p.bad(at, "nseg", fmt.Sprintf("%d segments cannot fit in the %d bytes left", n, len(p.b)-p.off))
	}
	if p.err == nil {
		m.Segments = make([]Segment, n)
		for i := range m.Segments {
			m.Segments[i] = Segment{Start: p.u64("segment start"), Size: p.u64("segment size")}
		}
	}
	return m
}
