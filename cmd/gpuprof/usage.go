package main

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"gpuprof/reducer"
)

// runCost is run's closing line on what the job cost gpuprof itself: the
// reduction (batches merged, their bytes, the tail from the last rank's
// done item to the final profile) and this process's CPU time and peak
// memory (getrusage RUSAGE_SELF). The process holds the embedded broker
// (when no --nats was given), the reduction tree, the analysis and the
// exports; the collectors are processes of their own and not counted.
// docs/scale.md's tables take these figures from run's log.
func runCost(stats *reducer.TreeStats, ranks int, embedded bool) string {
	var parts []string
	if stats != nil {
		perRank := 0.0
		if ranks > 0 {
			perRank = float64(stats.BytesIn) / float64(ranks) / 1e3
		}
		parts = append(parts, fmt.Sprintf("merged %d batches (%.1f MB) from %d ranks (%.1f KB per rank), last done to final profile %.3fs",
			stats.ItemsMerged, float64(stats.BytesIn)/1e6, ranks, perRank, stats.Tail.Seconds()))
	}
	what := "reduction tree, analysis and exports"
	if embedded {
		what = "embedded broker, " + what
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		parts = append(parts, fmt.Sprintf("own CPU and memory unknown (%v)", err))
	} else {
		user := time.Duration(ru.Utime.Nano())
		sys := time.Duration(ru.Stime.Nano())
		// Maxrss is in KiB on Linux.
		parts = append(parts, fmt.Sprintf("gpuprof run's own process (%s): CPU %.2fs (user %.2fs + sys %.2fs), peak RSS %.1f MiB",
			what, (user+sys).Seconds(), user.Seconds(), sys.Seconds(), float64(ru.Maxrss)/1024))
	}
	return "gpuprof: " + strings.Join(parts, "; ")
}
