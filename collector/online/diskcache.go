package online

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"gpuprof/profile"
)

// DiskCache keeps the nvdisasm listings of GPU functions across runs, one
// file per (module content hash, function): a framework's modules are the
// same from one run to the next, and nvdisasm is the slow part of a first
// run. Entries are written to a temporary file and renamed into place, so
// the ranks of a node (processes of their own) share one cache: a reader
// sees a whole entry or none, and two writers of one entry write the same
// bytes. Its size is bounded: past Max, the least recently used entries
// (by modification time, which Get refreshes) go until three quarters of
// Max are left. Safe for concurrent use.
type DiskCache struct {
	Dir string
	Max int64

	mu      sync.Mutex
	scanned bool
	size    int64 // bytes held, as of the last scan plus what was put since
}

// DefaultCacheMax bounds the default cache (GPUPROF_CACHE_MAX overrides).
const DefaultCacheMax = 2 << 30

// DefaultDiskCache is the cache under the user's cache directory
// (os.UserCacheDir()/gpuprof/listings), or GPUPROF_CACHE_DIR; nil when
// GPUPROF_CACHE_DIR is "off" or no cache directory is known.
// GPUPROF_CACHE_MAX sets the bound in bytes (suffixes K, M, G).
func DefaultDiskCache() *DiskCache {
	dir := os.Getenv("GPUPROF_CACHE_DIR")
	if dir == "off" {
		return nil
	}
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil
		}
		dir = filepath.Join(base, "gpuprof", "listings")
	}
	max := int64(DefaultCacheMax)
	if v, err := ParseBytes(os.Getenv("GPUPROF_CACHE_MAX")); err == nil && v > 0 {
		max = v
	}
	return &DiskCache{Dir: dir, Max: max}
}

// ParseBytes reads a byte count such as 512M or 2G ("" is an error).
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mul := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mul = 1 << 10
		case 'm', 'M':
			mul = 1 << 20
		case 'g', 'G':
			mul = 1 << 30
		}
		if mul > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	return v * mul, nil
}

// entry header: magic line, then "tool T", "function F", a blank line and
// the listing, all zstd-compressed (sass.EncodeListing).
const cacheMagic = "gpuprof listing 1\n"

func (c *DiskCache) path(h profile.ModuleHash, fn string) string {
	return filepath.Join(c.Dir, h.String(), fmt.Sprintf("%016x.zst", xxhash.Sum64String(fn)))
}

// Get returns the cached listing of function fn of module h, made by tool
// (an identity of the nvdisasm that made it; "" accepts any). A corrupt
// entry is removed and reads as a miss.
func (c *DiskCache) Get(h profile.ModuleHash, fn, tool string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	p := c.path(h, fn)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	gotTool, gotFn, listing, err := DecodeEntry(b)
	if err != nil {
		os.Remove(p)
		return nil, false
	}
	if gotFn != fn || (tool != "" && gotTool != tool) {
		return nil, false
	}
	now := time.Now()
	os.Chtimes(p, now, now) // recently used
	return listing, true
}

func splitEntry(text []byte) (tool, fn string, listing []byte, ok bool) {
	rest, found := bytes.CutPrefix(text, []byte(cacheMagic))
	if !found {
		return "", "", nil, false
	}
	hdr, listing, found := bytes.Cut(rest, []byte("\n\n"))
	if !found {
		return "", "", nil, false
	}
	for _, l := range strings.Split(string(hdr), "\n") {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "tool":
			tool = v
		case "function":
			fn = v
		}
	}
	return tool, fn, listing, fn != ""
}

// Put stores listing as function fn of module h, made by tool.
func (c *DiskCache) Put(h profile.ModuleHash, fn, tool string, listing []byte) error {
	if c == nil {
		return nil
	}
	if strings.ContainsAny(fn, "\n") || strings.ContainsAny(tool, "\n") {
		return fmt.Errorf("listing cache: function or tool name with a line break")
	}
	data := EncodeEntry(tool, fn, listing)
	p := c.path(h, fn)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("listing cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("listing cache: %w", err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("listing cache: writing %s: %w", f.Name(), errors.Join(werr, cerr))
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("listing cache: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.scanned {
		c.size, c.scanned = c.scanLocked(nil), true
	} else {
		c.size += int64(len(data))
	}
	if c.Max > 0 && c.size > c.Max {
		c.evictLocked()
	}
	return nil
}

type cacheFile struct {
	path string
	size int64
	mod  time.Time
}

// scanLocked returns the bytes held, listing the entries into files when
// it is not nil. Temporary files of writers that died are removed after an
// hour.
func (c *DiskCache) scanLocked(files *[]cacheFile) int64 {
	var total int64
	old := time.Now().Add(-time.Hour)
	filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			if info.ModTime().Before(old) {
				os.Remove(p)
			}
			return nil
		}
		total += info.Size()
		if files != nil {
			*files = append(*files, cacheFile{p, info.Size(), info.ModTime()})
		}
		return nil
	})
	return total
}

// evictLocked removes the least recently used entries until three
// quarters of Max are left. Another process evicting at the same time
// removes some of the same files; that only frees a little more.
func (c *DiskCache) evictLocked() {
	var files []cacheFile
	c.size, c.scanned = c.scanLocked(&files), true
	if c.size <= c.Max {
		return
	}
	sort.Slice(files, func(i, j int) bool {
		if !files[i].mod.Equal(files[j].mod) {
			return files[i].mod.Before(files[j].mod)
		}
		return files[i].path < files[j].path
	})
	target := c.Max / 4 * 3
	for _, f := range files {
		if c.size <= target {
			break
		}
		if err := os.Remove(f.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			c.size -= f.size
			os.Remove(filepath.Dir(f.path)) // the module's directory, once empty
		}
	}
}

// Size returns the bytes the cache holds (scanning the directory).
func (c *DiskCache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size, c.scanned = c.scanLocked(nil), true
	return c.size
}
