package online

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// analyseFrames analyses frames with two workers and exact reuse
// histograms, as analyseItems does.
func analyseFrames(t *testing.T, frames []rawstream.Frame, st StructureSource, flushEvery, forceAt int) (*profile.Profile, []*profile.Profile) {
	t.Helper()
	var buf bytes.Buffer
	w := rawstream.NewWriter(&buf)
	for _, f := range frames {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	p, items, _ := analyseItems(t, buf.Bytes(), Options{Workers: 2, Structures: st, ReuseSampling: 1}, flushEvery, forceAt)
	return p, items
}

// kernels lists a profile's kernel nodes.
func kernels(p *profile.Profile) []*profile.Node {
	var ks []*profile.Node
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindKernel {
			ks = append(ks, n)
		}
	}
	return ks
}

// spillCubin is a real cubin with a kernel whose attributes (registers,
// stack frame) are known.
const spillKernel = "_Z20accumulators_spilledPKfPfii"

func spillCubin(t *testing.T) []byte {
	b, err := os.ReadFile("../../testdata/sass/spill/spill.cubin")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// firstLaunchStream is what the library writes for a kernel launched
// three times from one site under lazy loading: the kernel (module id 0),
// its first launch and a PC sample of it, then the module and the kernel
// as its function, then the rest. The kernel ends come last, as CUPTI's
// activity records do.
func firstLaunchStream(cubin []byte) []rawstream.Frame {
	host := []uint64{0x401234}
	sample := func(launch uint64, fn uint32, n uint32) *rawstream.PCSamples {
		return &rawstream.PCSamples{LaunchID: launch, PCs: []rawstream.PCSample{{FunctionID: fn, Offset: 0x10, Stalls: []rawstream.StallCount{{Reason: 0, Samples: n}}}}}
	}
	return []rawstream.Frame{
		&rawstream.Hello{Version: 1, Mode: rawstream.ModePCSampling},
		&rawstream.Function{FunctionID: 1, ModuleID: 0, Name: spillKernel},
		&rawstream.Launch{LaunchID: 1, FunctionID: 1, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, Host: host},
		sample(1, 1, 3),
		&rawstream.Module{ModuleID: 5, ContentKey: 1, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin},
		&rawstream.Function{FunctionID: 2, ModuleID: 5, Name: spillKernel},
		&rawstream.Launch{LaunchID: 2, FunctionID: 1, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, Host: host},
		sample(2, 1, 5),
		&rawstream.Launch{LaunchID: 3, FunctionID: 2, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}, Host: host},
		sample(3, 2, 7),
		&rawstream.KernelEnd{LaunchID: 1, StartNS: 100, EndNS: 200},
		&rawstream.KernelEnd{LaunchID: 2, StartNS: 300, EndNS: 500},
		&rawstream.KernelEnd{LaunchID: 3, StartNS: 600, EndNS: 1000},
		&rawstream.End{},
	}
}

