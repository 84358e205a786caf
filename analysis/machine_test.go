package analysis

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// machineLog reads the MACHINE lines of a log of testdata/cuda/machine.cu:
// per line, its key=value fields.
func machineLog(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 || fs[0] != "MACHINE" {
			continue
		}
		kv := map[string]string{}
		for _, f := range fs[1:] {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		out = append(out, kv)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func num(t *testing.T, kv map[string]string, k string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(kv[k], 64)
	if err != nil {
		t.Fatalf("probe %s: field %s: %v", kv["probe"], k, err)
	}
	return v
}

// The H100's measured memory system is what its machine log says, not a
// number tuned by hand.
func TestH100MemoryMatchesMachineLog(t *testing.T) {
	var want MemorySpec
	sms, clock := 0.0, 0.0
	for _, kv := range machineLog(t, "../testdata/machine/h100.log") {
		switch kv["probe"] {
		case "device":
			sms, clock = num(t, kv, "sms"), num(t, kv, "sm_clock_khz")/1e6
		case "dispatch":
			want.DispatchNs = num(t, kv, "ns_per_block_per_sm")
		case "loaded":
			// One line per warp, two warps per SM and more (one warp per SM
			// stepped faster than the unloaded latency at two: not a point
			// of the curve a kernel's blocks run on).
			if num(t, kv, "lines_per_warp") == 1 && num(t, kv, "warps_per_sm") >= 2 {
				want.Loaded = append(want.Loaded, LatencyPoint{num(t, kv, "gb_per_s"), num(t, kv, "ns_per_step")})
			}
		case "stream":
			if kv["kind"] == "read" {
				want.StreamGBs = num(t, kv, "gb_per_s")
			}
		}
	}
	g := H100
	if int(sms) != g.SMs || clock != g.ClockGHz {
		t.Errorf("log: %v SMs at %v GHz; spec %d at %v", sms, clock, g.SMs, g.ClockGHz)
	}
	m := g.Memory
	if m.DispatchNs != want.DispatchNs || m.StreamGBs != want.StreamGBs || len(m.Loaded) != len(want.Loaded) {
		t.Fatalf("spec %+v, log %+v", m, want)
	}
	for i := range m.Loaded {
		if m.Loaded[i] != want.Loaded[i] {
			t.Errorf("loaded point %d: spec %+v, log %+v", i, m.Loaded[i], want.Loaded[i])
		}
		if i > 0 && m.Loaded[i].GBs <= m.Loaded[i-1].GBs {
			t.Errorf("loaded points not ascending in bandwidth at %d", i)
		}
	}
}

// The block-lifetime floor against the one-shot probes of the same log,
// which the spec does not use: 2^26 threads in blocks of 256, a load of
// load_bytes and a store of store_bytes per thread (a chain of one round
// trip, or two when the store waits for the load). The floor should come
// within 12% of each (docs/machine.md lists them).
func TestBlockFloorAgainstOneShotProbes(t *testing.T) {
	n := 0
	for _, kv := range machineLog(t, "../testdata/machine/h100.log") {
		if kv["probe"] != "oneshot" {
			continue
		}
		lb, sb, us := num(t, kv, "load_bytes"), num(t, kv, "store_bytes"), num(t, kv, "us")
		chain := 0.0
		for _, b := range []float64{lb, sb} {
			if b > 0 {
				chain++
			}
		}
		got, gbs, lat := blockFloor(H100, 262144, 8, chain, (lb+sb)*(1<<26))
		off := (got/1000 - us) / us
		t.Logf("%-14s chain %.0f: floor %6.1f µs, measured %6.1f µs (%+5.1f%%), at %4.0f GB/s, latency %3.0f ns", kv["kernel"], chain, got/1000, us, 100*off, gbs, lat)
		if off > 0.12 || off < -0.12 {
			t.Errorf("%s: floor %.1f µs, measured %.1f µs", kv["kernel"], got/1000, us)
		}
		n++
	}
	if n < 12 {
		t.Fatalf("%d one-shot probes in the log, want 12", n)
	}
}
