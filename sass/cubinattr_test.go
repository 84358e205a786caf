package sass

import (
	"errors"
	"strings"
	"testing"
)

// The attributes of real sm_90 cubins against what ptxas was told and
// reported for them (testdata/cuda/spill.cu, bank_conflict.cu).
func TestCubinAttrs(t *testing.T) {
	for _, tc := range []struct {
		cubin, fn string
		want      FuncAttr
	}{
		// __launch_bounds__(256, 8): at most 65536/(256*8) = 32 registers,
		// 40 accumulators spill to an 80-byte frame.
		{"spill/spill.cubin", "_Z20accumulators_spilledPKfPfii", FuncAttr{Regs: 32, MaxRegs: 32, FrameSize: 80, MaxThreads: [3]int{256, 1, 1}}},
		// __launch_bounds__(256, 2): up to 128 registers, no spills.
		{"spill/spill.cubin", "_Z25accumulators_in_registersPKfPfii", FuncAttr{Regs: 50, MaxRegs: 128, MaxThreads: [3]int{256, 1, 1}}},
		// __shared__ float tile[32][32 + PAD] plus the reserved bytes.
		{"bank_conflict/bank_conflict.cubin", "_Z14transpose_tileILi0EEvPKfPfi", FuncAttr{SharedStatic: 0x1400}},
		{"bank_conflict/bank_conflict.cubin", "_Z14transpose_tileILi1EEvPKfPfi", FuncAttr{SharedStatic: 0x1480}},
	} {
		c, err := ParseCubin(readTD(t, tc.cubin))
		if err != nil {
			t.Fatal(err)
		}
		f := c.Func(tc.fn)
		if f == nil {
			t.Fatalf("%s: no %s", tc.cubin, tc.fn)
		}
		got := f.Attr
		if tc.want.Regs == 0 { // only the shared size is checked there
			got = FuncAttr{SharedStatic: got.SharedStatic}
			if f.Attr.Regs == 0 {
				t.Errorf("%s: no register count", tc.fn)
			}
		}
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.fn, got, tc.want)
		}
	}
}

// A truncated or malformed .nv.info record is a FormatError naming the
// section and the byte offset, never a panic or a silent misread.
func TestParseInfoErrors(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{[]byte{0x04, 0x2f, 0x08, 0x00, 1, 0, 0, 0}, "claims 8 bytes, 4 left"},
		{[]byte{0x03, 0x1b, 0x80}, "3 bytes left"},
		{[]byte{0x09, 0x1b, 0x80, 0x00}, "format 9"},
	} {
		_, err := parseInfo(".nv.info.f", 0x100, tc.b)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Offset < 0x100 || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ".nv.info.f") {
			t.Errorf("%x: %v, want a FormatError at 0x100+ with %q", tc.b, err, tc.want)
		}
	}
	recs, err := parseInfo(".nv.info", 0, []byte{0x03, 0x1b, 0x80, 0x00, 0x04, 0x2f, 0x08, 0x00, 14, 0, 0, 0, 32, 0, 0, 0})
	if err != nil || len(recs) != 2 || recs[0].attr != eiMaxRegCount || len(recs[1].val) != 8 {
		t.Fatalf("%+v %v", recs, err)
	}
}
