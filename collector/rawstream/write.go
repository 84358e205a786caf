package rawstream

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Writer writes frames. It counts them so that End carries the right frame
// count; HELLO must come first (not enforced: tests write bad streams).
type Writer struct {
	w      io.Writer
	buf    []byte
	frames uint64
	bytes  int64
}

// NewWriter returns a writer to w. Writes are not buffered beyond one
// frame; wrap w in a bufio.Writer for small frames.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Frames is the number of frames written.
func (w *Writer) Frames() uint64 { return w.frames }

// Bytes is the number of bytes written.
func (w *Writer) Bytes() int64 { return w.bytes }

// Write encodes and writes f. An *End's Frames is set to the number of
// frames written before it. A Module whose bytes do not fit in one frame
// is written as a MODULE frame and its MODULE_DATA chunks.
func (w *Writer) Write(f Frame) error {
	if e, ok := f.(*End); ok {
		e.Frames = w.frames
	}
	if m, ok := f.(*Module); ok && m.HasBytes && !moduleInline(m.Size) {
		return w.writeChunked(m)
	}
	var err error
	w.buf, err = AppendFrame(w.buf[:0], f)
	if err != nil {
		return err
	}
	n, err := w.w.Write(w.buf)
	w.bytes += int64(n)
	if err != nil {
		return err
	}
	w.frames += uint64(frameCount(f))
	return nil
}

// writeChunked writes a chunked module frame by frame, its bytes from
// the module itself: a 100 MB module is not copied into one buffer first.
func (w *Writer) writeChunked(m *Module) error {
	if len(m.Bytes) != int(m.Size) {
		return fmt.Errorf("rawstream: MODULE %d: %d bytes, size says %d", m.ModuleID, len(m.Bytes), m.Size)
	}
	out := func(b []byte) error {
		n, err := w.w.Write(b)
		w.bytes += int64(n)
		return err
	}
	w.buf = pw(w.buf[:0]).u32(uint32(KindModule)).u32(21).u64(m.ModuleID).u64(m.ContentKey).u32(m.Size).u8(2)
	if err := out(w.buf); err != nil {
		return err
	}
	w.frames++
	for off := 0; off < len(m.Bytes); off += ModuleChunk {
		chunk := m.Bytes[off:min(off+ModuleChunk, len(m.Bytes))]
		w.buf = pw(w.buf[:0]).u32(uint32(KindModuleData)).u32(uint32(16 + len(chunk))).u64(m.ModuleID).u64(uint64(off))
		if err := out(w.buf); err != nil {
			return err
		}
		if err := out(chunk); err != nil {
			return err
		}
		w.frames++
	}
	return nil
}

// frameCount is the number of wire frames AppendFrame writes for f.
func frameCount(f Frame) int {
	if m, ok := f.(*Module); ok && m.HasBytes && !moduleInline(m.Size) {
		return 1 + (int(m.Size)+ModuleChunk-1)/ModuleChunk
	}
	return 1
}

// WriteRaw writes a frame of any kind with the given payload as is (for
// extensions and for tests of the decoder).
func (w *Writer) WriteRaw(kind Kind, payload []byte) error {
	w.buf = binary.LittleEndian.AppendUint32(w.buf[:0], uint32(kind))
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(payload)))
	w.buf = append(w.buf, payload...)
	n, err := w.w.Write(w.buf)
	w.bytes += int64(n)
	if err == nil {
		w.frames++
	}
	return err
}

type pw []byte

