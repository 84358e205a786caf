package online

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

var probeSASS = []string{"../../testdata/sass/probe/k.sass.txt"}

// streamTotals sums what a stream says directly.
func streamTotals(t *testing.T, b []byte) (samples, executed uint64, byReason map[string]uint64) {
	d := rawstream.NewDecoder(bytes.NewReader(b))
	names := map[uint32]string{}
	byReason = map[string]uint64{}
	for {
		f, err := d.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *rawstream.StallReasons:
			for _, r := range f.Reasons {
				names[r.Index] = r.Name
			}
		case *rawstream.PCSamples:
			for _, pc := range f.PCs {
				for _, s := range pc.Stalls {
					samples += uint64(s.Samples)
					byReason[strings.TrimPrefix(names[s.Reason], "smsp__pcsamp_warps_issue_stalled_")] += uint64(s.Samples)
				}
			}
		case *rawstream.InstrCounts:
			for _, c := range f.Counts {
				executed += c.Executed
			}
		}
	}
}

func nodeSum(p *profile.Profile, m profile.MetricID) uint64 {
	var n uint64
	for _, nd := range p.Nodes {
		n += nd.Metrics.Get(m)
	}
	return n
}

func TestPCSamplingMode(t *testing.T) {
	b := synthStream(t, synth.Options{Seed: 3, Mode: rawstream.ModePCSampling}, 0)
	samples, _, byReason := streamTotals(t, b)
	p := analyse(t, b, 2, 5, &SASS{NVDisasm: "-", Files: probeSASS})
	if got := nodeSum(p, profile.InstSamples); got != samples || samples == 0 {
		t.Errorf("inst.samples %d, the stream has %d", got, samples)
	}
	for reason, n := range byReason {
		if got := nodeSum(p, profile.StallMetric(reason)); got != n {
			t.Errorf("stall.%s: %d, the stream has %d", reason, got, n)
		}
	}
	// The samples sit under the kernels' launch contexts, at instruction
	// nodes placed by the SASS structure: the helper's load under the
	// helper, stalled on long_scoreboard.
	found := false
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindInstruction && n.Frame.Offset == 0x5e0 {
			par := p.Nodes[p.Nodes[n.Parent].Parent]
			if par.Frame.Kind != profile.KindGPUFunction || par.Frame.Function != "$_Z6reloadPKfPfii$_Z6helperPKfi" {
				t.Errorf("0x5e0 placed under %v", par.Frame)
			}
			if n.Metrics.Get(profile.StallMetric("long_scoreboard")) == 0 {
				t.Errorf("0x5e0: no long_scoreboard samples: %v", n.Metrics)
			}
			found = true
		}
	}
	if !found {
		t.Error("no instruction node at 0x5e0")
	}
	if p.Ranks[3].Mode != "pcsampling" {
		t.Errorf("mode %q", p.Ranks[3].Mode)
	}
}

