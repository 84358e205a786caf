// Command sampling measures the error of block and kernel sampling on
// value-redundancy fractions, as GVProf §V does: each test program is
// profiled twice with the same input, fully traced (P=1, K=1) and sampled
// (P=50, K=10 by default), and the whole-program redundancy fractions of
// the two runs are compared.
//
//	sampling DIR
//
// DIR holds PROG.p1.gpuprof and PROG.p50k10.gpuprof profile files (written
// by `gpuprof collect --local`; scripts/gpu-check's sampling phase makes
// them). It prints one row per fraction and each program's error, the mean
// absolute difference over a set of its fractions in percentage points, as
// GVProf's Table I, for two sets:
//
//   - GVProf's: temporal loads and stores, and spatial redundancy as
//     GVProf's implementation counts it (accesses carrying an
//     instruction's most frequent value: profile.Fractions' dominant
//     entries). This is the set GVProf's 0.7 mean and 4.8 worst were
//     measured on, and the one the goal (mean under 0.5, worst under 3
//     points) is judged on; it exits 1 when that goal is missed.
//   - Definition III's: temporal, and spatial as the paper's definitions
//     III.3-4 state it (an access repeating any earlier value of the
//     object). Reported, with its own verdict: block sampling biases it
//     (docs/overhead.md says why).
package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gpuprof/profile"
)

// Row is one compared fraction.
type Row struct {
	Program, Fraction string
	Full, Sampled     float64 // fractions in [0, 1]
	Diff              float64 // |Full - Sampled| in percentage points
}

// Study is the comparison over every program of a directory.
type Study struct {
	Rows     []Row
	Programs []Program
	// Sets: the errors over GVProf's fractions (the goal's) and over
	// definition III's.
	GVProf, DefIII SetError
}

// SetError is the error of one set of fractions.
type SetError struct {
	// Over the programs' errors (GVProf's definition).
	Mean, Worst float64
	WorstAt     string
	// Over single fractions, stricter.
	WorstFraction   float64
	WorstFractionAt string
}

// Program is one program's error in each set: the mean difference over
// its fractions of the set.
type Program struct {
	Name           string
	GVProf, DefIII float64
}

// The sets, as indexes into profile.FractionNames.
var (
	setGVProf = []int{0, 1, 4, 5}
	setDefIII = []int{0, 1, 2, 3}
)

// Goals: GVProf's mean and worst errors are 0.7 and 4.8 points.
const (
	goalMean  = 0.5
	goalWorst = 3.0
)

func (e SetError) met() bool { return e.Mean < goalMean && e.Worst < goalWorst }

// Met says whether GVProf's set meets the goal.
func (s Study) Met() bool { return len(s.Programs) > 0 && s.GVProf.met() }

