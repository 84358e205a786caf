package online

import (
	"sync/atomic"
	"testing"
)

// A new warp's temporal table starts at the size its calling context's
// last freed warp needed, in any shard, and that size follows the
// entries the warps held, not the tables they were given: a pointer
// chase's warps start large, and a small warp after them hands a small
// size on.
func TestWarpTableFollowsItsContext(t *testing.T) {
	hint := new(atomic.Int32)
	l := &launchInfo{seq: 1, tslots: hint}
	a, b := newShard(0, nil), newShard(1, nil)
	// A warp of 3,000 entries (lane 0, one address each), freed in shard a.
	big := a.warp(warpKey{1, 0, 0}, l)
	for i := uint64(0); i < 3000; i++ {
		big.slot(0x1000+4*i, tagOf(0, kLoad)).used = true
	}
	a.free(warpKey{1, 0, 0}, big, l)
	if got := hint.Load(); got != 8192 {
		t.Fatalf("hint after a warp of 3,000 entries: %d slots, want 8192", got)
	}
	// The next warp of the context, in shard b: that size from the start.
	next := b.warp(warpKey{1, 1, 0}, l)
	if len(next.t) != 8192 {
		t.Fatalf("a new warp of the context starts at %d slots, want 8192", len(next.t))
	}
	// It holds 10 entries: the hint falls back to what they need.
	for i := uint64(0); i < 10; i++ {
		next.slot(0x2000+4*i, tagOf(1, kLoad)).used = true
	}
	b.free(warpKey{1, 1, 0}, next, l)
	if got := hint.Load(); got != 64 {
		t.Errorf("hint after a warp of 10 entries in a table of 8192: %d slots, want 64", got)
	}
	// Another context's warp, in a shard with no table to reuse, starts
	// at the shard's small default.
	c := newShard(2, nil)
	c.tslots = 512
	other := c.warp(warpKey{2, 0, 0}, &launchInfo{seq: 2, tslots: new(atomic.Int32)})
	if len(other.t) != 512 {
		t.Errorf("a warp of a context without a hint starts at %d slots, want the shard's 512", len(other.t))
	}
}
