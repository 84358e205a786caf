// Command accounts turns the logs the overhead bench keeps of each live
// run (scripts/bench/overhead with OVERHEAD_LOGS=DIR) into the table of
// where the time went: the injection library's account at exit
// (GPUPROF_STATS: trace buffers drained while the GPU waited, waits for
// output-queue room, time in write, bytes written) and the collector's
// (records, stream time, workers' busy time, waits at barriers, reader
// held up). Each column is the median over a program's runs.
//
//	accounts [-mode redundancy] DIR
//
// DIR holds PROG.MODE.RUN.log files. Programs are listed in the order of
// DIR/overhead.tsv when it exists, else by name.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Account is one run's figures; the Has fields say which of the two
// accounts the log held.
type Account struct {
	Records                                 float64 // access records analysed
	MBWritten, DrainS, QueueWaitS, WriterS  float64 // the library's
	StreamS, BusyS, BarrierS, ReaderHeldUpS float64 // the collector's
	ResolveS                                float64 // of BarrierS, resolving candidates
	HasLibrary, HasCollector, HasResolve    bool
	// The library's callbacks by what they did (CallNames), its lifetime,
	// and the analysis' tail after the stream's END (newer logs only).
	CallS             [len(CallNames)]float64
	AliveS, TailS     float64
	HasCalls, HasTail bool
	// ExitS is how long the application's exit waited for the library's
	// writer to send what was queued (newer logs only).
	ExitS   float64
	HasExit bool
}

// CallNames are the parts of the library's callback account, in the order
// its line gives them ("callbacks: NAME S s (N), ...; library alive S s").
var CallNames = [...]string{"module loads", "re-patch", "unpatch", "launch begin", "traced launch end", "untraced launch end"}

// callPattern is the callback line's regexp, built from CallNames.
func callPattern() string {
	parts := make([]string, len(CallNames))
	for i, n := range CallNames {
		parts[i] = regexp.QuoteMeta(n) + ` ([\d.]+) s \(\d+\)`
	}
	return `callbacks: ` + strings.Join(parts, ", ") + `; library alive ([\d.]+) s`
}

var (
	libRe = regexp.MustCompile(`time: \d+ trace buffers drained \(\d+ records\) in ([\d.]+) s while the GPU waited; ` +
		`producers waited ([\d.]+) s for queue room \(\d+ times\); writer ([\d.]+) s in write for ([\d.]+) MB`)
	callRe = regexp.MustCompile(callPattern())
	exitRe = regexp.MustCompile(`exit waited ([\d.]+) s for the writer`)
	tailRe = regexp.MustCompile(`END read at \S+, the analysis finished (\S+) after it`)
	colRe  = regexp.MustCompile(`analysed (\d+) access records in (\S+): workers busy (\S+) \(.*barriers (\S+)` +
		`(?: of which resolving (\S+))?, items \S+\), socket reader held up (\S+);`)
)

// Parse reads one run's log.
func Parse(r io.Reader) (Account, error) {
	var a Account
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := libRe.FindStringSubmatch(line); m != nil {
			f, err := floats(m[1:])
			if err != nil {
				return a, fmt.Errorf("library account %q: %w", line, err)
			}
			a.DrainS, a.QueueWaitS, a.WriterS, a.MBWritten = f[0], f[1], f[2], f[3]
			a.HasLibrary = true
		}
		if m := callRe.FindStringSubmatch(line); m != nil {
			f, err := floats(m[1:])
			if err != nil {
				return a, fmt.Errorf("callback account %q: %w", line, err)
			}
			copy(a.CallS[:], f)
			a.AliveS, a.HasCalls = f[len(f)-1], true
		}
		if m := exitRe.FindStringSubmatch(line); m != nil {
			f, err := floats(m[1:])
			if err != nil {
				return a, fmt.Errorf("exit wait %q: %w", line, err)
			}
			a.ExitS, a.HasExit = f[0], true
		}
		if m := tailRe.FindStringSubmatch(line); m != nil {
			d, err := durations(m[1:2])
			if err != nil {
				return a, fmt.Errorf("analysis tail %q: %w", line, err)
			}
			a.TailS, a.HasTail = d[0], true
		}
		if m := colRe.FindStringSubmatch(line); m != nil {
			n, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				return a, fmt.Errorf("collector account: records %q: %w", m[1], err)
			}
			d, err := durations([]string{m[2], m[3], m[4], m[6]})
			if err != nil {
				return a, fmt.Errorf("collector account %q: %w", line, err)
			}
			a.Records = n
			a.StreamS, a.BusyS, a.BarrierS, a.ReaderHeldUpS = d[0], d[1], d[2], d[3]
			if m[5] != "" { // logs before the split have no resolve time
				r, err := durations(m[5:6])
				if err != nil {
					return a, fmt.Errorf("collector account %q: %w", line, err)
				}
				a.ResolveS, a.HasResolve = r[0], true
			}
			a.HasCollector = true
		}
	}
	return a, sc.Err()
}

