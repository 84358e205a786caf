package analysis_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gpuprof/analysis"
	"gpuprof/collector/analyze"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
	"gpuprof/sass"
	"gpuprof/symname"
)

// The validation of docs/validation.md: each CUDA test program's captures
// (testdata/captures) go through the collector's analysis, with the
// program's nvdisasm listing (testdata/sass/<prog>), into one profile; the
// advice must name the program's intended optimisation at its line, and
// its estimated speedup is set against the speedup the fixed twin achieved
// natively on the GPU (the timings table).

var (
	validationTable = flag.Bool("validation.table", false, "print the validation table in docs/validation.md's format")
	validationGPA   = flag.Bool("validation.gpa", false, "estimate with GPA's rules alone (Options.GPAOnly)")
	validationDump  = flag.String("validation.dump", "", "write each program's merged profile to this directory, for gpuprof report")
)

// pairSpec is what a test program's advice must say.
type pairSpec struct {
	prog    string
	kernels []string // the bad twin's kernels (demangled names)
	kinds   []string // acceptable advice kinds, preferred first
	markers []string // the hotspot's source line contains one of these
	// noGain: the fix gains nothing worth doing; the advice must say so
	// (analysis.NothingBigToGain) while still naming the candidate.
	noGain bool
	// sass, when set, is how the flagged instruction's SASS starts: the
	// access the twin changes, where advice of the same kind flags others
	// on the same line (dominant_load's twin skips a load; the store of
	// the same line gets a conditional-store advice of its own).
	sass string
}

var pairSpecs = []pairSpec{
	{"single_value", []string{"fill_weights", "scale_by_weights"}, []string{analysis.KindConstant}, []string{"single-value store", "single-value load"}, false, ""},
	{"dominant_load", []string{"sparse_mul"}, []string{analysis.KindConditional}, []string{"a[i] is 0 for 95%"}, false, "LDG"},
	{"loop_reload", []string{"accumulate_reload"}, []string{analysis.KindScalarRepl}, []string{"reloads s[0]"}, false, ""},
	{"wide_type", []string{"classify<long long>", "apply_class_weight<long long>"}, []string{analysis.KindNarrowType, analysis.KindCompression}, []string{"4 distinct values", "table[label[i]]"}, false, ""},
	{"strided", []string{"push_aos"}, []string{analysis.OptGlobalAdjust}, []string{"stride of 32 bytes"}, false, ""},
	{"spill", []string{"accumulators_spilled"}, []string{analysis.OptRegisterIncrease, analysis.StaticSpill}, []string{"acc[j] = acc[j]", "acc[j] = v", "s += acc[j]", "register-limited"}, false, ""},
	{"divergent", []string{"transform_divergent"}, []string{analysis.OptBranchDivergence}, []string{"v * 0.9999f", "v * 1.0001f", "path_odd(x[i]", "path_even(x[i]"}, false, ""},
	{"bank_conflict", []string{"transpose_tile<0>"}, []string{analysis.OptSharedAdjust, analysis.OptSharedTransactions}, []string{"column read"}, false, ""},
	{"stall_memory", []string{"chase_sequential"}, []string{analysis.OptCodeReordering, analysis.OptLoopUnrolling}, []string{"dependent global load"}, false, ""},
	{"stall_exec", []string{"chains_sequential"}, []string{analysis.OptCodeReordering, analysis.OptLoopUnrolling}, []string{"depends on the previous v"}, false, ""},
	{"reload_compute", []string{"evolve_reload"}, []string{analysis.KindScalarRepl}, []string{"reloaded every iteration"}, false, ""},
	{"no_gain", []string{"polish_loaded"}, []string{analysis.KindConstant}, []string{"one value, loaded by every thread"}, true, ""},
}

// validationDirs finds the captures, listings, sources and timings.
type validationDirs struct{ captures, sass, src, timings string }

