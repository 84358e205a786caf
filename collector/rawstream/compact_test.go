package rawstream

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// randomRecord returns a record with active lanes whose addresses are
// affine or not and whose values are uniform or not, as the flags say.
func randomRecord(rng *rand.Rand, affine, uniform bool) Record {
	sizes := []uint8{1, 2, 4, 8, 16}
	r := Record{PC: rng.Uint64(), Block: rng.Uint32(), Warp: uint16(rng.IntN(32)), Space: SpaceGlobal, Flags: FlagRead,
		Active: rng.Uint32() | 1<<rng.IntN(32), Size: sizes[rng.IntN(len(sizes))]}
	base := rng.Uint64()
	step := uint64(int64(rng.IntN(65)) - 32) // negative strides too
	v0 := make([]byte, r.Size)
	for i := range v0 {
		v0[i] = byte(rng.Uint32())
	}
	for m := r.Active; m != 0; m &= m - 1 {
		lane := uint64(bitsTrailing(m))
		addr := base + step*lane
		if !affine {
			addr = rng.Uint64()
		}
		r.Lanes = binary.LittleEndian.AppendUint64(r.Lanes, addr)
		if uniform {
			r.Lanes = append(r.Lanes, v0...)
		} else {
			for i := 0; i < int(r.Size); i++ {
				r.Lanes = append(r.Lanes, byte(rng.Uint32()))
			}
		}
	}
	return r
}

func bitsTrailing(m uint32) int {
	n := 0
	for m&1 == 0 {
		m >>= 1
		n++
	}
	return n
}

// TestCompactRoundTrip: every compact encoding decodes to the plain lanes
// it was made from, through the iterator, ParseRecord and the decoder, and
// the encoding chosen is the most compact that holds them.
func TestCompactRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	plain, compact := &Access{LaunchID: 1}, &Access{LaunchID: 1}
	var want []Record
	for i := 0; i < 2000; i++ {
		affine, uniform := rng.IntN(2) == 0, rng.IntN(2) == 0
		r := randomRecord(rng, affine, uniform)
		if i%7 == 0 {
			r = Record{PC: 1, Block: 2, Space: SpaceNone, Flags: FlagBlockExit, Active: 0xffffffff}
		}
		want = append(want, r)
		plain.Append(&r)
		compact.AppendCompact(&r)
		// Which encoding came out: a random address set is affine only by
		// chance with one active lane (or two, whose stride always fits).
		var got Record
		if _, err := ParseRecord(compact.Data[lastRecordStart(t, compact):], &got); err != nil {
			t.Fatal(err)
		}
		na := r.NumLanes()
		if r.Size > 0 {
			if affine && got.Enc&EncAffine == 0 {
				t.Fatalf("record %d: affine addresses not encoded affine", i)
			}
			if uniform && got.Enc&EncUniform == 0 {
				t.Fatalf("record %d: uniform values not encoded uniform", i)
			}
			if !affine && na > 2 && got.Enc&EncAffine != 0 {
				t.Fatalf("record %d: random addresses encoded affine", i)
			}
		}
	}
	if len(compact.Data) >= len(plain.Data) {
		t.Errorf("compact frame %d bytes, plain %d", len(compact.Data), len(plain.Data))
	}
	it := compact.Records()
	for i := 0; it.Next(); i++ {
		r := it.Record()
		if !bytes.Equal(r.Lanes, want[i].Lanes) || r.Active != want[i].Active || r.Size != want[i].Size || r.PC != want[i].PC {
			t.Fatalf("record %d: lanes %x, want %x", i, r.Lanes, want[i].Lanes)
		}
	}
	if it.Err() != nil || it.Index() != len(want)-1 {
		t.Fatalf("iteration stopped at %d: %v", it.Index(), it.Err())
	}
	// The header pass checks the same records without expanding them.
	hs := compact.RecordHeaders()
	for hs.Next() {
		if r := hs.Record(); r.Enc != 0 && r.Lanes != nil {
			t.Fatal("RecordHeaders expanded a compact record")
		}
	}
	if hs.Err() != nil || hs.Index() != len(want)-1 {
		t.Fatalf("header iteration stopped at %d: %v", hs.Index(), hs.Err())
	}
	// Through the decoder, as a stream.
	frames, _, err := decodeAll(encode(t, []Frame{everyFrame()[0], compact, &End{}}))
	if err != nil || len(frames) != 3 || !bytes.Equal(frames[1].(*Access).Data, compact.Data) {
		t.Fatalf("decoding the compact frame: %v", err)
	}
}