// With lazy loading the library reports a kernel before its module. Its
// first launch belongs to the same kernel node as the later ones: one
// context, with every launch, time, sample and the cubin's attributes,
// and nothing under the unknown module.
func TestFunctionBeforeItsModule(t *testing.T) {
	cubin := spillCubin(t)
	frames := firstLaunchStream(cubin)
	// Holding from the orphan's first launch until its module's function.
	a := New(Options{Job: "j", Rank: 0, Workers: 1})
	for i, f := range frames[:6] {
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
		if want := i >= 2 && i < 5; a.Holding() != want {
			t.Errorf("after frame %d (%v): Holding %v, want %v", i, f.Kind(), a.Holding(), want)
		}
	}
	a.Close()

	p, items := analyseFrames(t, frames, nil, 1, 0)
	if len(items) < 2 {
		t.Errorf("%d items: an item after every frame (once the module came) should give several", len(items))
	}
	ks := kernels(p)
	if len(ks) != 1 {
		t.Fatalf("%d kernel nodes, want 1: %v", len(ks), ks)
	}
	k := ks[0]
	real := profile.ModuleHash(xxhashSum(cubin))
	if k.Frame.Module != real.String() {
		t.Errorf("kernel under module %s, want %s", k.Frame.Module, real)
	}
	for m, want := range map[profile.MetricID]uint64{profile.GPULaunches: 3, profile.GPUTime: 100 + 200 + 400,
		profile.LaunchWithAttrs: 3, profile.LaunchGridBlocks: 12, profile.LaunchBlockThreads: 3 * 128} {
		if got := k.Metrics.Get(m); got != want {
			t.Errorf("kernel %s = %d, want %d", m.Name(), got, want)
		}
	}
	if r := k.Metrics.Get(profile.LaunchRegs); r == 0 || r%3 != 0 {
		t.Errorf("launch.regs %d: the cubin's registers, three times", r)
	}
	var insts []*profile.Node
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindInstruction {
			insts = append(insts, n)
		}
	}
	if len(insts) != 1 || insts[0].Metrics.Get(profile.InstSamples) != 3+5+7 || p.KernelOf(insts[0].ID) != k.ID {
		t.Errorf("instruction nodes %v, want one with 15 samples under the kernel", insts)
	}
	if p.Modules[0] != nil || len(p.Modules) != 1 {
		t.Errorf("profile modules %v, want only the loaded one", p.Modules)
	}
	for id, f := range p.Funcs {
		if f.Module != real {
			t.Errorf("function %v (%s) under module %s", id, f.Name, f.Module)
		}
	}
}