func findValidationDirs() (validationDirs, bool) {
	d := validationDirs{captures: "../testdata/captures", sass: "../testdata/sass", src: "../testdata/cuda"}
	if v := os.Getenv("GPUPROF_VALIDATION_DIR"); v != "" { // an unpacked gpu-check result
		d.captures, d.sass = filepath.Join(v, "captures"), filepath.Join(v, "sass")
	}
	for _, c := range []string{filepath.Join(d.captures, "timings.tsv"), filepath.Join(d.captures, "..", "timings.tsv")} {
		if _, err := os.Stat(c); err == nil {
			d.timings = c
		}
	}
	m, _ := filepath.Glob(filepath.Join(d.captures, "*.pcsampling.gpr"))
	return d, len(m) > 0 && d.timings != ""
}

// captureItem runs one capture through the collector's analysis and
// returns it as item (0, seq).
//
// canon are the cubins of the timed pass: a capture's module whose code
// (every .text section) is one of them but whose bytes are not (a later
// build of the same source differs in a few bytes outside the code) is
// read as that one, so that its functions meet the other captures' in one
// module.
func captureItem(t *testing.T, path string, structs analyze.StructureSource, seq uint32, canon [][]byte) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := analyze.New(analyze.Options{Job: "validation", Rank: 0, Structures: structs})
	defer a.Close()
	dec := rawstream.NewDecoder(bufio.NewReader(f))
	for {
		fr, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m, ok := fr.(*rawstream.Module); ok && m.HasBytes {
			for _, c := range canon {
				if !bytes.Equal(m.Bytes, c) && sameCode(m.Bytes, c) {
					m.Bytes = c
					break
				}
			}
		}
		if err := a.Add(fr, dec.Offset()); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	p, err := a.Flush(seq)
	if err != nil || p == nil {
		t.Fatalf("%s: flush: %v", path, err)
	}
	return p
}

// captureModules returns the cubins a capture carries.
func captureModules(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]byte
	dec := rawstream.NewDecoder(bufio.NewReader(f))
	for {
		fr, err := dec.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("%s: %v", path, err)
			}
			return out
		}
		if m, ok := fr.(*rawstream.Module); ok && m.HasBytes {
			out = append(out, m.Bytes)
		}
	}
}

// sameCode reports whether two cubins hold the same .text sections.
func sameCode(a, b []byte) bool {
	texts := func(c []byte) map[string][]byte {
		f, err := elf.NewFile(bytes.NewReader(c))
		if err != nil {
			return nil
		}
		out := map[string][]byte{}
		for _, s := range f.Sections {
			if strings.HasPrefix(s.Name, ".text.") {
				if d, err := s.Data(); err == nil {
					out[s.Name] = d
				}
			}
		}
		return out
	}
	ta, tb := texts(a), texts(b)
	if len(ta) == 0 || len(ta) != len(tb) {
		return false
	}
	for n, d := range ta {
		if !bytes.Equal(d, tb[n]) {
			return false
		}
	}
	return true
}

// stripTimes drops kernel times of an instrumented pass, and their
// per-instance squares and histogram (they measure the instrumentation,
// not the kernel). With launches too, it also drops the launch counts and
// configurations: the redundancy passes ran smaller problems (to keep
// their captures small), whose grids are not the timed pass's.
func stripTimes(p *profile.Profile, launches bool) {
	p.DropMetrics(func(m profile.MetricID) bool {
		return profile.TimeMetric(m) || launches && (m == profile.GPULaunches || m == profile.GPUBlocks || strings.HasPrefix(m.Name(), "launch."))
	})
}