func (b pw) u8(v uint8) pw   { return append(b, v) }
func (b pw) u16(v uint16) pw { return binary.LittleEndian.AppendUint16(b, v) }
func (b pw) u32(v uint32) pw { return binary.LittleEndian.AppendUint32(b, v) }
func (b pw) u64(v uint64) pw { return binary.LittleEndian.AppendUint64(b, v) }
func (b pw) str(s string) pw {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	return append(b.u16(uint16(len(s))), s...)
}
func (b pw) frames(fs []uint64) pw {
	if len(fs) > 0xffff {
		fs = fs[:0xffff]
	}
	b = b.u16(uint16(len(fs)))
	for _, f := range fs {
		b = b.u64(f)
	}
	return b
}
func bit(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// AppendFrame appends the encoding of f (header and payload) to b: one
// frame, or for a Module larger than a frame its MODULE frame followed by
// its MODULE_DATA chunks.
func AppendFrame(b []byte, f Frame) ([]byte, error) {
	if m, ok := f.(*Module); ok && m.HasBytes && !moduleInline(m.Size) {
		return appendChunkedModule(b, m)
	}
	start := len(b)
	p := pw(b).u32(uint32(f.Kind())).u32(0)
	switch f := f.(type) {
	case *Hello:
		p = p.u32(Magic).u16(f.Version).u16(f.Flags).u32(uint32(f.Rank)).u32(f.PID).u8(uint8(f.Mode)).
			u32(f.BlockSampling).u32(f.KernelSampling).u64(f.StartNS).str(f.Host).str(f.GPU).str(f.GPUUUID).
			str(f.Driver).str(f.CUDA).u16(f.SM)
		if f.Version >= 3 {
			d := f.Props
			p = p.u32(uint32(f.Device)).u32(d.SMs).u32(d.ClockKHz).u32(d.MemClockKHz).u32(d.MemBusBits).u32(d.L2Bytes).
				u32(d.RegsPerSM).u32(d.SharedPerSM).u32(d.ThreadsPerSM).u64(d.MemBytes)
		}
	case *Module:
		p = p.u64(f.ModuleID).u64(f.ContentKey).u32(f.Size).u8(bit(f.HasBytes))
		if f.HasBytes {
			if len(f.Bytes) != int(f.Size) {
				return b, fmt.Errorf("rawstream: MODULE %d: %d bytes, size says %d", f.ModuleID, len(f.Bytes), f.Size)
			}
			p = append(p, f.Bytes...)
		}
	case *Function:
		p = p.u32(f.FunctionID).u64(f.ModuleID).u64(f.PC).u32(f.Size).str(f.Name)
	case *Launch:
		p = p.u64(f.LaunchID).u32(f.FunctionID)
		for _, v := range f.Grid {
			p = p.u32(v)
		}
		for _, v := range f.Block {
			p = p.u32(v)
		}
		p = p.u32(f.SharedBytes).u64(f.Stream).u8(bit(f.Instrumented) | bit(f.Graph)<<1).u32(f.BlockOffset).frames(f.Host)
	case *Access:
		p = append(p.u64(f.LaunchID).u32(f.Count), f.Data...)
	case *KernelEnd:
		p = p.u64(f.LaunchID).u64(f.StartNS).u64(f.EndNS).u32(f.BlocksTotal).u32(f.BlocksSampled).u64(f.Records).u64(f.Dropped)
	case *Alloc:
		p = p.u64(f.AllocID).u64(f.Address).u64(f.Size).u8(uint8(f.Memory)).frames(f.Host)
	case *Free:
		p = p.u64(f.Address)
	case *StallReasons:
		p = p.u32(uint32(len(f.Reasons)))
		for _, r := range f.Reasons {
			p = p.u32(r.Index).str(r.Name)
		}
	case *PCSamples:
		p = p.u64(f.LaunchID).u32(uint32(len(f.PCs)))
		for _, pc := range f.PCs {
			p = p.u32(pc.FunctionID).u32(pc.Offset).u16(uint16(len(pc.Stalls)))
			for _, s := range pc.Stalls {
				p = p.u32(s.Reason).u32(s.Samples)
			}
		}
	case *InstrCounts:
		p = p.u64(f.LaunchID).u32(uint32(len(f.Counts)))
		for _, c := range f.Counts {
			p = p.u32(c.FunctionID).u32(c.Offset).u64(c.Executed).u64(c.ThreadExecuted)
		}
	case *HostModule:
		p = p.u64(f.Base).str(f.Path).str(f.BuildID).u16(uint16(len(f.Segments)))
		for _, s := range f.Segments {
			p = p.u64(s.Start).u64(s.Size)
		}
	case *Dropped:
		p = p.u64(f.Records).u64(f.Bytes)
		if f.PCSamples != 0 {
			p = p.u64(f.PCSamples)
		}
	case *End:
		p = p.u64(f.Frames).u32(uint32(f.ExitCode))
	default:
		var ok bool
		if p, ok = appendExtension(p, f); !ok {
			return b, fmt.Errorf("rawstream: cannot write a %T", f)
		}
	}
	n := len(p) - start - 8
	if n > MaxPayload {
		return b, fmt.Errorf("rawstream: %v frame of %d bytes exceeds the limit of %d", f.Kind(), n, MaxPayload)
	}
	binary.LittleEndian.PutUint32(p[start+4:], uint32(n))
	return p, nil
}

// appendChunkedModule writes a MODULE frame with has_bytes 2 and the bytes
// in MODULE_DATA frames of at most ModuleChunk bytes.
func appendChunkedModule(b []byte, m *Module) ([]byte, error) {
	if len(m.Bytes) != int(m.Size) {
		return b, fmt.Errorf("rawstream: MODULE %d: %d bytes, size says %d", m.ModuleID, len(m.Bytes), m.Size)
	}
	b = pw(b).u32(uint32(KindModule)).u32(21).u64(m.ModuleID).u64(m.ContentKey).u32(m.Size).u8(2)
	for off := 0; off < len(m.Bytes); off += ModuleChunk {
		chunk := m.Bytes[off:min(off+ModuleChunk, len(m.Bytes))]
		b = pw(b).u32(uint32(KindModuleData)).u32(uint32(16 + len(chunk))).u64(m.ModuleID).u64(uint64(off))
		b = append(b, chunk...)
	}
	return b, nil
}
