package main

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"gpuprof/reducer"
)

// costLine matches run's cost line as docs/scale.md's tables read it.
var costLine = regexp.MustCompile(`merged (\d+) batches \(([\d.]+) MB\) from (\d+) ranks \(([\d.]+) KB per rank\), last done to final profile ([\d.]+)s; gpuprof run's own process \(embedded broker, reduction tree, analysis and exports\): CPU ([\d.]+)s \(user ([\d.]+)s \+ sys ([\d.]+)s\), peak RSS ([\d.]+) MiB`)

func TestRunCost(t *testing.T) {
	// Burn a little CPU so the process's own time is above zero.
	x := 0
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; x++ {
	}
	l := runCost(&reducer.TreeStats{ItemsMerged: 138, BytesIn: 123_456, Tail: 6 * time.Millisecond}, 64, true)
	m := costLine.FindStringSubmatch(l)
	if m == nil {
		t.Fatalf("cost line %q", l)
	}
	cpu, _ := strconv.ParseFloat(m[6], 64)
	rss, _ := strconv.ParseFloat(m[9], 64)
	if m[1] != "138" || m[2] != "0.1" || m[3] != "64" || m[4] != "1.9" || m[5] != "0.006" || cpu <= 0 || rss <= 1 {
		t.Errorf("cost line %q (%d loops)", l, x)
	}
	if l := runCost(nil, 4, false); regexp.MustCompile(`merged|embedded`).MatchString(l) || !regexp.MustCompile(`^gpuprof: gpuprof run's own process \(reduction tree, analysis and exports\): CPU`).MatchString(l) {
		t.Errorf("without the tree's stats or an embedded broker: %q", l)
	}
}
