package online

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gpuprof/profile"
)

func TestDiskCacheRoundTrip(t *testing.T) {
	c := &DiskCache{Dir: t.TempDir(), Max: 1 << 20}
	h := profile.ModuleHash(0xabc)
	if _, ok := c.Get(h, "k", ""); ok {
		t.Fatal("hit in an empty cache")
	}
	listing := []byte("\t.target sm_90\n")
	if err := c.Put(h, "k", "tool-a", listing); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"tool-a", ""} {
		if got, ok := c.Get(h, "k", tool); !ok || !bytes.Equal(got, listing) {
			t.Errorf("tool %q: %q %v", tool, got, ok)
		}
	}
	if _, ok := c.Get(h, "k", "tool-b"); ok {
		t.Error("a listing of another nvdisasm was used")
	}
	if _, ok := c.Get(h+1, "k", ""); ok {
		t.Error("hit for another module")
	}
	// A corrupt entry reads as a miss and goes.
	p := c.path(h, "k")
	if err := os.WriteFile(p, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(h, "k", ""); ok {
		t.Error("a corrupt entry was used")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Error("the corrupt entry is still there")
	}
	var nilCache *DiskCache
	if _, ok := nilCache.Get(h, "k", ""); ok || nilCache.Put(h, "k", "", listing) != nil {
		t.Error("a nil cache must do nothing")
	}
}

// Past its bound the cache drops its least recently used entries (Get
// counts as a use) down to three quarters of the bound.
func TestDiskCacheEviction(t *testing.T) {
	dir := t.TempDir()
	c := &DiskCache{Dir: dir, Max: 64 << 10}
	h := profile.ModuleHash(1)
	// Incompressible listings of about 4 KiB each.
	entry := func(i int) []byte {
		b := make([]byte, 4096)
		x := uint64(i)*0x9e3779b97f4a7c15 + 1
		for j := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[j] = byte(x)
		}
		return b
	}
	base := time.Now().Add(-time.Hour)
	for i := 0; i < 12; i++ {
		if err := c.Put(h, fmt.Sprint(i), "", entry(i)); err != nil {
			t.Fatal(err)
		}
		// Entries age one minute apart.
		ts := base.Add(time.Duration(i) * time.Minute)
		os.Chtimes(c.path(h, fmt.Sprint(i)), ts, ts)
	}
	if _, ok := c.Get(h, "0", ""); !ok { // entry 0 is used again: the newest
		t.Fatal("entry 0 missing before the bound")
	}
	for i := 12; i < 24; i++ {
		if err := c.Put(h, fmt.Sprint(i), "", entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Size(); n > c.Max {
		t.Fatalf("the cache holds %d bytes, over its bound %d", n, c.Max)
	}
	if _, ok := c.Get(h, "0", ""); !ok {
		t.Error("the recently used entry was evicted")
	}
	if _, ok := c.Get(h, "1", ""); ok {
		t.Error("the least recently used entry was kept")
	}
	if _, ok := c.Get(h, "23", ""); !ok {
		t.Error("the newest entry was evicted")
	}
	// A second cache on the same directory (another process) sees the
	// entries and the bound.
	c2 := &DiskCache{Dir: dir, Max: 64 << 10}
	if _, ok := c2.Get(h, "23", ""); !ok {
		t.Error("another process does not see the entries")
	}
}

// Writers of the same and of different entries at once, as the ranks of a
// node do: every reader sees a whole entry or none, never a torn one, and
// no temporary file is left.
func TestDiskCacheConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	h := profile.ModuleHash(2)
	listing := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("line %d of the listing\n", i)), 2000) }
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &DiskCache{Dir: dir, Max: 1 << 30} // a process of its own
			for i := 0; i < 20; i++ {
				k := fmt.Sprint(i % 5)
				if err := c.Put(h, k, "t", listing(i%5)); err != nil {
					errs <- err
					return
				}
				if got, ok := c.Get(h, fmt.Sprint((i+w)%5), "t"); ok && !bytes.Equal(got, listing((i+w)%5)) {
					errs <- fmt.Errorf("a torn or wrong entry: %d bytes", len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", ".tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	c := &DiskCache{Dir: dir}
	for i := 0; i < 5; i++ {
		if got, ok := c.Get(h, fmt.Sprint(i), "t"); !ok || !bytes.Equal(got, listing(i)) {
			t.Errorf("entry %d after the writers: %v", i, ok)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"512": 512, "4K": 4096, "2M": 2 << 20, "3g": 3 << 30} {
		if v, err := ParseBytes(s); err != nil || v != want {
			t.Errorf("%q: %d %v", s, v, err)
		}
	}
	for _, s := range []string{"", "x", "-1", "1T"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// FuzzDecodeEntry: cache entries and shared listings come from disk and
// the broker; anything decodes to an error or an entry, never a panic,
// and what EncodeEntry writes decodes to itself.
func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte{}, "tool", "fn", []byte("\t.target sm_90\n"))
	f.Add(EncodeEntry("t", "_Z1kv", []byte("listing")), "", "k", []byte{})
	f.Fuzz(func(t *testing.T, raw []byte, tool, fn string, listing []byte) {
		DecodeEntry(raw)
		if fn == "" || strings.ContainsAny(fn+tool, "\n") {
			return
		}
		gt, gf, gl, err := DecodeEntry(EncodeEntry(tool, fn, listing))
		if err != nil || gt != tool || gf != fn || !bytes.Equal(gl, listing) {
			t.Fatalf("round trip: %q %q %q %v", gt, gf, gl, err)
		}
	})
}
