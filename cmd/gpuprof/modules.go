package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"gpuprof/analysis"
	"gpuprof/broker"
	"gpuprof/collector/online"
	"gpuprof/profile"
	"gpuprof/sass"
)

// ModulesDir holds, in a job's output directory, what the analysis needs
// of its GPU modules to run again offline: per module the nvdisasm listing
// of the functions in the profile (HASH.sass.zst, a zstd frame of nvdisasm
// text), and the cubin itself when it is at most CubinKeepMax bytes
// (HASH.cubin). A framework's modules are hundreds of MB, of which a run
// uses a few functions: those are what is kept of them.
const ModulesDir = "modules"

// CubinKeepMax bounds the cubins the collectors upload to the module
// bucket and the root keeps in the output directory (docs/sass.md,
// "Framework-sized modules").
const CubinKeepMax = 16 << 20

// listingFile is the saved listing of module h (sass.EncodeListing's
// bytes).
func listingFile(dir string, h profile.ModuleHash) string {
	return filepath.Join(dir, ModulesDir, h.String()+".sass.zst")
}

func cubinFile(dir string, h profile.ModuleHash) string {
	return filepath.Join(dir, ModulesDir, h.String()+".cubin")
}

// profileFunctions lists the GPU functions of a profile by module.
func profileFunctions(p *profile.Profile) map[profile.ModuleHash][]string {
	out := map[profile.ModuleHash][]string{}
	for _, f := range p.Funcs {
		out[f.Module] = append(out[f.Module], f.Name)
	}
	for _, fns := range out {
		sort.Strings(fns)
	}
	return out
}

// saveModules copies from the job's module bucket into the output
// directory the listings the collectors shared of the profile's functions
// (joined per module) and the cubins the collectors uploaded (at most
// CubinKeepMax bytes each).
func saveModules(ctx context.Context, conn *broker.Conn, job, out string, p *profile.Profile) {
	dir := filepath.Join(out, ModulesDir)
	for h, fns := range profileFunctions(p) {
		var pieces [][]byte
		for _, fn := range fns {
			b, err := conn.GetModule(ctx, job, h, broker.FunctionKind(fn))
			if err != nil {
				continue // a subroutine (in its kernel's listing), or none shared
			}
			_, got, text, err := online.DecodeEntry(b)
			if err != nil || got != fn {
				slog.Warn("shared listing unusable", "module", h, "function", fn, "err", err)
				continue
			}
			pieces = append(pieces, text)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			// Nothing can be saved; the report still has the profile.
			slog.Warn("saving modules", "dir", dir, "err", err)
			return
		}
		if len(pieces) > 0 {
			writeModuleFile(listingFile(out, h), sass.EncodeListing(sass.JoinListings(pieces...)))
		}
		if n, err := conn.ModuleSize(ctx, job, h, broker.ModuleCubin); err != nil || n > CubinKeepMax {
			continue // none uploaded, or too big to keep
		}
		if b, err := conn.GetModule(ctx, job, h, broker.ModuleCubin); err != nil {
			slog.Warn("module cubin not saved", "module", h, "err", err)
		} else {
			writeModuleFile(cubinFile(out, h), b)
		}
	}
}

// writeModuleFile saves a module's listing or cubin; one that cannot be
// written is named and left out (a later report makes it again, or goes
// without it).
func writeModuleFile(path string, data []byte) {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		slog.Warn("module file not saved", "file", path, "err", err)
	}
}

// modules gives the analysis the parsed SASS of a profile's GPU modules,
// holding the profile's functions only: the listing saved in the output
// directory, completed function by function from the listings cache (on
// this machine), the nvdisasm outputs given, and nvdisasm on a saved cubin
// where the CUDA toolkit is. For gpuprof run, a listing it completes is
// saved back, so that a later report needs nothing else.
type modules struct {
	dir string
	p   *profile.Profile
	src *online.SASS
	fns map[profile.ModuleHash][]string
	// saveBack: a listing completed here is written to dir (gpuprof run's
	// output; report leaves the directory it reads as it is).
	saveBack bool

	mu    sync.Mutex
	cache map[profile.ModuleHash]*sass.Module
	errs  map[profile.ModuleHash]error
}

