package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"gpuprof/profile"
	"gpuprof/sass"
)

// ModulesDir holds the cubins of a job's GPU modules in its output
// directory, by content hash, so the analysis can run again offline.
const ModulesDir = "modules"

// modules gives the analysis the parsed SASS of a profile's GPU modules:
// disassembling the saved cubin with nvdisasm where the CUDA toolkit is,
// else the committed nvdisasm output whose functions cover the module's.
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

// disassemble runs nvdisasm on a cubin (the CUDA toolkit must be on PATH).
func disassemble(cubin []byte) (*sass.Module, error) {
	nv, err := exec.LookPath("nvdisasm")
	if err != nil {
		return nil, fmt.Errorf("nvdisasm not on PATH: %w", err)
	}
	f, err := os.CreateTemp("", "gpuprof-*.cubin")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	f.Write(cubin)
	f.Close()
	var out, errb bytes.Buffer
	cmd := exec.Command(nv, "-c", "-g", "-gi", "-poff", "-hex", f.Name()) // -hex: control bits for the blamer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("nvdisasm: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	return sass.Parse(out.Bytes())
}
