package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gpuprof/collector/symbolize"
	"gpuprof/collector/synth"
)

func init() {
	register("demo", "no GPU needed: replay captured H100 traces through the whole pipeline", cmdDemo)
}

// demoManifest lists the demo's rank streams: one line per rank,
// "FILE[,FILE...] [LABEL]" (several files are measurement passes of one
// rank), paths relative to the manifest; LABEL says what the streams are.
const demoManifest = "demo-ranks.txt"

func cmdDemo(args []string) error {
	fs := newFlags("demo", "[flags]", `
Runs the main job without a GPU: an embedded NATS server, one real
collector process per rank replaying a raw stream captured on an H100 (the
MPI test program's ranks, and per-rank variants of them, labelled as such),
the reduction tree (fan-in 4, so it has more than one level), the advisory
analysis, and every export, written to -o. If the captures are missing it
falls back to generated streams, and the report says "synthetic".`)
	cfg := jobConfig{Stdout: os.Stdout}
	fs.StringVar(&cfg.Out, "o", "gpuprof-demo", "output directory (must not exist or be empty, unless --force)")
	force := fs.Bool("force", false, "replace gpuprof's outputs in an existing output directory")
	fs.IntVar(&cfg.FanIn, "fan-in", 4, "reduction tree fan-in")
	captures := fs.String("captures", "", "captures directory (default testdata/captures of the source tree)")
	synthetic := fs.Bool("synthetic", false, "use generated streams even if captures exist")
	ranks := fs.Int("ranks", 8, "ranks (generated streams only)")
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if err := checkOutDir(cfg.Out, *force); err != nil {
		return err
	}
	if *captures == "" {
		*captures = findTestdata("captures")
	}
	var files, labels []string
	var sassDirs []string
	if !*synthetic && *captures != "" {
		var err error
		files, labels, err = readManifest(filepath.Join(*captures, demoManifest))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if s := findTestdata("sass"); s != "" {
			sassDirs = append(sassDirs, s)
		}
		// The captures' host binaries are not here: their symbol tables
		// (gpuprof symtab, made where they were captured) name the frames.
		if syms, _ := filepath.Glob(filepath.Join(*captures, "*"+symbolize.TableExt)); len(syms) > 0 {
			cfg.Collect = append(cfg.Collect, "--host-symbols", absList(*captures))
		}
	}
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "demo: no captures found; replaying generated (synthetic) streams")
		dir := filepath.Join(cfg.Out, "synthetic-streams")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		var err error
		files, err = synth.WriteFiles(dir, synth.Options{Ranks: *ranks, Seed: 1, Imbalance: 1})
		if err != nil {
			return err
		}
		if s := findTestdata("sass"); s != "" {
			sassDirs = append(sassDirs, filepath.Join(s, "probe"))
		}
	}
	cfg.Spawn = files
	cfg.RankLabels = map[int32]string{}
	for r, l := range labels {
		if l != "" {
			cfg.RankLabels[int32(r)] = l
		}
	}
	cfg.SASS = absList(strings.Join(sassDirs, ","))
	if cfg.SASS != "" {
		cfg.Collect = append(cfg.Collect, "--sass", cfg.SASS)
	}
	return runJob(cfg)
}

// findTestdata finds testdata/<name> of the source tree: from the working
// directory up, then beside the executable.
func findTestdata(name string) string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, d := range starts {
		for {
			p := filepath.Join(d, "testdata", name)
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				return p
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return ""
}

func readManifest(path string) (files, labels []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// FILE[,FILE...] [LABEL]: several files are passes of one rank.
		list, label, _ := strings.Cut(line, " ")
		var ps []string
		for _, file := range strings.Split(list, ",") {
			p := filepath.Join(filepath.Dir(path), file)
			if _, err := os.Stat(p); err != nil {
				return nil, nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			ps = append(ps, p)
		}
		files = append(files, strings.Join(ps, ","))
		labels = append(labels, strings.TrimSpace(label))
	}
	return files, labels, sc.Err()
}