// Losses reach the rank's provenance and survive the profile encoding:
// records the library's host queue dropped, and PC samples the sampling
// hardware dropped, both from DROPPED frames.
func TestDroppedInProvenance(t *testing.T) {
	b := synthStream(t, synth.Options{Seed: 3, Mode: rawstream.ModePCSampling}, 0)
	frames, _, _ := decodeAll(t, b)
	var buf bytes.Buffer
	w := rawstream.NewWriter(&buf)
	for _, f := range frames {
		if _, end := f.(*rawstream.End); end {
			for _, x := range []rawstream.Frame{&rawstream.Dropped{Records: 3, Bytes: 100, PCSamples: 40}, &rawstream.Dropped{PCSamples: 2}} {
				if err := w.Write(x); err != nil {
					t.Fatal(err)
				}
			}
			f = &rawstream.End{ExitCode: f.(*rawstream.End).ExitCode}
		}
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	p := analyse(t, buf.Bytes(), 2, 5, &SASS{NVDisasm: "-", Files: probeSASS})
	ri := p.Ranks[3]
	if ri.HostDropped != 3 || ri.SamplesDropped != 42 {
		t.Fatalf("host dropped %d, PC samples dropped %d; want 3 and 42", ri.HostDropped, ri.SamplesDropped)
	}
	q, err := profile.Decode(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Ranks[3].SamplesDropped; got != 42 {
		t.Errorf("after encoding: %d PC samples dropped, want 42", got)
	}
	if !strings.Contains(q.String(), "pc_samples_dropped=42") {
		t.Errorf("the text rendering does not show the dropped samples")
	}
}

func TestHybridMode(t *testing.T) {
	b := synthStream(t, synth.Options{Seed: 4, Mode: rawstream.ModeHybrid}, 0)
	_, executed, _ := streamTotals(t, b)
	p := analyse(t, b, 1, 0, nil)
	if got := nodeSum(p, profile.InstExecuted); got != executed || executed == 0 {
		t.Errorf("inst.executed %d, the stream has %d", got, executed)
	}
	if nodeSum(p, InstThreadExecuted) != 32*executed {
		t.Errorf("inst.thread_executed %d", nodeSum(p, InstThreadExecuted))
	}
}

// With the probe's SASS, values are read as the program uses them: the
// float4 load of vec4 is four float32 units per lane, the short store one
// int16, the double store one float64; the atomic's line is inlined from
// the CUDA header.
func TestAccessKindsAndPlacement(t *testing.T) {
	b := synthStream(t, synth.Options{Seed: 5, BlockSampling: 2, KernelSampling: 1}, 0)
	p := analyse(t, b, 2, 0, &SASS{NVDisasm: "-", Files: probeSASS})
	type want struct {
		fn    string
		off   uint32
		kind  profile.ValueKind
		bits  uint8
		units uint64 // per lane
	}
	wants := []want{
		{"_Z4vec4PK6float4PS_iPs", 0xe0, profile.ValFloat, 32, 4},
		{"_Z4vec4PK6float4PS_iPs", 0x180, profile.ValInt, 16, 1},
		{"_Z4fillPdi", 0xd0, profile.ValFloat, 64, 1},
		{"_Z3shmPi", 0xa0, profile.ValInt, 32, 1},
	}
	for _, w := range wants {
		var st *profile.PCStat
		for k, s := range p.PCs {
			if f := p.Funcs[k.PC.Func]; f.Name == w.fn && k.PC.Offset == w.off {
				st = s
			}
		}
		if st == nil || st.Values == nil {
			t.Errorf("%s+%#x: no statistics", w.fn, w.off)
			continue
		}
		if st.Values.Kind != w.kind || st.Values.Bits != w.bits {
			t.Errorf("%s+%#x: values read as kind %d of %d bits, want %d of %d", w.fn, w.off, st.Values.Kind, st.Values.Bits, w.kind, w.bits)
		}
		if st.Accesses%w.units != 0 || st.Values.Total != st.Accesses {
			t.Errorf("%s+%#x: %d accesses, sketch total %d", w.fn, w.off, st.Accesses, st.Values.Total)
		}
	}
	// fill stores 3.0 everywhere: a single value, all but one redundant per launch.
	for k, s := range p.PCs {
		if f := p.Funcs[k.PC.Func]; f.Name == "_Z4fillPdi" {
			if len(s.Values.Top) != 1 || s.Values.Top[0].Value != 0x4008000000000000 {
				t.Errorf("fill's store: values %+v", s.Values.Top)
			}
		}
	}
	inlined := false
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindInstruction && n.Frame.Offset == 0x190 {
			for id := n.Parent; id != profile.RootID; id = p.Nodes[id].Parent {
				if f := p.Nodes[id].Frame; f.Kind == profile.KindInlined && f.Line == 12 && strings.HasSuffix(f.File, "k.cu") {
					inlined = true
				}
			}
		}
	}
	if !inlined {
		t.Error("the atomic at vec4+0x190 is not under its inlined frame (called at k.cu:12)")
	}
}

// Frames that contradict the stream before them are skipped and counted,
// never fatal.
func TestAnomaliesSkipped(t *testing.T) {
	a := New(Options{Job: "j", Rank: 0, Workers: 2})
	defer a.Close()
	acc := &rawstream.Access{LaunchID: 42}
	acc.AppendRecord(0x1000, 0, 0, rawstream.SpaceGlobal, rawstream.FlagRead, 1, 4)
	acc.AppendLane(0x10, []byte{1, 2, 3, 4})
	for i, f := range []rawstream.Frame{
		&rawstream.Hello{Mode: rawstream.ModeRedundancy},
		&rawstream.Function{FunctionID: 1, ModuleID: 9, Name: "f"},
		&rawstream.Launch{LaunchID: 1, FunctionID: 7},
		acc,
		&rawstream.KernelEnd{LaunchID: 42},
		&rawstream.PCSamples{LaunchID: 1, PCs: []rawstream.PCSample{{FunctionID: 5}}},
	} {
		if err := a.Add(f, int64(100*i)); err != nil {
			t.Fatal(err)
		}
	}
	n, first := a.Anomalies()
	if n != 4 || !strings.Contains(first, "offset 200 (LAUNCH)") || !strings.Contains(first, "function 7 unknown") {
		t.Errorf("%d anomalies, first %q", n, first)
	}
	if p, err := a.Flush(0); err != nil || p != nil {
		t.Errorf("flush: %v %v", p, err)
	}
}