// Compare reads every PROG.p1.gpuprof with its PROG.p50k10.gpuprof twin in
// dir. A fraction is compared only where both runs measured accesses of its
// direction.
func Compare(dir string) (Study, error) {
	var s Study
	full, err := filepath.Glob(filepath.Join(dir, "*.p1.gpuprof"))
	if err != nil {
		return s, err
	}
	sort.Strings(full)
	for _, f := range full {
		prog := strings.TrimSuffix(filepath.Base(f), ".p1.gpuprof")
		sampled := filepath.Join(dir, prog+".p50k10.gpuprof")
		if _, err := os.Stat(sampled); err != nil {
			continue
		}
		a, err := profile.ReadFile(f)
		if err != nil {
			return s, err
		}
		b, err := profile.ReadFile(sampled)
		if err != nil {
			return s, err
		}
		// Lost records bias the fractions: a study with losses is no study.
		for _, p := range []*profile.Profile{a, b} {
			for _, r := range p.SortedRanks() {
				if ri := p.Ranks[r]; ri.Dropped+ri.HostDropped > 0 {
					return s, fmt.Errorf("%s: rank %d lost %d records on the device and %d in the host queue", prog, r, ri.Dropped, ri.HostDropped)
				}
			}
		}
		fa, fb := a.RedundancyFractions(), b.RedundancyFractions()
		var diff [len(profile.FractionNames)]float64
		var have [len(profile.FractionNames)]bool
		for i := range fa.Value {
			if !fa.Has[i] || !fb.Has[i] {
				continue
			}
			r := Row{Program: prog, Fraction: profile.FractionNames[i], Full: fa.Value[i], Sampled: fb.Value[i]}
			r.Diff = 100 * math.Abs(r.Full-r.Sampled)
			s.Rows = append(s.Rows, r)
			diff[i], have[i] = r.Diff, true
		}
		p := Program{Name: prog}
		okG := setMean(&s.GVProf, setGVProf, prog, diff[:], have[:], &p.GVProf)
		okD := setMean(&s.DefIII, setDefIII, prog, diff[:], have[:], &p.DefIII)
		if okG || okD {
			s.Programs = append(s.Programs, p)
		}
	}
	if len(s.Programs) == 0 {
		return s, fmt.Errorf("%s: no program has both a .p1.gpuprof and a .p50k10.gpuprof profile", dir)
	}
	for _, set := range []struct {
		e   *SetError
		err func(Program) float64
	}{{&s.GVProf, func(p Program) float64 { return p.GVProf }}, {&s.DefIII, func(p Program) float64 { return p.DefIII }}} {
		var sum float64
		for _, p := range s.Programs {
			e := set.err(p)
			sum += e
			if e >= set.e.Worst {
				set.e.Worst, set.e.WorstAt = e, p.Name
			}
		}
		set.e.Mean = sum / float64(len(s.Programs))
	}
	return s, nil
}

// setMean sets *out to the mean difference over the set's fractions that
// both runs have, notes the set's worst single fraction, and reports
// whether any fraction of the set was compared.
func setMean(e *SetError, set []int, prog string, diff []float64, have []bool, out *float64) bool {
	var sum float64
	n := 0
	for _, i := range set {
		if !have[i] {
			continue
		}
		sum += diff[i]
		n++
		if diff[i] >= e.WorstFraction {
			e.WorstFraction, e.WorstFractionAt = diff[i], prog+" "+profile.FractionNames[i]
		}
	}
	if n == 0 {
		return false
	}
	*out = sum / float64(n)
	return true
}

// Print writes the study as a markdown table with its verdicts.
func (s Study) Print(w io.Writer) {
	fmt.Fprintln(w, "| program | fraction | P=1, K=1 | P=50, K=10 | difference (points) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, r := range s.Rows {
		fmt.Fprintf(w, "| %s | %s | %.2f%% | %.2f%% | %.2f |\n", r.Program, r.Fraction, 100*r.Full, 100*r.Sampled, r.Diff)
	}
	fmt.Fprintln(w, "\n| program | error, GVProf's fractions (temporal, dominant) | error, definition III (temporal, spatial) |\n|---|---:|---:|")
	for _, p := range s.Programs {
		fmt.Fprintf(w, "| %s | %.2f | %.2f |\n", p.Name, p.GVProf, p.DefIII)
	}
	fmt.Fprintln(w)
	for _, set := range []struct {
		name string
		e    SetError
	}{{"GVProf's fractions (temporal, dominant)", s.GVProf}, {"definition III (temporal, spatial)", s.DefIII}} {
		verdict := "met"
		if !set.e.met() {
			verdict = "missed"
		}
		fmt.Fprintf(w, "%s: mean %.3f points over %d programs, worst %.3f (%s), worst single fraction %.2f (%s); goal mean < %.1f and worst < %.1f: %s\n",
			set.name, set.e.Mean, len(s.Programs), set.e.Worst, set.e.WorstAt, set.e.WorstFraction, set.e.WorstFractionAt, goalMean, goalWorst, verdict)
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sampling DIR")
		os.Exit(2)
	}
	s, err := Compare(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sampling:", err)
		os.Exit(2)
	}
	s.Print(os.Stdout)
	if !s.Met() {
		os.Exit(1)
	}
}
