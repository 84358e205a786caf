package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	export "gpuprof/viewer-export"
	"gpuprof/viewer-export/text"
)

// summaryAdvice is how many advice items run's summary names.
const summaryAdvice = 3

// writeSummary writes run's closing lines (on standard error, which the
// application shares with gpuprof's progress): what was measured, what is
// incomplete and why, the top advice and where the outputs are.
func writeSummary(w io.Writer, out string, p *profile.Profile, adv []analysis.Advice, expected, exit int) {
	var launches uint64
	var incomplete []int32
	for r, ri := range p.Ranks {
		launches += ri.Launches
		if ri.Incomplete != "" {
			incomplete = append(incomplete, r)
		} else if _, open := p.Open[r]; open {
			incomplete = append(incomplete, r)
		}
	}
	sort.Slice(incomplete, func(i, j int) bool { return incomplete[i] < incomplete[j] })
	reason := func(r int32) string {
		if why := p.Ranks[r].Incomplete; why != "" {
			return why
		}
		return "not sealed: batches missing"
	}
	status := "application exit status 0"
	if exit != 0 {
		status = fmt.Sprintf("application exit status %d", exit)
	}
	fmt.Fprintf(w, "gpuprof: job %s: %d of %d ranks reported, %d incomplete, %d kernel launches; %s\n",
		p.Job, len(p.Ranks), expected, len(incomplete), launches, status)
	if p.Interrupted != "" {
		fmt.Fprintf(w, "gpuprof: INTERRUPTED by %s: the report holds what was merged by then\n", p.Interrupted)
	}
	if launches == 0 && len(p.Nodes) <= 1 {
		fmt.Fprintf(w, "gpuprof: NOTHING MEASURED: no rank reported a GPU kernel launch\n")
	}
	for i, r := range incomplete {
		if i == 3 {
			fmt.Fprintf(w, "gpuprof:   ... and %d more incomplete ranks (report.txt lists them)\n", len(incomplete)-i)
			break
		}
		fmt.Fprintf(w, "gpuprof:   rank %d incomplete: %s\n", r, reason(r))
	}
	// As the report lists them: a finding at sibling calling contexts once.
	for i, g := range text.AdviceGroups(p, text.SortAdvice(adv)) {
		if i == summaryAdvice {
			break
		}
		a := g[0]
		at := ""
		if len(a.Hotspots) > 0 {
			at = " at " + shortWhere(p, a.Hotspots[0])
		}
		if len(g) > 1 {
			at += fmt.Sprintf(" (%d calling contexts)", len(g))
		}
		sp := ""
		if a.Speedup > 1 {
			sp = fmt.Sprintf(", est. speedup %.2fx", a.Speedup)
		}
		fmt.Fprintf(w, "gpuprof: advice %d: %s%s%s\n", i+1, a.Kind, at, sp)
	}
	files := []string{export.TextFile, export.HTMLFile, export.PprofFile, export.JSONFile, export.DatabaseDir + "/"}
	fmt.Fprintf(w, "gpuprof: output in %s: %s ('gpuprof report %s' prints the report)\n",
		out, strings.Join(files, ", "), shellWord(out))
}

// shellWord quotes s for a shell command line when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printReportHead prints the report's first screen (demo does, having no
// application whose output it would mix with).
func printReportHead(w io.Writer, out string, screen int) error {
	b, err := os.ReadFile(filepath.Join(out, export.TextFile))
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > screen {
		lines = append(lines[:screen], fmt.Sprintf("... (%s has the rest)\n", filepath.Join(out, export.TextFile)))
	}
	_, err = fmt.Fprint(w, strings.Join(lines, ""))
	return err
}

// shortWhere names a hotspot briefly: its kernel (or GPU function) and
// source line.
func shortWhere(p *profile.Profile, w analysis.Where) string {
	name := w.Kernel
	if name == "" {
		if n := p.Nodes[p.KernelOf(w.Context)]; n != nil && n.Frame.Kind == profile.KindKernel {
			name = n.Frame.Function
		}
	}
	if name == "" {
		name = w.Function
	}
	if w.File != "" && w.Line > 0 {
		name += fmt.Sprintf(" (%s:%d)", filepath.Base(w.File), w.Line)
	}
	return name
}

// appStatusOr is what run returns when it failed after the application
// ran: the application's status if it failed (gpuprof's error is printed),
// else gpuprof's error (status 125: no profile was written).
func appStatusOr(exit int, err error) error {
	if exit == 0 {
		return err
	}
	fmt.Fprintf(os.Stderr, "gpuprof run: %s\n", oneLine(err))
	return exitError{exit}
}
