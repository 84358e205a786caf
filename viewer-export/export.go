// Package export writes every view of a profile into one directory:
//
//	database/        HPCToolkit database for hpcviewer (meta.db, profile.db, cct.db, metrics/)
//	profile.pb.gz    pprof profile (go tool pprof -http=: profile.pb.gz)
//	profile.json     JSON document (schema: docs/json-schema.json)
//	report.html      self-contained HTML report (open in a browser)
//	report.txt       plain-text report (what gpuprof report prints)
package export

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gpuprof/analysis"
	"gpuprof/profile"
	"gpuprof/viewer-export/diff"
	"gpuprof/viewer-export/hpctoolkit"
	"gpuprof/viewer-export/html"
	jsonexport "gpuprof/viewer-export/json"
	"gpuprof/viewer-export/pprof"
	"gpuprof/viewer-export/text"
)

// File names WriteAll uses inside its directory.
const (
	DatabaseDir = "database"
	PprofFile   = "profile.pb.gz"
	JSONFile    = "profile.json"
	HTMLFile    = "report.html"
	TextFile    = "report.txt"
)

// Options tune WriteAll.
type Options struct {
	// Baseline, if set, is compared with the profile in the HTML report.
	Baseline *profile.Profile
	// ExpectedRanks is the job's rank count as launched (0: unknown).
	ExpectedRanks int
	// AdviceNote, when set, says why there is no advice (the report
	// shows it in place of the advice).
	AdviceNote string
}

// WriteAll writes the HPCToolkit database, the pprof profile, the JSON
// document and the HTML and text reports of p and its advice into dir
// (created if needed).
func WriteAll(dir string, p *profile.Profile, advice []analysis.Advice) error {
	return WriteAllOptions(dir, p, advice, Options{})
}

// WriteAllOptions is WriteAll with options. It writes every file it can
// and reports all failures together.
func WriteAllOptions(dir string, p *profile.Profile, advice []analysis.Advice, o Options) error {
	if p == nil {
		return fmt.Errorf("export: no profile")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	hopt := html.Options{AdviceNote: o.AdviceNote}
	if o.Baseline != nil {
		hopt.Diff = diff.Compare(o.Baseline, p)
	}
	steps := []struct {
		name  string
		write func(path string) error
	}{
		{DatabaseDir, func(path string) error { return hpctoolkit.Write(path, p) }},
		{PprofFile, func(path string) error { return pprof.WriteFile(path, p) }},
		{JSONFile, func(path string) error { return jsonexport.WriteFile(path, p, advice) }},
		{HTMLFile, func(path string) error { return html.WriteFile(path, p, advice, hopt) }},
		{TextFile, func(path string) error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			if err := text.Write(f, p, advice, text.Options{ExpectedRanks: o.ExpectedRanks, AdviceNote: o.AdviceNote}); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}},
	}
	var errs []error
	for _, s := range steps {
		if err := s.write(filepath.Join(dir, s.name)); err != nil {
			errs = append(errs, fmt.Errorf("export %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}
