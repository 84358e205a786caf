package rawstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// everyFrame returns one frame of every kind, in a valid order.
func everyFrame() []Frame {
	acc := &Access{LaunchID: 7}
	acc.AppendRecord(0x7f0000001000, 3, 1, SpaceNone, FlagBlockEnter, 0xffffffff, 0)
	acc.AppendRecord(0x7f0000001010, 3, 1, SpaceGlobal, FlagRead, 0x5, 4)
	acc.AppendLane(0x1000, []byte{1, 2, 3, 4})
	acc.AppendLane(0x1008, []byte{5, 6, 7, 8})
	acc.AppendRecord(0x7f0000001020, 3, 1, SpaceShared, FlagWrite|FlagAtomic, 0x80000000, 16)
	acc.AppendLane(0x40, bytes.Repeat([]byte{9}, 16))
	acc.AppendRecord(0x7f0000001030, 3, 1, SpaceNone, FlagBlockExit, 0xffffffff, 0)
	return []Frame{
		&Hello{Version: Version, Flags: HelloSynthetic, Rank: -1, PID: 4242, Mode: ModeRedundancy, BlockSampling: 50, KernelSampling: 10,
			StartNS: 1700000000000000000, Host: "node01", GPU: "NVIDIA H100 80GB HBM3", GPUUUID: "GPU-1234", Driver: "580.1", CUDA: "13.0", SM: 90, Device: 1,
			Props: DeviceProps{SMs: 132, ClockKHz: 1980000, MemClockKHz: 2619000, MemBusBits: 5120, L2Bytes: 52428800, RegsPerSM: 65536, SharedPerSM: 233472, ThreadsPerSM: 2048, MemBytes: 85520809984}},
		&HostModule{Base: 0x555500000000, Path: "/opt/app/bin/app", BuildID: "abcdef", Segments: []Segment{{0x555500001000, 0x2000}, {0x555500004000, 0x100}}},
		&Module{ModuleID: 1, ContentKey: 0x1234, Size: 5, HasBytes: true, Bytes: []byte("\x7fELFx")},
		&Module{ModuleID: 2, ContentKey: 0x1234, Size: 5},
		&Function{FunctionID: 3, ModuleID: 1, PC: 0x7f0000001000, Size: 0x200, Name: "_Z3shmPi"},
		&Alloc{AllocID: 1, Address: 0x1000, Size: 4096, Memory: AllocDevice, Host: []uint64{0x555500001234, 0x555500001300}},
		&Launch{LaunchID: 7, FunctionID: 3, Grid: [3]uint32{16, 1, 1}, Block: [3]uint32{256, 1, 1}, SharedBytes: 1024, Stream: 9,
			Instrumented: true, BlockOffset: 13, Host: []uint64{0x555500001111}},
		acc,
		&StallReasons{Reasons: []StallReason{{0, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"}, {1, "smsp__pcsamp_warps_issue_stalled_selected"}}},
		&PCSamples{LaunchID: 7, PCs: []PCSample{{FunctionID: 3, Offset: 0x10, Stalls: []StallCount{{0, 5}, {1, 2}}}, {FunctionID: 3, Offset: 0x20}}},
		&InstrCounts{LaunchID: 7, Counts: []InstrCount{{3, 0x10, 100, 3200}}},
		&KernelEnd{LaunchID: 7, StartNS: 10, EndNS: 20, BlocksTotal: 16, BlocksSampled: 1, Records: 4, Dropped: 1},
		&Free{Address: 0x1000},
		&Dropped{Records: 12, Bytes: 3456, PCSamples: 789},
		&Launch{LaunchID: 8, FunctionID: 3, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Stream: 9, Graph: true, Host: []uint64{0x555500002222}},
		&End{ExitCode: 3},
	}
}

func encode(t testing.TB, frames []Frame) []byte {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, f := range frames {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func decodeAll(b []byte) ([]Frame, []int64, error) {
	d := NewDecoder(bytes.NewReader(b))
	var out []Frame
	var offs []int64
	for {
		f, err := d.Next()
		if err == io.EOF {
			return out, offs, nil
		}
		if err != nil {
			return out, offs, err
		}
		out = append(out, f)
		offs = append(offs, d.Offset())
	}
}

func TestRoundTripEveryKind(t *testing.T) {
	in := everyFrame()
	b := encode(t, in)
	out, _, err := decodeAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("decoded %d frames, wrote %d", len(out), len(in))
	}
	seen := map[Kind]bool{}
	for i := range in {
		seen[out[i].Kind()] = true
		// Module without bytes decodes with nil Bytes; the Access data is a
		// sub-slice: compare by value.
		if !reflect.DeepEqual(in[i], out[i]) {
			t.Errorf("frame %d (%v): wrote %+v, read %+v", i, in[i].Kind(), in[i], out[i])
		}
	}
	for k := KindHello; k <= KindEnd; k++ {
		if !seen[k] {
			t.Errorf("kind %v not covered", k)
		}
	}
	// Records come back lane by lane.
	acc := out[7].(*Access)
	it := acc.Records()
	var got []string
	for it.Next() {
		r := it.Record()
		s := r.Space.String()
		for i := 0; i < r.NumLanes(); i++ {
			a, v := r.Lane(i)
			s += " " + string(rune('0'+a%10)) + ":" + string(rune('0'+v[0]))
		}
		got = append(got, s)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	want := []string{"none", "global 6:1 4:5", "shared 4:9", "none"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
}

// Every cut of a valid stream decodes all whole frames before the cut and
// then reports a truncation at or after the last whole frame's end.
func TestTruncatedAtEveryByte(t *testing.T) {
	b := encode(t, everyFrame())
	_, offs, err := decodeAll(b)
	if err != nil {
		t.Fatal(err)
	}
	ends := append(offs[1:], int64(len(b)))
	for cut := 0; cut < len(b); cut++ {
		got, _, err := decodeAll(b[:cut])
		var e *Error
		if !errors.As(err, &e) || !e.Truncated {
			t.Fatalf("cut at %d: error %v, want a truncation", cut, err)
		}
		whole := 0
		for whole < len(ends) && ends[whole] <= int64(cut) {
			whole++
		}
		if len(got) != whole {
			t.Fatalf("cut at %d: %d frames decoded, want %d", cut, len(got), whole)
		}
		if whole > 0 && e.FrameOffset != ends[whole-1] {
			t.Fatalf("cut at %d: error names frame offset %d, want %d (%v)", cut, e.FrameOffset, ends[whole-1], e)
		}
	}
}

func TestErrorsNameOffsetAndKind(t *testing.T) {
	good := encode(t, everyFrame())
	_, offs, _ := decodeAll(good)
	le := binary.LittleEndian
	cases := []struct {
		name  string
		mod   func(b []byte) []byte
		frame int    // index of the frame the error should name
		want  string // in the message
	}{
		{"first frame not hello", func(b []byte) []byte { return b[offs[1]:] }, 0, "first frame must be HELLO"},
		{"bad magic", func(b []byte) []byte { b[8] ^= 1; return b }, 0, "magic"},
		{"bad version", func(b []byte) []byte { b[12] = 9; return b }, 0, "version"},
		{"unknown kind", func(b []byte) []byte { le.PutUint32(b[offs[4]:], 77); return b }, 4, "unknown frame kind 77"},
		{"too long", func(b []byte) []byte { le.PutUint32(b[offs[4]+4:], MaxPayload+1); return b }, 4, "exceeds the limit"},
		{"bad lane size", func(b []byte) []byte { b[offs[7]+8+12+24+20] = 3; return b }, 7, "record 1 size"},
		{"bad space", func(b []byte) []byte { b[offs[7]+8+12+24+14] = 9; return b }, 7, "record 1 space"},
		{"access count too big", func(b []byte) []byte { le.PutUint32(b[offs[7]+16:], 1000); return b }, 7, "count"},
		{"end frame count", func(b []byte) []byte { b[offs[len(offs)-1]+8]++; return b }, len(offs) - 1, "END says"},
		{"trailing bytes", func(b []byte) []byte {
			// grow FREE's payload by one byte
			i := offs[12]
			out := append([]byte{}, b[:i+16]...)
			out = append(out, 0)
			out = append(out, b[i+16:]...)
			le.PutUint32(out[i+4:], 9)
			return out
		}, 12, "after the last field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.mod(append([]byte{}, good...))
			got, _, err := decodeAll(b)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want *Error", err)
			}
			if !strings.Contains(e.Error(), c.want) || !strings.Contains(e.Error(), "offset") {
				t.Errorf("error %q does not say %q", e, c.want)
			}
			wantOff := offs[c.frame]
			if c.name == "first frame not hello" {
				wantOff = 0
			}
			if e.FrameOffset != wantOff {
				t.Errorf("error names frame at %d, want %d: %v", e.FrameOffset, wantOff, e)
			}
			if e.Truncated {
				t.Errorf("corruption reported as truncation: %v", e)
			}
			if c.name != "first frame not hello" && len(got) != c.frame {
				t.Errorf("%d frames kept before the error, want %d", len(got), c.frame)
			}
		})
	}
}

// DROPPED's pc_samples field is optional: the 16-byte form of earlier
// libraries reads as no PC samples dropped, and a cut field is an error
// that names it.
func TestDroppedOptionalField(t *testing.T) {
	frames := everyFrame()
	frames[13] = &Dropped{Records: 1, Bytes: 2}
	b := encode(t, frames)
	out, offs, err := decodeAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := out[13].(*Dropped); *d != (Dropped{Records: 1, Bytes: 2}) {
		t.Fatalf("read %+v", d)
	}
	if n := offs[14] - offs[13]; n != 8+16 {
		t.Fatalf("DROPPED without PC samples is %d bytes, want the 24 of the first version", n)
	}
	// A payload of 20 bytes: half a pc_samples field.
	cut := append([]byte{}, b[:offs[14]]...)
	cut = append(cut, 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(cut[offs[13]+4:], 20)
	cut = append(cut, b[offs[14]:]...)
	_, _, err = decodeAll(cut)
	if err == nil || !strings.Contains(err.Error(), "pc_samples") {
		t.Fatalf("cut pc_samples field: %v", err)
	}
}

func TestExtensionsSkipped(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	fs := everyFrame()
	w.Write(fs[0])
	w.WriteRaw(FirstExtension+5, []byte("whatever"))
	w.Write(fs[len(fs)-1])
	d := NewDecoder(&buf)
	var kinds []Kind
	for {
		f, err := d.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, f.Kind())
	}
	if !reflect.DeepEqual(kinds, []Kind{KindHello, KindEnd}) || d.Skipped() != 1 {
		t.Fatalf("kinds %v skipped %d", kinds, d.Skipped())
	}
}

func TestFrameAfterEnd(t *testing.T) {
	b := encode(t, everyFrame())
	b = append(b, b[:40]...)
	_, _, err := decodeAll(b)
	if err == nil || !strings.Contains(err.Error(), "after END") {
		t.Fatalf("error %v", err)
	}
}

// A frame that claims 64 MiB but is cut short must not allocate it all.
func TestHugeClaimTruncatedCheap(t *testing.T) {
	b := encode(t, everyFrame()[:1])
	b = binary.LittleEndian.AppendUint32(b, uint32(KindAccess))
	b = binary.LittleEndian.AppendUint32(b, MaxPayload)
	b = append(b, 1, 2, 3)
	allocs := testing.AllocsPerRun(1, func() { decodeAll(b) })
	_ = allocs
	_, _, err := decodeAll(b)
	var e *Error
	if !errors.As(err, &e) || !e.Truncated || e.Kind != KindAccess {
		t.Fatalf("error %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	good := encode(f, everyFrame())
	f.Add(good)
	// Compact records (affine addresses, uniform values, both).
	acc := &Access{LaunchID: 7}
	for _, r := range []Record{
		{PC: 1, Space: SpaceGlobal, Flags: FlagRead, Active: 0xf, Size: 4, Lanes: laneBytes([]uint64{0x100, 0x104, 0x108, 0x10c}, 4, false)},
		{PC: 2, Space: SpaceGlobal, Flags: FlagWrite, Active: 0x5, Size: 8, Lanes: laneBytes([]uint64{0x900, 0x100}, 8, true)},
		{PC: 3, Space: SpaceShared, Flags: FlagRead, Active: 0x3, Size: 2, Lanes: laneBytes([]uint64{0x40, 0x42}, 2, true)},
	} {
		acc.AppendCompact(&r)
	}
	f.Add(encode(f, []Frame{everyFrame()[0], acc, &End{}}))
	f.Add(good[:len(good)/2])
	f.Add(good[:100])
	f.Add(chunkedStream(f, 10, []int{4, 4, 2}, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(bytes.NewReader(b))
		var frames []Frame
		for {
			fr, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("error of type %T: %v", err, err)
				}
				if e.Offset < 0 || e.Offset > int64(len(b)) {
					t.Fatalf("offset %d outside the %d-byte stream", e.Offset, len(b))
				}
				break
			}
			frames = append(frames, fr)
			if a, ok := fr.(*Access); ok {
				it := a.Records()
				n := 0
				for it.Next() {
					r := it.Record()
					for i := 0; i < r.NumLanes(); i++ {
						r.Lane(i)
					}
					n++
				}
				if it.Err() != nil || n != int(a.Count) {
					t.Fatalf("validated access frame fails to iterate: %v (%d of %d)", it.Err(), n, a.Count)
				}
			}
		}
		// What decoded re-encodes to the same bytes (End's count is recomputed).
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, fr := range frames {
			if err := w.Write(fr); err != nil {
				t.Fatal(err)
			}
		}
		again, _, _ := decodeAll(buf.Bytes())
		if len(again) != len(frames) {
			t.Fatalf("re-encoded %d frames decode to %d", len(frames), len(again))
		}
	})
}

// laneBytes returns plain lane entries for addrs with values of size bytes:
// all equal when uniform, else each lane's index.
func laneBytes(addrs []uint64, size int, uniform bool) []byte {
	var b []byte
	for i, a := range addrs {
		b = binary.LittleEndian.AppendUint64(b, a)
		for j := 0; j < size; j++ {
			v := byte(7)
			if !uniform {
				v = byte(i + j)
			}
			b = append(b, v)
		}
	}
	return b
}