// A module that does not come within the collector's bound: the item
// that goes out meanwhile holds the first launch under the unknown module
// (published items are never changed); what comes after the module, the
// launch's end and samples included, goes to the loaded module's kernel.
// The bound's price, and the only way a split remains.
func TestFirstLaunchPublishedBeforeItsModule(t *testing.T) {
	cubin := spillCubin(t)
	frames := firstLaunchStream(cubin)
	p, items := analyseFrames(t, frames, nil, 0, 4) // an item after the orphan's launch and sample
	if len(items) != 2 {
		t.Fatalf("%d items, want 2", len(items))
	}
	first := kernels(items[0])
	if len(first) != 1 || first[0].Frame.Module != profile.ModuleHash(0).String() || first[0].Metrics.Get(profile.GPULaunches) != 1 {
		t.Fatalf("first item's kernels %v: want the first launch under the unknown module", first)
	}
	var unknown, loaded *profile.Node
	for _, k := range kernels(p) {
		if k.Frame.Module == profile.ModuleHash(0).String() {
			unknown = k
		} else {
			loaded = k
		}
	}
	if unknown == nil || loaded == nil || len(kernels(p)) != 2 {
		t.Fatalf("kernels %v: want the unknown module's and the loaded one's", kernels(p))
	}
	if unknown.Metrics.Get(profile.GPULaunches) != 1 || unknown.Metrics.Get(profile.GPUTime) != 0 || unknown.Metrics.Get(profile.InstSamples) != 0 {
		t.Errorf("unknown module's kernel: %v", unknown.Metrics)
	}
	if loaded.Metrics.Get(profile.GPULaunches) != 2 || loaded.Metrics.Get(profile.GPUTime) != 700 {
		t.Errorf("loaded module's kernel: %v", loaded.Metrics)
	}
	var samples uint64
	for _, n := range p.Nodes {
		if n.Frame.Kind == profile.KindInstruction {
			samples += n.Metrics.Get(profile.InstSamples)
		}
	}
	if samples != 15 {
		t.Errorf("%d samples, want 15", samples)
	}

	// Once an item went out without waiting for it, the context holds no
	// item again (a module that never comes costs one stretched item).
	a := New(Options{Job: "j", Rank: 0, Workers: 1})
	defer a.Close()
	for i, f := range frames[:3] {
		if err := a.Add(f, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if !a.Holding() {
		t.Fatal("not holding after the first launch")
	}
	if p, err := a.Flush(0); err != nil || p == nil {
		t.Fatalf("flush: %v", err)
	}
	if err := a.Add(frames[3], 3); err != nil { // a sample of the first launch
		t.Fatal(err)
	}
	if a.Holding() {
		t.Error("holding again for a context an item was published without")
	}
}

// Every capture (recorded with eager loading), rewritten as the library
// writes it under lazy loading, gives byte for byte the profile of the
// original stream: every kernel's first launch, its time, samples,
// counts, launch statistics, PC placement, and for value tracing its
// records (read through the code range the early FUNCTION carries, at
// their width until the module comes), redundancy pairs, pseudo objects,
// sketches and reuse histograms are the loaded module's. With an item
// every 3 frames (put off while Holding) the PC-sampling and counting
// passes' trees are the same too (value tracing's sketches depend on how
// items are cut, docs/insights.md). Value tracing is checked on the fully
// traced captures, with each module reported after its first launch's
// records.
func TestLazyLoadingCaptures(t *testing.T) {
	for _, c := range loadCaptures(t, captureGlob("*.gpr")) {
		if strings.Contains(c.name, ".redundancy.") && !strings.Contains(c.name, ".p1.") && !strings.Contains(c.name, ".rank0.") {
			continue // value tracing: the fully traced captures (the sampled ones trace subsets of the same launches)
		}
		if strings.HasPrefix(c.name, "torch_") {
			continue // recorded under lazy loading already, and trimmed: not an eager stream to rewrite
		}
		t.Run(c.name, func(t *testing.T) {
			st := knownModulesOnly{c.st}
			o := Options{Workers: 2, Structures: st}
			want, _, _ := analyseItems(t, c.data, o, 0, 0)
			lates := []bool{false, true}
			if strings.Contains(c.name, ".redundancy.") {
				lates = lates[1:] // the records of first launches before their module (the costly streams)
			}
			for _, late := range lates {
				lazy, err := synth.LazyLoading(c.data, late)
				if err != nil {
					t.Fatal(err)
				}
				orphans := 0
				frames, _, _ := decodeAll(t, lazy)
				for _, f := range frames {
					if fn, ok := f.(*rawstream.Function); ok && fn.ModuleID == 0 {
						orphans++
					}
				}
				if orphans == 0 {
					t.Fatal("the rewritten stream reports no kernel before its module")
				}
				got, _, _ := analyseItems(t, lazy, o, 0, 0)
				if !bytes.Equal(got.Encode(), want.Encode()) {
					t.Errorf("late=%v (%d kernels reported before their module): the profile differs from the eager stream's:\n%s", late, orphans, firstDiff(got.String(), want.String()))
				}
				if strings.Contains(c.name, ".redundancy.") {
					continue
				}
				cut, items, _ := analyseItems(t, lazy, o, 3, 0)
				if len(items) < 2 {
					t.Errorf("late=%v: %d items", late, len(items))
				}
				if g, w := treeText(cut), treeText(want); g != w {
					t.Errorf("late=%v, an item every 3 frames: the tree differs:\n%s", late, firstDiff(g, w))
				}
			}
		})
	}
}

// knownModulesOnly gives no structure for the unknown module, as a live
// run (nvdisasm on the cubin, which the unknown module does not have) does.
type knownModulesOnly struct{ StructureSource }

func (k knownModulesOnly) Request(mod ModuleRef, fn string) *Pending {
	if mod.Hash == 0 {
		return Resolved(nil, WhyUnknownModule)
	}
	return k.StructureSource.Request(mod, fn)
}

// treeText is a profile's canonical text without the lines that count
// items.
func treeText(p *profile.Profile) string {
	var keep []string
	for _, l := range strings.Split(p.String(), "\n") {
		if !strings.HasPrefix(l, "items:") && !strings.HasPrefix(l, "rank ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n got  " + a + "\n want " + b
		}
	}
	return "(same text, different encoding)"
}
