package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/symbolize"
)

func init() {
	register("symtab", "extract the host symbols a capture needs, for replaying it elsewhere", cmdSymtab)
}

func cmdSymtab(args []string) error {
	fs := newFlags("symtab", "-o FILE.syms STREAM...", `
Reads recorded raw streams (GPUPROF_RECORD, collect --record) and, for
every host module they name that is on this machine as it was when
captured (same path and build id), writes the function symbols around the
streams' host return addresses and the source frames at them to one symbol
table (a small text file, format in collector/symbolize/table.go). Run it
where the streams were captured, beside their binaries; 'gpuprof collect
--host-symbols' (and 'gpuprof demo', for the *.syms beside its captures)
then resolves the host frames of the replayed streams anywhere.`)
	out := fs.String("o", "", "the table file to write (.syms)")
	if err := parseAll(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		printUsage(fs)
		return errors.New("want -o FILE and at least one stream")
	}
	tabs := symbolize.NewTables()
	missing := map[string]bool{}
	for _, f := range fs.Args() {
		if err := symtabStream(tabs, f, missing); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		var ms []string
		for m := range missing {
			ms = append(ms, m)
		}
		sort.Strings(ms)
		fmt.Fprintf(os.Stderr, "gpuprof symtab: not on this machine as captured (left out): %s\n", strings.Join(ms, ", "))
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "%s\n# from %s\n", symbolize.TableHeader, strings.Join(baseNames(fs.Args()), " "))
	var body strings.Builder
	if _, err := tabs.WriteTo(&body); err != nil {
		f.Close()
		return err
	}
	// WriteTo starts with the header, already written above the comment.
	w.WriteString(strings.TrimPrefix(body.String(), symbolize.TableHeader+"\n"))
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

// symtabStream adds the host addresses of one stream to tabs; modules
// whose file is missing or differs are named in missing.
func symtabStream(tabs *symbolize.Tables, path string, missing map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	d := rawstream.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	var mods []*rawstream.HostModule // this process's mappings; the latest wins
	add := func(stack []uint64) {
		for _, ret := range stack {
			var m *rawstream.HostModule
			for i := len(mods) - 1; i >= 0; i-- {
				if mods[i].Contains(ret) {
					m = mods[i]
					break
				}
			}
			if m == nil || dropped(m.Path) {
				continue
			}
			if !tabs.AddAddress(m, ret) {
				missing[m.Path] = true
			}
		}
	}
	for {
		fr, err := d.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			// A capture cut short still names the addresses read so far.
			fmt.Fprintf(os.Stderr, "gpuprof symtab: %s: %v (the frames before it are used)\n", path, err)
			return nil
		}
		switch fr := fr.(type) {
		case *rawstream.HostModule:
			mods = append(mods, fr)
		case *rawstream.Launch:
			add(fr.Host)
		case *rawstream.Alloc:
			add(fr.Host)
		}
	}
}

// dropped reports modules whose frames the collector drops whatever their
// symbols (the CUDA driver and runtime, the injection library).
func dropped(path string) bool {
	base := filepath.Base(path)
	for _, p := range symbolize.DefaultDropModules {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}
