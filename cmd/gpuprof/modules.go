package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"gpuprof/broker"
	"gpuprof/collector/analyze"
	"gpuprof/profile"
	"gpuprof/sass"
)

// ModulesDir holds the cubins of a job's GPU modules in its output
// directory, by content hash, and the nvdisasm listings the collectors
// shared (HASH.sass.zst), so the analysis can run again offline.
const ModulesDir = "modules"

// listingFile is the saved listing of module h (analyze.EncodeListing's
// bytes, a zstd frame).
func listingFile(dir string, h profile.ModuleHash) string {
	return filepath.Join(dir, ModulesDir, h.String()+".sass.zst")
}

// saveListing copies module h's listing, if a collector shared one, from
// the broker into the output directory: the root then parses it instead of
// running nvdisasm again (and report works offline without the toolkit).
func saveListing(ctx context.Context, conn *broker.Conn, job, out string, h profile.ModuleHash) {
	b, err := conn.GetModule(ctx, job, h, broker.ModuleSASS)
	if err != nil {
		return
	}
	os.MkdirAll(filepath.Join(out, ModulesDir), 0o700)
	os.WriteFile(listingFile(out, h), b, 0o600)
}

// modules gives the analysis the parsed SASS of a profile's GPU modules:
// the listing a collector shared (saved in the output directory), else the
// saved cubin disassembled with nvdisasm where the CUDA toolkit is, else
// the committed nvdisasm output whose functions cover the module's.
type modules struct {
	dir   string
	files []string
	p     *profile.Profile

	once   sync.Once
	parsed []*sass.Module // of files
	mu     sync.Mutex
	cache  map[profile.ModuleHash]*sass.Module
}

func moduleSource(dir, sassFiles string, p *profile.Profile) (*modules, error) {
	m := &modules{dir: dir, p: p, cache: map[profile.ModuleHash]*sass.Module{}}
	for _, f := range strings.Split(sassFiles, ",") {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			m.files = append(m.files, f)
			continue
		}
		filepath.Walk(f, func(path string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && (strings.HasSuffix(path, ".sass.txt") || strings.HasSuffix(path, ".hex.txt")) {
				m.files = append(m.files, path)
			}
			return nil
		})
		// Listings with encodings first: they carry the control bits.
		sort.SliceStable(m.files, func(i, j int) bool {
			return strings.HasSuffix(m.files[i], ".hex.txt") && !strings.HasSuffix(m.files[j], ".hex.txt")
		})
	}
	return m, nil
}

// Module implements analysis.ModuleSource.
func (m *modules) Module(h profile.ModuleHash) (*sass.Module, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mod, ok := m.cache[h]; ok {
		return mod, nil
	}
	mod, err := m.load(h)
	m.cache[h] = mod
	return mod, err
}

func (m *modules) load(h profile.ModuleHash) (*sass.Module, error) {
	if enc, err := os.ReadFile(listingFile(m.dir, h)); err == nil {
		text, err := analyze.DecodeListing(enc)
		if err == nil {
			var mod *sass.Module
			if mod, err = sass.Parse(text); err == nil {
				return mod, nil
			}
		}
		slog.Warn("saved listing unusable, trying the cubin", "file", listingFile(m.dir, h), "err", err)
	}
	if cubin, err := os.ReadFile(filepath.Join(m.dir, ModulesDir, h.String()+".cubin")); err == nil {
		if mod, err := disassemble(cubin); err == nil {
			return mod, nil
		}
	}
	var want []string
	for _, f := range m.p.Funcs {
		if f.Module == h {
			want = append(want, f.Name)
		}
	}
	m.once.Do(func() {
		for _, f := range m.files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if mod, err := sass.Parse(b); err == nil {
				m.parsed = append(m.parsed, mod)
			}
		}
	})
	for _, mod := range m.parsed {
		ok := len(want) > 0
		for _, name := range want {
			if mod.Func(name) == nil {
				ok = false
				break
			}
		}
		if ok {
			return mod, nil
		}
	}
	return nil, fmt.Errorf("module %v: no cubin with nvdisasm, and no nvdisasm output covers its %d functions", h, len(want))
}

// disassemble runs nvdisasm on a cubin (the CUDA toolkit must be on PATH)
// with the collectors' options, so listings are alike wherever made.
func disassemble(cubin []byte) (*sass.Module, error) {
	nv, err := exec.LookPath("nvdisasm")
	if err != nil {
		return nil, fmt.Errorf("nvdisasm not on PATH: %w", err)
	}
	text, err := analyze.RunNVDisasm(nv, cubin, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	return sass.Parse(text)
}