// programProfile merges a program's sampling, hybrid and redundancy
// captures into one profile of rank 0.
func programProfile(t *testing.T, d validationDirs, prog string) (*profile.Profile, []string) {
	t.Helper()
	structs := &analyze.SASS{NVDisasm: "-", Files: []string{filepath.Join(d.sass, prog)}}
	var items []*profile.Profile
	var used []string
	var best *profile.Profile
	var bestMode string
	canon := captureModules(t, filepath.Join(d.captures, prog+".pcsampling.gpr"))
	for _, mode := range []string{"pcsampling", "hybrid", "redundancy.p1", "redundancy.p50k10"} {
		path := filepath.Join(d.captures, prog+"."+mode+".gpr")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		it := captureItem(t, path, structs, 0, canon)
		if mode != "pcsampling" {
			stripTimes(it, strings.HasPrefix(mode, "redundancy"))
		}
		if strings.HasPrefix(mode, "redundancy") {
			// One redundancy pass (two would count the accesses twice): the
			// one with more access records analysed.
			if best == nil || it.Ranks[0].Records > best.Ranks[0].Records {
				best, bestMode = it, mode
			}
			continue
		}
		items = append(items, it)
		used = append(used, mode)
	}
	if best != nil {
		items = append(items, best)
		used = append(used, bestMode)
	}
	// Renumber the items as one rank's consecutive batches.
	for i, it := range items {
		it.Items[0].Clear()
		it.Items[0].Add(uint32(i))
	}
	done, err := analyze.DoneItem("validation", 0, uint32(len(items)), nil, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	p := profile.New("validation")
	for _, it := range append(items, done) {
		if err := p.Merge(it); err != nil {
			t.Fatal(err)
		}
	}
	return p, used
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// programModules parses the program's nvdisasm listing (with encodings,
// for the control bits) and serves it for every module of p whose
// functions it has.
func programModules(t *testing.T, d validationDirs, prog string, p *profile.Profile) analysis.Modules {
	t.Helper()
	var m *sass.Module
	for _, name := range []string{prog + ".hex.txt", prog + ".sass.txt"} {
		b, err := os.ReadFile(filepath.Join(d.sass, prog, name))
		if err != nil {
			continue
		}
		if m, err = sass.Parse(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		break
	}
	mods := analysis.Modules{}
	if m == nil {
		return mods
	}
	for _, f := range p.Funcs {
		if m.Func(f.Name) != nil {
			mods[f.Module] = m
		}
	}
	return mods
}

// timings reads the native twins' median kernel times.
func timings(t *testing.T, path string) map[string]map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(line, "\t")
		if i == 0 || len(f) < 5 {
			continue
		}
		v, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			continue
		}
		if out[f[0]] == nil {
			out[f[0]] = map[string]float64{}
		}
		out[f[0]][f[1]] = v
	}
	return out
}

