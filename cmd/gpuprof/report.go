package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/sass"
	"gpuprof/symname"
	export "gpuprof/viewer-export"
	"gpuprof/viewer-export/diff"
	"gpuprof/viewer-export/html"
	"gpuprof/viewer-export/text"
)

func init() {
	register("report", "print the text report of a profile (an output directory or profile file)", cmdReport)
	register("export", "write hpcviewer, pprof, JSON or HTML views of a profile", cmdExport)
	register("advise", "run the advisory analysis on a saved profile, or --static-only on SASS", cmdAdvise)
	register("diff", "compare two runs (before and after a fix)", cmdDiff)
}

// sassFlag adds the flag naming nvdisasm outputs for the analysis.
func sassFlag(fsFlag func(name, value, usage string) *string) *string {
	return fsFlag("sass", os.Getenv("GPUPROF_SASS"), "nvdisasm outputs (files or directories, comma-separated) of the profile's GPU modules")
}

// loadAdvice reads a profile and runs the analysis on it; note says why
// there is no advice where modules could not be read (noAdviceNote).
func loadAdvice(path, sassFiles string) (p *profile.Profile, adv []analysis.Advice, note string, err error) {
	p, err = profile.ReadFile(path)
	if err != nil {
		return nil, nil, "", err
	}
	mods, err := moduleSource(filepath.Dir(profilePath(path)), sassFiles, p)
	if err != nil {
		return nil, nil, "", err
	}
	defer mods.Close()
	adv, err = analysis.Advise(p, mods, analysis.Options{Static: true})
	return p, adv, mods.noAdviceNote(adv), err
}

func profilePath(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return filepath.Join(path, profile.FileName)
	}
	return path
}

func cmdReport(args []string) error {
	fs := newFlags("report", "[flags] DIR|FILE", `
Prints the whole-job text report: provenance (ranks merged, incomplete
ranks, GPU, sampling, dropped records, captured or synthetic), the top advice
with estimated speedups, kernels by time and by accesses, redundant PC pairs
and data objects (GVProf eq. 1-2), per-rank imbalance.`)
	sassFiles := sassFlag(fs.String)
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		printUsage(fs)
		return errors.New("want one output directory or profile file")
	}
	p, adv, note, err := loadAdvice(fs.Arg(0), *sassFiles)
	if err != nil {
		return err
	}
	return text.Write(os.Stdout, p, adv, text.Options{AdviceNote: note})
}

// exportFormats are the values export --format takes.
var exportFormats = []string{"hpctoolkit", "pprof", "json", "html", "text", "all"}

func cmdExport(args []string) error {
	fs := newFlags("export", "[flags] DIR|FILE", `
Writes views of a profile: hpctoolkit (a database directory hpcviewer opens),
pprof (profile.pb.gz: go tool pprof -http=: FILE), json (schema in
docs/json-schema.json), html (one self-contained file), text, or all.`)
	format := fs.String("format", "all", strings.Join(exportFormats, " | "))
	out := fs.String("o", "", "output directory (default: the profile's directory)")
	sassFiles := sassFlag(fs.String)
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		printUsage(fs)
		return errors.New("want one output directory or profile file")
	}
	names := map[string]string{"hpctoolkit": export.DatabaseDir, "pprof": export.PprofFile, "json": export.JSONFile, "html": export.HTMLFile, "text": export.TextFile}
	if _, ok := names[*format]; !ok && *format != "all" {
		return fmt.Errorf("--format %q: want one of %s", *format, strings.Join(exportFormats, ", "))
	}
	p, adv, note, err := loadAdvice(fs.Arg(0), *sassFiles)
	if err != nil {
		return err
	}
	eo := export.Options{AdviceNote: note}
	dir := *out
	if dir == "" {
		dir = filepath.Dir(profilePath(fs.Arg(0)))
	}
	if *format == "all" {
		if err := export.WriteAllOptions(dir, p, adv, eo); err != nil {
			return err
		}
		fmt.Println(dir)
		return nil
	}
	tmp, err := os.MkdirTemp("", "gpuprof-export")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := export.WriteAllOptions(tmp, p, adv, eo); err != nil {
		return err
	}
	name := names[*format]
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	dst := filepath.Join(dir, name)
	os.RemoveAll(dst)
	if err := os.Rename(filepath.Join(tmp, name), dst); err != nil {
		return err
	}
	fmt.Println(dst)
	return nil
}

