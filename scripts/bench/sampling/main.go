// Command sampling measures the error of block and kernel sampling on
// value-redundancy fractions, as GVProf §V does: each test program is
// profiled twice with the same input, fully traced (P=1, K=1) and sampled
// (P=50, K=10 by default), and the whole-program redundancy fractions
// (temporal and spatial, loads and stores) of the two runs are compared.
//
//	sampling DIR
//
// DIR holds PROG.p1.gpuprof and PROG.p50k10.gpuprof profile files (written
// by `gpuprof collect --local`; scripts/gpu-check's sampling phase makes
// them). It prints one row per fraction, each program's error (the mean
// absolute difference over its fractions, in percentage points, as GVProf's
// Table I) and the mean and worst over the programs, and exits 1 when the
// goal (mean under 0.5, worst under 3 points; GVProf reports 0.7 and 4.8)
// is missed.
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
	// Over the programs' errors (GVProf's definition).
	Mean, Worst float64
	WorstAt     string
	// Over single fractions, stricter.
	WorstFraction   float64
	WorstFractionAt string
}

// Program is one program's error: the mean difference over its fractions.
type Program struct {
	Name  string
	Error float64
}

// Goals: GVProf's mean and worst errors are 0.7 and 4.8 points.
const (
	goalMean  = 0.5
	goalWorst = 3.0
)

func (s Study) Met() bool { return len(s.Programs) > 0 && s.Mean < goalMean && s.Worst < goalWorst }

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
		var sum float64
		n := 0
		for i := range fa.Value {
			if !fa.Has[i] || !fb.Has[i] {
				continue
			}
			r := Row{Program: prog, Fraction: profile.FractionNames[i], Full: fa.Value[i], Sampled: fb.Value[i]}
			r.Diff = 100 * math.Abs(r.Full-r.Sampled)
			s.Rows = append(s.Rows, r)
			sum += r.Diff
			n++
			if r.Diff >= s.WorstFraction {
				s.WorstFraction, s.WorstFractionAt = r.Diff, prog+" "+r.Fraction
			}
		}
		if n > 0 {
			s.Programs = append(s.Programs, Program{prog, sum / float64(n)})
		}
	}
	if len(s.Programs) == 0 {
		return s, fmt.Errorf("%s: no program has both a .p1.gpuprof and a .p50k10.gpuprof profile", dir)
	}
	var sum float64
	for _, p := range s.Programs {
		sum += p.Error
		if p.Error >= s.Worst {
			s.Worst, s.WorstAt = p.Error, p.Name
		}
	}
	s.Mean = sum / float64(len(s.Programs))
	return s, nil
}

// Print writes the study as a markdown table with its verdict.
func (s Study) Print(w io.Writer) {
	fmt.Fprintln(w, "| program | fraction | P=1, K=1 | P=50, K=10 | difference (points) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, r := range s.Rows {
		fmt.Fprintf(w, "| %s | %s | %.2f%% | %.2f%% | %.2f |\n", r.Program, r.Fraction, 100*r.Full, 100*r.Sampled, r.Diff)
	}
	fmt.Fprintln(w, "\n| program | error (mean over its fractions, points) |\n|---|---:|")
	for _, p := range s.Programs {
		fmt.Fprintf(w, "| %s | %.2f |\n", p.Name, p.Error)
	}
	verdict := "met"
	if !s.Met() {
		verdict = "missed"
	}
	fmt.Fprintf(w, "\nworst single fraction %.2f points (%s)\n", s.WorstFraction, s.WorstFractionAt)
	fmt.Fprintf(w, "programs' error: mean %.3f points over %d programs, worst %.3f (%s); goal mean < %.1f and worst < %.1f: %s\n",
		s.Mean, len(s.Programs), s.Worst, s.WorstAt, goalMean, goalWorst, verdict)
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