// sourceLine returns line n of a test program.
func sourceLine(d validationDirs, prog string, file string, n uint32) string {
	b, err := os.ReadFile(filepath.Join(d.src, prog+".cu"))
	if err != nil || !strings.HasSuffix(file, prog+".cu") {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	if n == 0 || int(n) > len(lines) {
		return ""
	}
	return lines[n-1]
}

type validationRow struct {
	prog, kind, where    string
	est, achieved, error float64
	badMs, fixedMs       float64
	modes                []string
}

func TestValidationPairs(t *testing.T) {
	d, ok := findValidationDirs()
	if !ok {
		t.Skip("no captures with a timings table (testdata/captures or GPUPROF_VALIDATION_DIR)")
	}
	tm := timings(t, d.timings)
	var rows []validationRow
	for _, ps := range pairSpecs {
		ps := ps
		t.Run(ps.prog, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(d.captures, ps.prog+".pcsampling.gpr")); err != nil {
				t.Skipf("no captures of %s yet (%s.pcsampling.gpr in %s)", ps.prog, ps.prog, d.captures)
			}
			if tm[ps.prog]["bad"] == 0 || tm[ps.prog]["fixed"] == 0 {
				t.Skipf("no native timings of %s's twins in %s", ps.prog, d.timings)
			}
			p, modes := programProfile(t, d, ps.prog)
			if *validationDump != "" {
				if err := profile.WriteFile(filepath.Join(*validationDump, ps.prog+".gpp"), p); err != nil {
					t.Fatal(err)
				}
			}
			mods := programModules(t, d, ps.prog, p)
			as, err := analysis.Advise(p, mods, analysis.Options{Static: true, GPAOnly: *validationGPA, MinSpeedup: 1 + 1e-9})
			if err != nil {
				t.Fatal(err)
			}
			a, w := intended(d, ps, as)
			if a == nil {
				for _, x := range as {
					h := x.Hotspots[0]
					t.Logf("  %s [%s] %s:%d %s speedup %.3f importance %.3f", x.Kind, h.Kernel, h.File, h.Line, strings.TrimSpace(sourceLine(d, ps.prog, h.File, h.Line)), x.Speedup, x.Importance)
				}
				t.Fatalf("no %v advice on the bad twin at a line with %q", ps.kinds, ps.markers)
			}
			bad, fixed := tm[ps.prog]["bad"], tm[ps.prog]["fixed"]
			r := validationRow{prog: ps.prog, kind: a.Kind, where: fmt.Sprintf("%s:%d", filepath.Base(w.File), w.Line), est: a.Speedup, badMs: bad, fixedMs: fixed, modes: modes}
			if bad > 0 && fixed > 0 {
				r.achieved = bad / fixed
				r.error = math.Abs(r.est-r.achieved) / r.achieved
			}
			t.Logf("%s: %s at %s, estimated %.3f, achieved %.3f (%.3f / %.3f ms), error %.1f%%; %s", ps.prog, a.Kind, r.where, r.est, r.achieved, bad, fixed, 100*r.error, a.Evidence)
			if ps.noGain {
				// The candidate fix must come out below the threshold at
				// which the report says there is nothing big to gain.
				if g := a.JobGain(); a.Speedup <= 0 || g >= analysis.NoGainShare {
					t.Errorf("%s estimates %.3f, %.1f%% of the job's GPU time: not below the nothing-big-to-gain threshold %.0f%%", a.Kind, a.Speedup, 100*g, 100*analysis.NoGainShare)
				}
				best, nothing := analysis.NothingBigToGain(as)
				t.Logf("job verdict: nothing big to gain %v; best estimated advice %s [%s] %.3f (%.1f%% of the job's GPU time)", nothing, best.Kind, best.Hotspots[0].Kernel, best.Speedup, 100*best.JobGain())
			}
			rows = append(rows, r)
		})
	}
	if len(rows) == 0 {
		return
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].prog < rows[j].prog })
	logSum, n := 0.0, 0
	var errs []float64
	var b strings.Builder
	b.WriteString("| program | advice | where | bad ms | fixed ms | achieved | estimated | error |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %.4f | %.4f | %.3f× | %.3f× | %.1f%% |\n", r.prog, r.kind, r.where, r.badMs, r.fixedMs, r.achieved, r.est, 100*r.error)
		if r.achieved > 0 {
			logSum += math.Log(math.Max(r.error, 1e-4)) // GPA Table 4 counts zero errors as 0.01%
			n++
			errs = append(errs, r.error)
		}
	}
	if n > 0 {
		fmt.Fprintf(&b, "\ngeometric-mean error over %d pairs: %.1f%%\n", n, 100*math.Exp(logSum/float64(n)))
		// The geometric mean is pulled down hard by a near-exact pair; the
		// arithmetic mean and the median say how far the rest are off.
		sort.Float64s(errs)
		mean := 0.0
		for _, e := range errs {
			mean += e
		}
		med := (errs[(n-1)/2] + errs[n/2]) / 2
		fmt.Fprintf(&b, "arithmetic-mean error: %.1f%%, median: %.1f%%\n", 100*mean/float64(n), 100*med)
	}
	if *validationTable {
		fmt.Print(b.String())
	}
	t.Log("\n" + b.String())
	// The goal (GPA's Table 4: 4.0%) guards the committed captures, whose
	// table docs/validation.md shows; a fresh run's captures
	// (GPUPROF_VALIDATION_DIR) are reported, not judged.
	if gm := math.Exp(logSum / float64(n)); os.Getenv("GPUPROF_VALIDATION_DIR") == "" && !*validationGPA && n == len(pairSpecs) && gm > 0.04 {
		t.Errorf("geometric-mean error %.1f%% over the committed captures, above the 4%% goal", 100*gm)
	}
}