func floats(ss []string) ([]float64, error) {
	out := make([]float64, len(ss))
	for i, s := range ss {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

// durations parses Go durations (850ms, 1m25.368s) into seconds.
func durations(ss []string) ([]float64, error) {
	out := make([]float64, len(ss))
	for i, s := range ss {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, err
		}
		out[i] = d.Seconds()
	}
	return out, nil
}

// Program is one program's accounts over its runs.
type Program struct {
	Name string
	Runs []Account
}

// Median is the median of each field over the runs that have it.
func (p Program) Median() Account {
	var m Account
	pick := func(has func(Account) bool, get func(Account) float64) float64 {
		var xs []float64
		for _, r := range p.Runs {
			if has(r) {
				xs = append(xs, get(r))
			}
		}
		return median(xs)
	}
	lib := func(a Account) bool { return a.HasLibrary }
	col := func(a Account) bool { return a.HasCollector }
	res := func(a Account) bool { return a.HasResolve }
	calls := func(a Account) bool { return a.HasCalls }
	tail := func(a Account) bool { return a.HasTail }
	for k := range m.CallS {
		m.CallS[k] = pick(calls, func(a Account) float64 { return a.CallS[k] })
	}
	m.AliveS = pick(calls, func(a Account) float64 { return a.AliveS })
	m.TailS = pick(tail, func(a Account) float64 { return a.TailS })
	m.ExitS = pick(func(a Account) bool { return a.HasExit }, func(a Account) float64 { return a.ExitS })
	for _, r := range p.Runs {
		m.HasExit = m.HasExit || r.HasExit
		m.HasCalls = m.HasCalls || r.HasCalls
		m.HasTail = m.HasTail || r.HasTail
		m.HasLibrary = m.HasLibrary || r.HasLibrary
		m.HasCollector = m.HasCollector || r.HasCollector
		m.HasResolve = m.HasResolve || r.HasResolve
	}
	m.ResolveS = pick(res, func(a Account) float64 { return a.ResolveS })
	m.MBWritten = pick(lib, func(a Account) float64 { return a.MBWritten })
	m.DrainS = pick(lib, func(a Account) float64 { return a.DrainS })
	m.QueueWaitS = pick(lib, func(a Account) float64 { return a.QueueWaitS })
	m.WriterS = pick(lib, func(a Account) float64 { return a.WriterS })
	m.Records = pick(col, func(a Account) float64 { return a.Records })
	m.StreamS = pick(col, func(a Account) float64 { return a.StreamS })
	m.BusyS = pick(col, func(a Account) float64 { return a.BusyS })
	m.BarrierS = pick(col, func(a Account) float64 { return a.BarrierS })
	m.ReaderHeldUpS = pick(col, func(a Account) float64 { return a.ReaderHeldUpS })
	return m
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Load reads DIR's logs of one mode.
func Load(dir, mode string) ([]Program, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*."+mode+".*.log"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.%s.RUN.log files", dir, mode)
	}
	byName := map[string]*Program{}
	for _, f := range files {
		name := strings.SplitN(filepath.Base(f), ".", 2)[0]
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		a, err := Parse(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if byName[name] == nil {
			byName[name] = &Program{Name: name}
		}
		byName[name].Runs = append(byName[name].Runs, a)
	}
	order := tsvOrder(filepath.Join(dir, "overhead.tsv"))
	var out []Program
	for _, n := range order {
		if p := byName[n]; p != nil {
			out = append(out, *p)
			delete(byName, n)
		}
	}
	var rest []string
	for n := range byName {
		rest = append(rest, n)
	}
	sort.Strings(rest)
	for _, n := range rest {
		out = append(out, *byName[n])
	}
	return out, nil
}

// tsvOrder is the programs' order in the overhead table, if there is one.
func tsvOrder(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, "\t", 2)
		if i == 0 || f[0] == "" || seen[f[0]] {
			continue
		}
		seen[f[0]] = true
		out = append(out, f[0])
	}
	return out
}