func moduleSource(dir, sassFiles string, p *profile.Profile) (*modules, error) {
	var files []string
	for _, f := range strings.Split(sassFiles, ",") {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return &modules{dir: dir, p: p, fns: profileFunctions(p),
		src:   &online.SASS{Files: files, Cache: online.DefaultDiskCache()},
		cache: map[profile.ModuleHash]*sass.Module{}, errs: map[profile.ModuleHash]error{}}, nil
}

// noAdviceNote says why an analysis that found no advice may have found
// nothing: modules whose instructions it could not read (no listing, no
// nvdisasm, no --sass). "" when every module it asked for was read. Without
// it, such a report read "the analysis found nothing above its thresholds"
// over millions of samples.
func (m *modules) noAdviceNote(adv []analysis.Advice) string {
	if len(adv) > 0 {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var hs []profile.ModuleHash
	for h, err := range m.errs {
		if err != nil {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return ""
	}
	sort.Slice(hs, func(i, j int) bool { return fmt.Sprint(hs[i]) < fmt.Sprint(hs[j]) })
	return fmt.Sprintf("not computed for %d GPU module(s) without SASS (%v); give their nvdisasm outputs with --sass, or run where nvdisasm is on PATH",
		len(hs), m.errs[hs[0]])
}

// Close removes the cubins written for nvdisasm (a framework's are
// hundreds of MB): the report and the root call it once the analysis is
// done.
func (m *modules) Close() { m.src.Close() }

// Module implements analysis.ModuleSource.
func (m *modules) Module(h profile.ModuleHash) (*sass.Module, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mod, ok := m.cache[h]; ok {
		return mod, m.errs[h]
	}
	mod, err := m.load(h)
	m.cache[h], m.errs[h] = mod, err
	return mod, err
}

func (m *modules) load(h profile.ModuleHash) (*sass.Module, error) {
	var saved []byte
	var have *sass.Module
	if enc, err := os.ReadFile(listingFile(m.dir, h)); err == nil {
		text, err := sass.DecodeListing(enc)
		if err == nil {
			if have, err = sass.Parse(text); err == nil {
				saved = text
			}
		}
		if err != nil {
			slog.Warn("saved listing unusable", "file", listingFile(m.dir, h), "err", err)
			have = nil
		}
	}
	cubin, err := os.ReadFile(cubinFile(m.dir, h))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Without it, only the listings can give the module's functions.
		slog.Warn("saved cubin unreadable", "file", cubinFile(m.dir, h), "err", err)
	}
	var sm uint16
	if md := m.p.Modules[h]; md != nil {
		sm = md.SM
	}
	ref := online.ModuleRef{Hash: h, Cubin: cubin, SM: sm, Functions: m.fns[h]}
	var need []string
	for _, fn := range m.fns[h] {
		if have == nil || have.Func(fn) == nil {
			need = append(need, fn)
		}
	}
	texts, whys := m.src.Listings(ref, need)
	pieces := [][]byte{saved}
	var why []string
	for _, fn := range need {
		if text := texts[fn]; text != nil {
			pieces = append(pieces, text)
		} else {
			why = append(why, fn+": "+whys[fn])
		}
	}
	if len(pieces) == 1 {
		if have == nil {
			return nil, fmt.Errorf("module %v: no listing of its %d functions (%s)", h, len(m.fns[h]), strings.Join(why[:min(len(why), 3)], "; "))
		}
		return have, nil
	}
	if saved == nil {
		pieces = pieces[1:]
	}
	text := sass.JoinListings(pieces...)
	mod, err := sass.Parse(text)
	if err != nil {
		return have, fmt.Errorf("module %v: joined listing: %w", h, err)
	}
	if m.saveBack {
		if err := os.MkdirAll(filepath.Join(m.dir, ModulesDir), 0o700); err != nil {
			slog.Warn("completed listing not saved", "dir", filepath.Join(m.dir, ModulesDir), "err", err)
		} else {
			writeModuleFile(listingFile(m.dir, h), sass.EncodeListing(text))
		}
	}
	return mod, nil
}

// disassemble runs nvdisasm on a whole cubin (the CUDA toolkit must be on
// PATH) with the collectors' options: advise --static-only on a cubin the
// user names.
func disassemble(cubin []byte) (*sass.Module, error) {
	nv, err := exec.LookPath("nvdisasm")
	if err != nil {
		return nil, fmt.Errorf("nvdisasm not on PATH: %w", err)
	}
	text, err := sass.RunNVDisasm(nv, cubin, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	return sass.Parse(text)
}
