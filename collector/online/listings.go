package online

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"gpuprof/profile"
	"gpuprof/sass"
)

// EncodeEntry is a function's listing as the disk cache and the broker
// keep it: which tool made it and for which function, and the text,
// compressed.
func EncodeEntry(tool, fn string, listing []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(cacheMagic) + len(tool) + len(fn) + 20 + len(listing))
	fmt.Fprintf(&b, "%stool %s\nfunction %s\n\n", cacheMagic, strings.ReplaceAll(tool, "\n", " "), strings.ReplaceAll(fn, "\n", " "))
	b.Write(listing)
	return sass.EncodeListing(b.Bytes())
}

// DecodeEntry reverses EncodeEntry.
func DecodeEntry(b []byte) (tool, fn string, listing []byte, err error) {
	text, err := sass.DecodeListing(b)
	if err != nil {
		return "", "", nil, err
	}
	tool, fn, listing, ok := splitEntry(text)
	if !ok {
		return "", "", nil, fmt.Errorf("nvdisasm listing: no gpuprof entry header")
	}
	return tool, fn, listing, nil
}

// sassStructure adapts a parsed sass.Module to Structure.
type listingFiles struct {
	mu     sync.Mutex
	hashed map[profile.ModuleHash]*parsedFile
	named  []*parsedFile
}

type parsedFile struct {
	paths []string // several: the pieces of one module's listing
	once  sync.Once
	text  []byte
	mod   *sass.Module
	err   error
}

func (pf *parsedFile) get() *sass.Module {
	pf.once.Do(func() {
		var texts [][]byte
		for _, p := range pf.paths {
			b, err := ReadListingFile(p)
			if err != nil {
				pf.err = err
				return
			}
			texts = append(texts, b)
		}
		pf.text = texts[0]
		if len(texts) > 1 {
			pf.text = sass.JoinListings(texts...)
		}
		pf.mod, pf.err = sass.Parse(pf.text)
	})
	return pf.mod
}

// ReadListingFile reads a listing file, decompressing *.zst files.
func ReadListingFile(p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasSuffix(p, ".zst") {
		return b, err
	}
	return sass.DecodeListing(b)
}

// ListingHash reads the module hash from a listing file named
// HASH.sass.txt, HASH.hex.txt or HASH.sass.zst (16 hex digits).
func ListingHash(path string) (profile.ModuleHash, bool) {
	base := filepath.Base(path)
	for _, suf := range []string{".sass.txt", ".hex.txt", ".sass.zst"} {
		if h, ok := strings.CutSuffix(base, suf); ok && len(h) == 16 {
			var v uint64
			if _, err := fmt.Sscanf(h, "%016x", &v); err == nil && fmt.Sprintf("%016x", v) == h {
				return profile.ModuleHash(v), true
			}
		}
	}
	return 0, false
}

func (s *SASS) listings() *listingFiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files != nil {
		return s.files
	}
	lf := &listingFiles{hashed: map[profile.ModuleHash]*parsedFile{}}
	var paths []string
	for _, f := range s.Files {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			paths = append(paths, f)
			continue
		}
		filepath.WalkDir(f, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".sass.txt") || strings.HasSuffix(p, ".sass.zst") || strings.HasSuffix(p, ".hex.txt")) {
				paths = append(paths, p)
			}
			return nil
		})
	}
	sort.Strings(paths)
	for _, p := range paths {
		if h, ok := ListingHash(p); ok {
			pf := lf.hashed[h]
			if pf == nil {
				pf = &parsedFile{}
				lf.hashed[h] = pf
			}
			pf.paths = append(pf.paths, p)
			continue
		}
		lf.named = append(lf.named, &parsedFile{paths: []string{p}})
	}
	s.files = lf
	return lf
}

func (lf *listingFiles) byHash(h profile.ModuleHash) *parsedFile {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.hashed[h]
}

// byName returns a legacy listing that holds fn: preferably one that holds
// every function of the module known so far, then one with encodings
// (*.hex.txt: the stall blamer needs the control bits), then one for the
// module's architecture.
func (lf *listingFiles) byName(fn string, functions []string, sm uint16) *parsedFile {
	arch := fmt.Sprintf("sm_%d", sm)
	var best *parsedFile
	bestScore := -1
	for _, pf := range lf.named {
		m := pf.get()
		if m == nil || m.Func(fn) == nil {
			continue
		}
		score := 0
		if coversAll(m, functions) {
			score += 4
		}
		if strings.HasSuffix(pf.paths[0], ".hex.txt") {
			score += 2
		}
		if m.Arch == arch {
			score++
		}
		if score > bestScore {
			best, bestScore = pf, score
		}
	}
	return best
}

func coversAll(m *sass.Module, functions []string) bool {
	for _, f := range functions {
		if m.Func(f) == nil {
			return false
		}
	}
	return true
}

// modWork is the nvdisasm work on one module: the functions waiting, the
// cubin's symbols and its file for nvdisasm.