// Table writes the markdown table.
func Table(w io.Writer, ps []Program) {
	fmt.Fprintln(w, "| program | runs | records (M) | MB written | GPU waited for drains s | producers waited for queue room s | library writer in `write` s | collector stream s | workers busy s | analysis waited on barriers s | of it, resolving s | reader held up s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range ps {
		m := p.Median()
		recs, lib, col := "-", "| - | - | - | - ", "| - | - | - | - | - "
		if m.HasLibrary {
			lib = fmt.Sprintf("| %.0f | %.2f | %.2f | %.2f ", m.MBWritten, m.DrainS, m.QueueWaitS, m.WriterS)
		}
		if m.HasCollector {
			recs = fmt.Sprintf("%.2f", m.Records/1e6)
			resolve := "-"
			if m.HasResolve {
				resolve = fmt.Sprintf("%.2f", m.ResolveS)
			}
			col = fmt.Sprintf("| %.1f | %.1f | %.2f | %s | %.2f ", m.StreamS, m.BusyS, m.BarrierS, resolve, m.ReaderHeldUpS)
		}
		fmt.Fprintf(w, "| %s | %d | %s %s%s|\n", p.Name, len(p.Runs), recs, lib, col)
	}
}

// CallTable writes the table of the library's callbacks and the
// analysis' tail, for logs that have them (nothing otherwise).
func CallTable(w io.Writer, ps []Program) {
	found, exits := false, false
	for _, p := range ps {
		for _, r := range p.Runs {
			found = found || r.HasCalls || r.HasTail
			exits = exits || r.HasExit
		}
	}
	if !found {
		return
	}
	fmt.Fprint(w, "\n| program | library alive s |")
	for _, n := range CallNames {
		fmt.Fprintf(w, " %s s |", n)
	}
	cols := len(CallNames) + 1
	if exits {
		fmt.Fprint(w, " exit waited for the writer s |")
		cols++
	}
	fmt.Fprintln(w, " analysis after END s |")
	fmt.Fprintln(w, "|---|---:|"+strings.Repeat("---:|", cols))
	for _, p := range ps {
		m := p.Median()
		row := "| " + p.Name
		if m.HasCalls {
			row += fmt.Sprintf(" | %.2f", m.AliveS)
			for _, c := range m.CallS {
				row += fmt.Sprintf(" | %.2f", c)
			}
		} else {
			row += strings.Repeat(" | -", len(CallNames)+1)
		}
		if exits && m.HasExit {
			row += fmt.Sprintf(" | %.2f", m.ExitS)
		} else if exits {
			row += " | -"
		}
		if m.HasTail {
			row += fmt.Sprintf(" | %.2f |", m.TailS)
		} else {
			row += " | - |"
		}
		fmt.Fprintln(w, row)
	}
}

func main() {
	mode := flag.String("mode", "redundancy", "the runs' mode, as in the log names")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: accounts [-mode redundancy] DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ps, err := Load(flag.Arg(0), *mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "accounts:", err)
		os.Exit(1)
	}
	Table(os.Stdout, ps)
	CallTable(os.Stdout, ps)
}
