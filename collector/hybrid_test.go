package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"gpuprof/collector/online"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// sassKernelIs is the stand-in application's check of the variable the
// collector gives the injection library for Options.HybridKernel: want is
// its value, "-" that it is not set. It says what it saw on stderr.
func sassKernelIs(want string) bool {
	got, set := os.LookupEnv("GPUPROF_SASS_KERNEL")
	if want == "-" && !set || want != "-" && set && got == want {
		return true
	}
	fmt.Fprintf(os.Stderr, "app: GPUPROF_SASS_KERNEL=%q (set: %v), want %q\n", got, set, want)
	return false
}

// Options.HybridKernel (collect --hybrid-kernel) reaches the application's
// environment as GPUPROF_SASS_KERNEL, which the injection library's hybrid
// pass reads; without it the variable is not set.
func TestHybridKernelEnvironment(t *testing.T) {
	if v, ok := os.LookupEnv("GPUPROF_SASS_KERNEL"); ok {
		t.Setenv("GPUPROF_SASS_KERNEL", v) // restored after the test
		os.Unsetenv("GPUPROF_SASS_KERNEL")
	}
	for _, c := range []struct{ kernel, want string }{
		{"accumulators_in_registers", "accumulators_in_registers"},
		{"", "-"},
	} {
		pub := &items{}
		o := appOptions(t, pub)
		o.Rank = 0
		o.Mode = "hybrid"
		o.HybridKernel = c.kernel
		var stderr bytes.Buffer
		o.Stdin, o.Stdout, o.Stderr = bytes.NewReader(nil), io.Discard, &stderr
		t.Setenv("GPUPROF_TEST_SASS_KERNEL", c.want)
		col, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := col.Run(context.Background()); ExitCode(err) != 3 {
			t.Errorf("HybridKernel %q: error %v, want the application's status 3; application: %s", c.kernel, err, stderr.String())
		}
	}
}

// A hybrid stream may carry a context's instruction counts in more than
// one read with launch id 0 (the removed GPUPROF_SASS_EACH experiment read
// them at each new function's first launch, then at the context's end;
// docs/inject.md). The collector adds the reads up: replayed in two reads,
// a stream gives every instruction the count it gets from one read at the
// end.
func TestHybridCountsReadSeveralTimesAddUp(t *testing.T) {
	var src bytes.Buffer
	if _, err := synth.WriteRank(&src, 0, synth.Options{Seed: 4, Mode: rawstream.ModeHybrid}); err != nil {
		t.Fatal(err)
	}
	var frames []rawstream.Frame
	d := rawstream.NewDecoder(&src)
	for {
		f, err := d.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	dir := t.TempDir()
	once := readsAt(t, frames, filepath.Join(dir, "once.gpraw"), -1)
	twice := readsAt(t, frames, filepath.Join(dir, "twice.gpraw"), len(frames)/2)
	if once.reads != 1 || twice.reads != 2 || twice.executed != once.executed || once.executed == 0 || twice.again == 0 {
		t.Fatalf("streams: %d read(s) of %d executions and %d of %d, %d instructions in both reads",
			once.reads, once.executed, twice.reads, twice.executed, twice.again)
	}
	replay := func(path string) map[string]uint64 {
		pub := &items{}
		if err := Collect(context.Background(), Options{Job: "job", Rank: 0, Replay: path, Publisher: pub, BatchRecords: 1,
			Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}}); err != nil {
			t.Fatal(err)
		}
		return executedByInstruction(pub.merged(t, 0))
	}
	one, two := replay(once.path), replay(twice.path)
	var total uint64
	for k, n := range one {
		total += n
		if two[k] != n {
			t.Errorf("%s: %d executions from two reads, %d from one", k, two[k], n)
		}
	}
	if len(two) != len(one) || total != once.executed {
		t.Errorf("%d instructions counted from two reads, %d from one; %d executions in the profile, %d in the stream",
			len(two), len(one), total, once.executed)
	}
}

type rewritten struct {
	path     string
	reads    int
	executed uint64
	again    int // instructions in a read that an earlier read had too
}

// readsAt writes frames to path with their instruction counts read as
// the hybrid pass reads them at a context's end: summed per instruction
// over launches, under launch id 0, in one INSTR_COUNTS before END, and,
// if at >= 0, in a first one before frame at holding the counts so far.
func readsAt(t *testing.T, frames []rawstream.Frame, path string, at int) rewritten {
	t.Helper()
	type key struct{ fn, off uint32 }
	r := rewritten{path: path}
	var order []key
	sum := map[key]*rawstream.InstrCount{}
	read1 := map[key]bool{}
	var buf bytes.Buffer
	w := rawstream.NewWriter(&buf)
	write := func(f rawstream.Frame) {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	read := func() {
		if len(order) == 0 {
			return
		}
		ic := &rawstream.InstrCounts{LaunchID: 0}
		for _, k := range order {
			ic.Counts = append(ic.Counts, *sum[k])
			if read1[k] {
				r.again++
			}
			read1[k] = true
		}
		write(ic)
		r.reads++
		order, sum = nil, map[key]*rawstream.InstrCount{}
	}
	for i, f := range frames {
		if i == at {
			read()
		}
		switch f := f.(type) {
		case *rawstream.InstrCounts:
			for _, c := range f.Counts {
				k := key{c.FunctionID, c.Offset}
				if sum[k] == nil {
					sum[k] = &rawstream.InstrCount{FunctionID: c.FunctionID, Offset: c.Offset}
					order = append(order, k)
				}
				sum[k].Executed += c.Executed
				sum[k].ThreadExecuted += c.ThreadExecuted
				r.executed += c.Executed
			}
			continue
		case *rawstream.End:
			read()
		}
		write(f)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// executedByInstruction sums inst.executed per instruction over its
// calling contexts, keyed by kernel and offset.
func executedByInstruction(p *profile.Profile) map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range p.Nodes {
		v := n.Metrics.Get(profile.InstExecuted)
		if v == 0 || n.Frame.Kind != profile.KindInstruction {
			continue
		}
		fn := "?"
		for id := n.Parent; id != profile.RootID; id = p.Nodes[id].Parent {
			if k := p.Nodes[id].Frame; k.Kind == profile.KindKernel {
				fn = k.Function
				break
			}
		}
		out[fmt.Sprintf("%s+%#x", fn, n.Frame.Offset)] += v
	}
	return out
}