// lastRecordStart is the offset of a's last record.
func lastRecordStart(t *testing.T, a *Access) int {
	t.Helper()
	it := a.RecordHeaders()
	last := 0
	for {
		off := it.Offset()
		if !it.Next() {
			break
		}
		last = off
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	return last
}

// TestCompactErrors: bad encodings are errors naming the field and offset.
func TestCompactErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := randomRecord(rng, true, true)
	a := &Access{LaunchID: 1}
	a.AppendCompact(&r)
	good := append([]byte(nil), a.Data...)

	cases := []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"unknown bit", func(b []byte) []byte { b[21] |= 0x4; return b }, "encoding"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "lanes"},
		{"block event", func(b []byte) []byte {
			e := &Access{}
			e.AppendRecord(1, 2, 3, SpaceNone, FlagBlockEnter, 1, 0)
			e.Data[21] = EncAffine
			return e.Data
		}, "encoding"},
	}
	for _, c := range cases {
		b := c.edit(append([]byte(nil), good...))
		var got Record
		_, err := ParseRecord(b, &got)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
		// The decoder names the frame's offset and the record's field.
		stream := encode(t, []Frame{everyFrame()[0], &Access{LaunchID: 1, Count: 1, Data: b}})
		if _, _, err := decodeAll(stream); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: decoder error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// compactStream re-encodes every Access frame of a stream compactly.
func compactStream(t testing.TB, data []byte) (plain, compact []byte, records int) {
	frames, _, err := decodeAll(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if a, ok := f.(*Access); ok {
			records += int(a.Count)
		}
	}
	if compact, err = CompactStream(data); err != nil {
		t.Fatal(err)
	}
	return encode(t, frames), compact, records
}

// TestCompactCaptures: the real H100 captures, re-encoded as the library
// now writes them, decode to the same frames (as many, of the same kinds,
// the non-access ones byte for byte) and the same records (every header
// field and lane), no record more or less, and say how much smaller the
// stream is.
func TestCompactCaptures(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/captures/*.redundancy.*.gpr")
	if len(files) == 0 {
		t.Fatal("no value-tracing captures under testdata/captures")
	}
	var tp, tc int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		plain, compact, n := compactStream(t, data)
		pf, _, err := decodeAll(plain)
		if err != nil {
			t.Fatalf("%s: the plain re-encoding: %v", f, err)
		}
		cf, _, err := decodeAll(compact)
		if err != nil {
			t.Fatalf("%s: the compact encoding: %v", f, err)
		}
		if len(pf) != len(cf) {
			t.Fatalf("%s: %d frames plain, %d compact", f, len(pf), len(cf))
		}
		records, compacted, already := 0, 0, 0
		for i := range pf {
			if pf[i].Kind() != cf[i].Kind() {
				t.Fatalf("%s: frame %d is %v plain, %v compact", f, i, pf[i].Kind(), cf[i].Kind())
			}
			pa, ok := pf[i].(*Access)
			if !ok {
				if !bytes.Equal(encode(t, []Frame{pf[i]}), encode(t, []Frame{cf[i]})) {
					t.Fatalf("%s: frame %d (%v) differs", f, i, pf[i].Kind())
				}
				continue
			}
			ca := cf[i].(*Access)
			if pa.LaunchID != ca.LaunchID || pa.Count != ca.Count {
				t.Fatalf("%s: frame %d: launch %d, %d records plain; launch %d, %d compact", f, i, pa.LaunchID, pa.Count, ca.LaunchID, ca.Count)
			}
			pi, ci := pa.Records(), ca.Records()
			for pi.Next() {
				if !ci.Next() {
					t.Fatalf("%s: frame %d: the compact frame ends at record %d: %v", f, i, pi.Index(), ci.Err())
				}
				p, c := pi.Record(), ci.Record()
				if p.PC != c.PC || p.Block != c.Block || p.Warp != c.Warp || p.Space != c.Space || p.Flags != c.Flags ||
					p.Active != c.Active || p.Size != c.Size || !bytes.Equal(p.Lanes, c.Lanes) {
					t.Fatalf("%s: frame %d record %d differs", f, i, pi.Index())
				}
				if c.Enc != 0 {
					compacted++
				}
				if p.Enc != 0 {
					already++ // written compact by the library (wire version 2 and later)
				}
				records++
			}
			if ci.Next() || pi.Err() != nil || ci.Err() != nil {
				t.Fatalf("%s: frame %d: after %d records, compact has more: %v; errors %v, %v", f, i, pi.Index()+1, ci.Next(), pi.Err(), ci.Err())
			}
		}
		if records != n || n == 0 {
			t.Fatalf("%s: %d records compared, the stream has %d", f, records, n)
		}
		// A capture the library already wrote compact cannot shrink; one
		// written plain must.
		if compacted == 0 || len(compact) > len(plain) || already == 0 && len(compact) == len(plain) {
			t.Errorf("%s: %d of %d records compacted (%d already), %d -> %d bytes", f, compacted, records, already, len(plain), len(compact))
		}
		tp += len(plain)
		tc += len(compact)
		t.Logf("%-45s %8d records: %9d -> %9d bytes (%.2fx)", filepath.Base(f), n, len(plain), len(compact), float64(len(plain))/float64(len(compact)))
	}
	t.Logf("all captures: %d -> %d bytes (%.2fx)", tp, tc, float64(tp)/float64(tc))
}

// TestAppendAddrs: the addresses read from a record's wire lanes, compact
// or plain, are those of its expanded lanes, as are the lanes read from
// its wire form and those Expand makes.
func TestAppendAddrs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		r := randomRecord(rng, rng.IntN(2) == 0, rng.IntN(2) == 0)
		for _, compact := range []bool{false, true} {
			a := &Access{LaunchID: 1}
			if compact {
				a.AppendCompact(&r)
			} else {
				a.Append(&r)
			}
			var full, head Record
			if _, err := ParseRecord(a.Data, &full); err != nil {
				t.Fatal(err)
			}
			if _, err := ParseRecordHeader(a.Data, &head); err != nil {
				t.Fatal(err)
			}
			var want []uint64
			for e := 0; e < full.NumLanes(); e++ {
				addr, _ := full.Lane(e)
				want = append(want, addr)
			}
			if got := head.AppendAddrs(nil); !slices.Equal(got, want) {
				t.Fatalf("record %d (compact %v, encoding %d): addresses %x, want %x", i, compact, head.Enc, got, want)
			}
			if got := full.AppendAddrs(nil); !slices.Equal(got, want) {
				t.Fatalf("record %d (compact %v): expanded record's addresses %x, want %x", i, compact, got, want)
			}
			// The wire form read in place gives the same lanes.
			if w, ok := head.Wire(); ok != (head.Enc != 0) {
				t.Fatalf("record %d: Wire ok %v for encoding %d", i, ok, head.Enc)
			} else if ok {
				var lanes []byte
				e := 0
				for m := head.Active; m != 0; m &= m - 1 {
					addr := w.Base + w.Step*uint64(bitsTrailing(m))
					if !w.Affine {
						addr = binary.LittleEndian.Uint64(w.Addrs[8*e:])
					}
					lanes = binary.LittleEndian.AppendUint64(lanes, addr)
					if w.Uniform {
						lanes = append(lanes, w.Vals[:head.Size]...)
					} else {
						lanes = append(lanes, w.Vals[e*int(head.Size):(e+1)*int(head.Size)]...)
					}
					e++
				}
				if !bytes.Equal(lanes, full.Lanes) {
					t.Fatalf("record %d: lanes from the wire form %x, want %x", i, lanes, full.Lanes)
				}
			}
			head.Expand()
			if !bytes.Equal(head.Lanes, full.Lanes) {
				t.Fatalf("record %d (compact %v): Expand gave %x, want %x", i, compact, head.Lanes, full.Lanes)
			}
		}
	}
}

// FuzzParseRecord: any bytes either fail to parse, with ParseRecord and
// ParseRecordHeader alike, or give one record whose addresses, wire form
// and expansion read from the header-only parse agree with the full one.
func FuzzParseRecord(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 8; i++ {
		r := randomRecord(rng, i%2 == 0, i%4 < 2)
		a := &Access{LaunchID: 1}
		if i%3 == 0 {
			a.Append(&r)
		} else {
			a.AppendCompact(&r)
		}
		f.Add(a.Data)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var full, head Record
		n, err := ParseRecord(b, &full)
		nh, errh := ParseRecordHeader(b, &head)
		if (err == nil) != (errh == nil) || n != nh {
			t.Fatalf("ParseRecord: %d, %v; ParseRecordHeader: %d, %v", n, err, nh, errh)
		}
		if err != nil {
			return
		}
		var want []uint64
		for e := 0; e < full.NumLanes(); e++ {
			addr, _ := full.Lane(e)
			want = append(want, addr)
		}
		if got := head.AppendAddrs(nil); !slices.Equal(got, want) {
			t.Fatalf("addresses %x, want %x", got, want)
		}
		if w, ok := head.Wire(); ok {
			if w.Affine && len(w.Addrs) != 0 || !w.Affine && len(w.Addrs) != 8*head.NumLanes() {
				t.Fatalf("wire form of encoding %d: %d address bytes for %d lanes", head.Enc, len(w.Addrs), head.NumLanes())
			}
		}
		head.Expand()
		if !bytes.Equal(head.Lanes, full.Lanes) {
			t.Fatalf("Expand gave %x, want %x", head.Lanes, full.Lanes)
		}
	})
}