// intended returns the highest-ranked advice of the spec's kinds on the bad
// twin whose hotspot (any of the first three) is at a marked source line.
func intended(d validationDirs, ps pairSpec, as []analysis.Advice) (*analysis.Advice, analysis.Where) {
	for _, kind := range ps.kinds {
		for i := range as {
			a := &as[i]
			if a.Kind != kind {
				continue
			}
			for k, h := range a.Hotspots {
				if k == 3 {
					break
				}
				if !badKernel(ps, symname.Short(h.Kernel)) || !strings.HasPrefix(opcode(h.SASS), ps.sass) {
					continue
				}
				src := sourceLine(d, ps.prog, h.File, h.Line)
				for _, m := range ps.markers {
					if src != "" && strings.Contains(src, m) {
						return a, h
					}
				}
			}
		}
	}
	return nil, analysis.Where{}
}

// opcode is the opcode of a hotspot's SASS text ("/*0140*/ LDG.E R2, ...").
func opcode(sass string) string {
	f := strings.Fields(sass)
	if len(f) > 1 && strings.HasPrefix(f[0], "/*") {
		f = f[1:]
	}
	if len(f) > 0 && strings.HasPrefix(f[0], "@") { // a guard predicate
		f = f[1:]
	}
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func badKernel(ps pairSpec, k string) bool {
	for _, b := range ps.kernels {
		if k == b {
			return true
		}
	}
	return false
}

// TestValidationImbalance: the four ranks of mpi_imbalance (rank 1 gets
// twice the elements) through the collector's analysis and a merge; the
// imbalance advice must name rank 1 alone, with max/mean near 2/(5/4).
func TestValidationImbalance(t *testing.T) {
	d, _ := findValidationDirs()
	var paths []string
	for r := 0; r < 4; r++ {
		p := filepath.Join(d.captures, fmt.Sprintf("mpi_imbalance.pcsampling.rank%d.gpr", r))
		if _, err := os.Stat(p); err != nil {
			t.Skip("no mpi_imbalance captures")
		}
		paths = append(paths, p)
	}
	structs := &analyze.SASS{NVDisasm: "-", Files: []string{filepath.Join(d.sass, "mpi_imbalance")}}
	job := profile.New("validation")
	for r, path := range paths {
		a := analyze.New(analyze.Options{Job: "validation", Rank: int32(r), Structures: structs})
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := rawstream.NewDecoder(bufio.NewReader(f))
		for {
			fr, err := dec.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Add(fr, dec.Offset()); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
		it, err := a.Flush(0)
		if err != nil {
			t.Fatal(err)
		}
		done, err := a.Done(1, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		for _, x := range []*profile.Profile{it, done} {
			if err := job.Merge(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	as := analysis.Imbalance(analysis.NewIndex(job), analysis.DefaultImbalance)
	if len(as) == 0 {
		t.Fatal("no imbalance advice")
	}
	a := as[0]
	t.Logf("%s [%s] ranks %v speedup %.3f: %s", a.Kind, a.Hotspots[0].Kernel, a.Ranks, a.Speedup, a.Evidence)
	if symname.Short(a.Hotspots[0].Kernel) != "relax" || len(a.Ranks) != 1 || a.Ranks[0] != 1 {
		t.Fatalf("advice %+v names ranks %v, want rank 1 of relax", a, a.Ranks)
	}
	if a.Speedup < 1.4 || a.Speedup > 1.8 {
		t.Fatalf("max/mean %.3f, want about 1.6 (2 units of work against a mean of 1.25)", a.Speedup)
	}
}