func cmdAdvise(args []string) error {
	fs := newFlags("advise", "[flags] DIR|FILE | --static-only SASS...", `
Runs the advisory analysis: value-redundancy insights (GVProf), stall
blaming with optimizers and speedup estimates (GPA), static SASS checks
(GPUscout), divergence, and cross-rank imbalance; prints the ranked advice.
With --static-only it needs no GPU run: it reads nvdisasm output or cubins
and lists the static findings with their SASS lines.`)
	static := fs.Bool("static-only", false, "static SASS checks only, on nvdisasm output files or cubins")
	top := fs.Int("top", 20, "advice to print")
	sassFiles := sassFlag(fs.String)
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		printUsage(fs)
		return errors.New("nothing to analyse")
	}
	if *static {
		for _, f := range fs.Args() {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			var m *sass.Module
			if strings.HasPrefix(string(b), "\x7fELF") {
				m, err = disassemble(b)
			} else {
				m, err = sass.Parse(b)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			adv := analysis.StaticCheck(m)
			fmt.Printf("%s: %d static findings\n", f, len(adv))
			printAdvice(nil, adv, *top)
		}
		return nil
	}
	p, adv, note, err := loadAdvice(fs.Arg(0), *sassFiles)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Println("no advice: " + note)
	}
	printAdvice(p, adv, *top)
	return nil
}

func printAdvice(p *profile.Profile, adv []analysis.Advice, top int) {
	for i, a := range adv {
		if i == top {
			fmt.Printf("... %d more\n", len(adv)-top)
			break
		}
		sp := ""
		if a.Speedup > 0 {
			sp = fmt.Sprintf(" speedup %.2fx", a.Speedup)
		}
		fmt.Printf("%2d. [%s] %s%s, importance %.1f%%\n    %s\n", i+1, a.Category, a.Kind, sp, 100*a.Importance, a.Hint)
		for j, w := range a.Hotspots {
			if j == 3 {
				break
			}
			where := symname.Short(w.Function) + " (" + analysis.Place(w.File, w.Line) + ")"
			if p != nil {
				where = text.WhereLabel(p, w)
			}
			fmt.Printf("    at %s", where)
			if w.SASS != "" {
				fmt.Printf("  | %s", w.SASS)
			}
			fmt.Println()
		}
		if len(a.Ranks) > 0 {
			fmt.Printf("    ranks %v\n", a.Ranks)
		}
		if a.Evidence != "" {
			fmt.Printf("    %s\n", a.Evidence)
		}
	}
}

func cmdDiff(args []string) error {
	fs := newFlags("diff", "[flags] BEFORE AFTER", `
Compares two runs, per kernel context and metric: the change, absolute and
relative. With -html FILE it also writes the HTML report of AFTER with the
comparison.`)
	htmlOut := fs.String("html", "", "write AFTER's HTML report with the comparison to this file")
	sassFiles := sassFlag(fs.String)
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		printUsage(fs)
		return errors.New("want two profiles")
	}
	before, err := profile.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	after, adv, note, err := loadAdvice(fs.Arg(1), *sassFiles)
	if err != nil {
		return err
	}
	r := diff.Compare(before, after)
	if err := r.WriteText(os.Stdout, 30); err != nil {
		return err
	}
	if *htmlOut != "" {
		return html.WriteFile(*htmlOut, after, adv, html.Options{Diff: r, AdviceNote: note})
	}
	return nil
}
