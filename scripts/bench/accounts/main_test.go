package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden file")

// The committed H100 logs of the overhead tables in docs/overhead.md give
// the committed account tables.
func TestH100Accounts(t *testing.T) {
	for _, d := range h100Runs {
		t.Run(d, func(t *testing.T) { checkAccounts(t, filepath.Join("../../../testdata/overhead", d)) })
	}
}

// h100Runs are the committed runs, in order.
var h100Runs = []string{"h100-wire2", "h100-staged", "h100-calls", "h100-lanes", "h100-reuse-blocks", "h100-continuous",
	"h100-converters", "h100-device-records", "h100-slim-patches", "h100-wire-lanes", "h100-batches", "h100-spatial-sampling", "h100-lanes-nice", "h100-nonblocking", "h100-writev"}

// since says whether the run in dir came at or after the run named first.
func since(dir, first string) bool {
	return slices.Index(h100Runs, filepath.Base(dir)) >= slices.Index(h100Runs, first)
}

func checkAccounts(t *testing.T, dir string) {
	ps, err := Load(dir, "redundancy")
	if err != nil {
		t.Fatal(err)
	}
	// The tenth run added the two launch-bound programs.
	programs := 12
	if since(dir, "h100-continuous") {
		programs = 14
	}
	if len(ps) != programs {
		t.Fatalf("%d programs, want the %d test programs", len(ps), programs)
	}
	for _, p := range ps {
		m := p.Median()
		if len(p.Runs) != 3 || !m.HasLibrary || !m.HasCollector {
			t.Errorf("%s: %d runs, library account %v, collector account %v", p.Name, len(p.Runs), m.HasLibrary, m.HasCollector)
		}
	}
	// loop_reload's middle figures, read by hand from its three logs.
	for _, p := range ps {
		if p.Name == "loop_reload" && filepath.Base(dir) == "h100-wire2" {
			m := p.Median()
			if m.MBWritten != 1922.2 || m.Records != 18311112 || m.BarrierS != 4.247 {
				t.Errorf("loop_reload medians: %+v", m)
			}
		}
		if p.Name == "loop_reload" && filepath.Base(dir) == "h100-staged" {
			if m := p.Median(); m.Records != 18319240 || m.BarrierS != 4.439 {
				t.Errorf("loop_reload medians: %+v", m)
			}
		}
		// The run with the callback account and the analysis' tail.
		if since(dir, "h100-calls") {
			if m := p.Median(); !m.HasCalls || !m.HasTail || m.AliveS <= 0 {
				t.Errorf("%s: no callback account or tail: %+v", p.Name, m)
			}
		}
	}
	var b bytes.Buffer
	Table(&b, ps)
	CallTable(&b, ps)
	golden := filepath.Join(dir, "accounts.md")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("table differs from %s:\n%s", golden, b.String())
	}
}

func TestParse(t *testing.T) {
	a, err := Parse(strings.NewReader("noise\n" +
		"[gpuprof 1] time: 2 trace buffers drained (10 records) in 1.500 s while the GPU waited; producers waited 0.250 s for queue room (1 times); writer 2.000 s in write for 12.5 MB\n" +
		`time=x level=DEBUG msg="rank 0: stream 1: analysed 42 access records in 1m2.5s: workers busy 850ms (16 workers, 1 records/s per busy core), analysis loop waited 1s (full worker queues 0s, barriers 3µs, items 0s), socket reader held up 0s; 1 barriers, 0 early"` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Account{Records: 42, MBWritten: 12.5, DrainS: 1.5, QueueWaitS: 0.25, WriterS: 2, StreamS: 62.5, BusyS: 0.85, BarrierS: 3e-6,
		HasLibrary: true, HasCollector: true}
	if a != want {
		t.Errorf("got %+v\nwant %+v", a, want)
	}
	// Newer libraries add how long the exit waited for the writer.
	a, err = Parse(strings.NewReader("[gpuprof 1] time: 2 trace buffers drained (10 records) in 1.500 s while the GPU waited; producers waited 0.250 s for queue room (1 times); writer 2.000 s in write for 12.5 MB; drains took 0.100 s; exit waited 0.375 s for the writer (64.0 MB queued)\n"))
	if err != nil || !a.HasExit || a.ExitS != 0.375 || a.WriterS != 2 {
		t.Errorf("exit wait: got %+v, %v; want 0.375 s", a, err)
	}
	// The collector's line as it is now written, with the resolving time.
	a, err = Parse(strings.NewReader(`msg="rank 0: stream 1: analysed 7 access records in 2s: workers busy 3s (16 workers, 1 records/s per busy core), ` +
		`analysis loop waited 1s (full worker queues 0s, barriers 1.5s of which resolving 250ms, items 0s), socket reader held up 4s; 3 barriers, 0 early"`))
	if err != nil || !a.HasResolve || a.ResolveS != 0.25 || a.BarrierS != 1.5 || a.ReaderHeldUpS != 4 {
		t.Errorf("resolve split: %+v %v", a, err)
	}
	// The library's callback account and the analysis' tail.
	a, err = Parse(strings.NewReader("[gpuprof 9] callbacks: module loads 0.120 s (1), re-patch 0.300 s (20), unpatch 0.250 s (21), " +
		"launch begin 0.800 s (202), traced launch end 1.500 s (21), untraced launch end 0.400 s (181); library alive 3.250 s\n" +
		`msg="analysed 7 access records in 2s: workers busy 3s (16 workers, 1 records/s per busy core), analysis loop waited 1s (full worker queues 0s, barriers 1.5s of which resolving 250ms, items 0s), socket reader held up 4s; 3 barriers, 0 early; memory workers busy 1s; END read at 1.2s, the analysis finished 800ms after it"`))
	if err != nil || !a.HasCalls || a.CallS != [len(CallNames)]float64{0.12, 0.3, 0.25, 0.8, 1.5, 0.4} || a.AliveS != 3.25 || !a.HasTail || a.TailS != 0.8 {
		t.Errorf("callbacks and tail: %+v %v", a, err)
	}
	var b bytes.Buffer
	CallTable(&b, []Program{{Name: "p", Runs: []Account{a}}})
	if !strings.Contains(b.String(), "| p | 3.25 | 0.12 | 0.30 | 0.25 | 0.80 | 1.50 | 0.40 | 0.80 |") {
		t.Errorf("call table:\n%s", b.String())
	}
	// A log without accounts has none; a directory without logs is an error.
	if a, err := Parse(strings.NewReader("nothing here\n")); err != nil || a.HasLibrary || a.HasCollector {
		t.Errorf("empty log: %+v %v", a, err)
	}
	if _, err := Load(t.TempDir(), "redundancy"); err == nil || !strings.Contains(err.Error(), "no *.redundancy.RUN.log") {
		t.Errorf("empty directory: %v", err)
	}
	// A malformed duration names the line.
	if _, err := Parse(strings.NewReader(`analysed 1 access records in 1q: workers busy 1s (x barriers 1s, items 0s), socket reader held up 0s;`)); err == nil || !strings.Contains(err.Error(), "collector account") {
		t.Errorf("bad duration: %v", err)
	}
}
