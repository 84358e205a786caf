package analysis

import "testing"

// sharedListing is a Kogge-Stone step (a thread's own slot stored, a
// barrier, its neighbour's slot loaded, a barrier, its own slot reloaded,
// summed and stored), runs of adjacent shared loads, and a reload after a
// store through another base. Offsets: 0x00 S2R, 0x10 SHF, 0x20 STS own,
// 0x30 BAR, 0x40 LDS neighbour, 0x50 BAR, 0x60 LDS own (reload), 0x70
// FADD, 0x80 STS own, 0x90-0xc0 four adjacent 32-bit LDS, 0xd0-0xe0 two
// adjacent 64-bit LDS, 0xf0-0x110 three adjacent 32-bit LDS, 0x120 STS
// through R20, 0x130 LDS own again, 0x140 EXIT.
const sharedListing = `
	#line 3
	S2R R0, SR_TID.X {W0 S1}
	SHF.L.U32 R3, R0, 0x2, RZ {B0 S1}
	STS [R3+0x400], R2 {S1}
	BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
	LDS R4, [R3+0x3fc] {W1 S1}
	BAR.SYNC.DEFER_BLOCKING 0x0 {S1}
	LDS R5, [R3+0x400] {W2 S1}
	FADD R5, R4, R5 {B12 S4}
	STS [R3+0x400], R5 {S1}
	LDS R6, [R3+0x100] {S1}
	LDS R7, [R3+0x104] {S1}
	LDS R8, [R3+0x108] {S1}
	LDS R9, [R3+0x10c] {S1}
	LDS.64 R10, [R3+0x200] {S1}
	LDS.64 R12, [R3+0x208] {S1}
	LDS R14, [R3+0x300] {S1}
	LDS R15, [R3+0x304] {S1}
	LDS R16, [R3+0x308] {S1}
	STS [R20], R2 {S1}
	LDS R17, [R3+0x400] {S1}
	EXIT
`

// The share of each shared access that the advice's changes remove (item
// 42), by hand: the neighbour's load has no neighbour of its own in its
// barrier interval (0); the reload of the thread's own store goes whole
// (1); four adjacent 32-bit loads become one 128-bit load (1 - 32/128);
// two adjacent 64-bit loads one 128-bit load (1 - 64/128); three adjacent
// 32-bit loads a 64-bit load at best (1 - 32/64); the stores have no
// neighbours (0); a reload after a store through another base may read
// what that store wrote (0).
func TestSharedRemovable(t *testing.T) {
	m := parseSASS(t, "k", sharedListing)
	f := m.Func("k")
	share := codeOf(m, f).sharedRemovable()
	want := map[uint64]float64{
		0x20: 0, 0x40: 0, 0x60: 1, 0x80: 0,
		0x90: 0.75, 0xa0: 0.75, 0xb0: 0.75, 0xc0: 0.75,
		0xd0: 0.5, 0xe0: 0.5,
		0xf0: 0.5, 0x100: 0.5, 0x110: 0.5,
		0x120: 0, 0x130: 0,
	}
	for i, in := range f.Insts {
		w, ok := want[in.Offset]
		if !ok {
			if share[i] != 0 {
				t.Errorf("%#x %s: share %v, want 0 (not a shared access)", in.Offset, in.Opcode, share[i])
			}
			continue
		}
		if !approx(share[i], w) {
			t.Errorf("%#x %s: share %v, want %v", in.Offset, in.Opcode, share[i], w)
		}
	}
}

// Shared memory transaction reduction over sharedListing's kernel, MIO
// throttle samples only (no waits blamed through registers): 40 at the
// neighbour's load (share 0), 40 at the reload (1), 40 at the first of
// the four adjacent loads (0.75) and 40 at the last of the three (0.5),
// with 240 selected samples spread over the code: T = 400, M = 0 + 40 +
// 30 + 20 = 90, eq. 3: 400/310. Item 34 priced every 32-bit access at
// 0.75: M would have been 120.
func TestSharedTransactionsNeedAChange(t *testing.T) {
	m := parseSASS(t, "k", sharedListing)
	s := sampledKernel(t, m, "k", mod1)
	for _, off := range []uint64{0x40, 0x60, 0x90, 0x110} {
		s.stall(off, "mio_throttle", 40)
	}
	for _, off := range []uint64{0x00, 0x10, 0x70, 0xd0, 0xe0, 0x120} {
		s.stall(off, "selected", 40)
	}
	s.launches(1, 128, 1, 16)
	a := findKind(t, s.advise(t, m, Options{}), OptSharedTransactions)
	if want := 400.0 / 310; !approx(a.Speedup, want) {
		t.Errorf("shared memory transaction reduction %v, want %v; %s", a.Speedup, want, a.Evidence)
	}
}
