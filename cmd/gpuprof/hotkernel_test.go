package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gpuprof/collector"
	"gpuprof/collector/online"
	"gpuprof/collector/rawstream"
	"gpuprof/profile"
)

// The kernels of passesApp's PC-sampling stream: B has more GPU time than
// A; C has the most, all of it from CUDA graph launches, whose kernels the
// hybrid pass cannot name (they never pass the launch callback).
const (
	passesKernelA = "_Z7kernelAPf"
	passesKernelB = "_Z7kernelBPfi"
	passesKernelC = "_Z7kernelCv"
)

// passesApp is --mode all's stand-in application (GPUPROF_TEST_HELPER=
// passes): each run connects as the injection library does and writes a
// stream of the mode it is given (GPUPROF_MODE). It appends what it saw,
// the mode and GPUPROF_SASS_KERNEL ("-" when unset), as one line to
// GPUPROF_TEST_PASSLOG. The hybrid run exits with 42 unless
// GPUPROF_SASS_KERNEL is GPUPROF_TEST_WANT_KERNEL ("-": unset).
// GPUPROF_TEST_NO_LAUNCH: the PC-sampling run launches nothing.
func passesApp() int {
	mode := os.Getenv("GPUPROF_MODE")
	sk, set := os.LookupEnv("GPUPROF_SASS_KERNEL")
	if !set {
		sk = "-"
	}
	f, err := os.OpenFile(os.Getenv("GPUPROF_TEST_PASSLOG"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 97
	}
	fmt.Fprintf(f, "%s %s\n", mode, sk)
	f.Close()
	m, err := rawstream.ParseMode(mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 96
	}
	conn, err := net.Dial("unix", os.Getenv("GPUPROF_SOCKET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 95
	}
	defer conn.Close()
	// A CUDA process connects when CUDA starts and lives on: the
	// collector accepts it meanwhile (one that has exited by then is late).
	time.Sleep(200 * time.Millisecond)
	var rank int32
	fmt.Sscan(os.Getenv("GPUPROF_RANK"), &rank)
	cubin := []byte("cubin bytes")
	frames := []rawstream.Frame{
		&rawstream.Hello{Version: rawstream.Version, Rank: rank, Mode: m, Device: 0},
		&rawstream.Module{ModuleID: 5, ContentKey: 1, Size: uint32(len(cubin)), HasBytes: true, Bytes: cubin},
		&rawstream.Function{FunctionID: 1, ModuleID: 5, Name: passesKernelA},
		&rawstream.Function{FunctionID: 2, ModuleID: 5, Name: passesKernelB},
		&rawstream.Function{FunctionID: 3, ModuleID: 5, Name: passesKernelC},
		&rawstream.Alloc{AllocID: 1, Address: 1 << 32, Size: 4096, Memory: rawstream.AllocDevice, Host: []uint64{0x10}},
	}
	id := uint64(0)
	launch := func(fn uint32, ns uint64, graph bool) {
		id++
		frames = append(frames,
			&rawstream.Launch{LaunchID: id, FunctionID: fn, Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{32, 1, 1}, Graph: graph, Host: []uint64{0x20 + uint64(fn)}},
			&rawstream.KernelEnd{LaunchID: id, StartNS: 1000 * id, EndNS: 1000*id + ns, BlocksTotal: 4})
	}
	switch {
	case m == rawstream.ModePCSampling && os.Getenv("GPUPROF_TEST_NO_LAUNCH") == "":
		launch(1, 100, false) // A: 300 ns in 3 launches
		launch(2, 200, false) // B: 400 ns in 2, launched between A's
		launch(1, 100, false)
		launch(2, 200, false)
		launch(1, 100, false)
		launch(3, 900, true) // C: 900 ns, a graph's kernel
	case m == rawstream.ModeHybrid:
		launch(2, 5000, false) // patched code's time: not to be kept
	}
	w := rawstream.NewWriter(conn)
	for _, fr := range frames {
		if err := w.Write(fr); err != nil {
			fmt.Fprintln(os.Stderr, "app:", err)
			return 94
		}
	}
	w.Write(&rawstream.End{ExitCode: 0})
	if want := os.Getenv("GPUPROF_TEST_WANT_KERNEL"); m == rawstream.ModeHybrid && sk != want {
		fmt.Fprintf(os.Stderr, "app: hybrid run with GPUPROF_SASS_KERNEL %s, want %s\n", sk, want)
		return 42
	}
	return 0
}

// --mode all runs the application three times: PC sampling, then hybrid
// with GPUPROF_SASS_KERNEL naming the kernel that had the most GPU time in
// the first run (B, not C: only launched from graphs), then value tracing;
// the rank is their merge, with the first run's kernel times. A kernel
// given with --hybrid-kernel wins; a first run that timed no kernel names
// none.
func TestModeAllHybridCountsTheHottestKernel(t *testing.T) {
	if v, ok := os.LookupEnv("GPUPROF_SASS_KERNEL"); ok {
		t.Setenv("GPUPROF_SASS_KERNEL", v) // restored after the test
		os.Unsetenv("GPUPROF_SASS_KERNEL")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, given string
		noLaunch    bool
		want        string // the hybrid run's GPUPROF_SASS_KERNEL, "-" unset
	}{
		{name: "hottest", want: passesKernelB},
		{name: "given", given: "kernelA", want: "kernelA"},
		{name: "nothing timed", noLaunch: true, want: "-"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			lib := filepath.Join(dir, "libgpuprof_inject.so") // the stand-in does not load it
			os.WriteFile(lib, nil, 0o644)
			passLog := filepath.Join(dir, "passes")
			t.Setenv("GPUPROF_TEST_HELPER", "passes")
			t.Setenv("GPUPROF_TEST_PASSLOG", passLog)
			t.Setenv("GPUPROF_TEST_WANT_KERNEL", c.want)
			if c.noLaunch {
				t.Setenv("GPUPROF_TEST_NO_LAUNCH", "1")
			}
			lp := &localPublisher{p: profile.New("all")}
			o := collector.Options{Job: "all", Rank: 0, Mode: "all", HybridKernel: c.given, Command: []string{exe}, InjectLib: lib,
				Publisher: lp, Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}}
			runErr, rank, appRan, sig := collectPasses(context.Background(), o)
			if runErr != nil || rank != 0 || !appRan || sig != nil {
				t.Fatalf("collectPasses: %v, rank %d, application ran %v, signal %v", runErr, rank, appRan, sig)
			}
			b, err := os.ReadFile(passLog)
			if err != nil {
				t.Fatal(err)
			}
			runs := strings.Split(strings.TrimSpace(string(b)), "\n")
			given := c.given
			if given == "" {
				given = "-"
			}
			// A given kernel reaches every run's environment; only the
			// hybrid run reads it.
			want := []string{"pcsampling " + given, "hybrid " + c.want, "redundancy " + given}
			if !slices.Equal(runs, want) {
				t.Errorf("runs (mode, GPUPROF_SASS_KERNEL) %q, want %q", runs, want)
			}
			p := lp.p
			ri := p.Ranks[0]
			if ri == nil || !p.Sealed(0) || ri.Incomplete != "" {
				t.Fatalf("rank 0: sealed %v, %+v", p.Sealed(0), ri)
			}
			if ri.Mode != "hybrid+pcsampling+redundancy" {
				t.Errorf("rank 0: mode %q, want the three passes'", ri.Mode)
			}
			if c.noLaunch {
				return
			}
			// Kernel times are the PC-sampling run's: the hybrid run's
			// (patched code) are dropped.
			got := map[string]uint64{}
			for _, n := range p.Nodes {
				if n.Frame.Kind == profile.KindKernel {
					got[n.Frame.Function] += n.Metrics.Get(profile.GPUTime)
				}
			}
			if wantTimes := map[string]uint64{passesKernelA: 300, passesKernelB: 400, passesKernelC: 900}; !mapsEqual(got, wantTimes) {
				t.Errorf("kernel times %v, want the PC-sampling run's %v", got, wantTimes)
			}
		})
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// kernelAt is a kernel context's metrics in an item.
type kernelAt struct {
	host, fn              string
	time, launches, graph uint64
}

// The hottest kernel is the one with the most time summed over its
// calling contexts and over items, among those launched directly at
// least once; ties go to the first name.
func TestKernelTimesHottest(t *testing.T) {
	kt := &kernelTimes{next: &recordingPublisher{}}
	if n, _ := kt.hottest(); n != "" {
		t.Fatalf("nothing published: hottest %q", n)
	}
	publish := func(seq uint32, ks ...kernelAt) {
		it := profile.New("j")
		for _, k := range ks {
			n := it.Path(profile.Frame{Kind: profile.KindHostFrame, Function: k.host}, profile.Frame{Kind: profile.KindKernel, Module: "m", Function: k.fn})
			it.Add(n.ID, profile.GPUTime, k.time)
			it.Add(n.ID, profile.GPULaunches, k.launches)
			it.Add(n.ID, profile.GPUGraph, k.graph)
		}
		if err := it.AsItem(0, seq); err != nil {
			t.Fatal(err)
		}
		if err := kt.Publish(context.Background(), it, false); err != nil {
			t.Fatal(err)
		}
	}
	type k = kernelAt
	// a: 600 ns from one context; b: 350 + 350 ns from two contexts and
	// two items; g: 5000 ns, graph launches only.
	publish(0, k{"main", "a", 600, 6, 0}, k{"main", "b", 350, 1, 0}, k{"main", "g", 5000, 5, 5})
	publish(1, k{"solve", "b", 350, 1, 0})
	if n, tm := kt.hottest(); n != "b" || tm != 700 {
		t.Errorf("hottest %q (%d ns), want b (700 ns)", n, tm)
	}
	publish(2, k{"main", "a", 100, 1, 0}) // a ties b
	if n, tm := kt.hottest(); n != "a" || tm != 700 {
		t.Errorf("tie: hottest %q (%d ns), want a (700 ns)", n, tm)
	}
	publish(3, k{"main", "g", 1, 1, 0}) // g once launched directly
	if n, _ := kt.hottest(); n != "g" {
		t.Errorf("hottest %q, want g once launched directly", n)
	}
}

func TestHybridKernelName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		// As the profile stores it: whole.
		{"_Z7kernelBPfi", "_Z7kernelBPfi"},
		{"_ZN2ns6kernelIfLi4EEEvPT_i", "_ZN2ns6kernelIfLi4EEEvPT_i"},
		{"fasten_main", "fasten_main"}, // extern "C"
		// Readable names: the plain identifier.
		{"kernelB(float*, int)", "kernelB"},
		{"void kernelB(float*, int)", "kernelB"},
		{"void ns::kernel<float, 4>(float*, int)", "kernel"},
		{"ns::(anonymous namespace)::K(int)", "K"},
		{"void cub::CUB_200200_900_NS::DeviceReduceKernel<cub::DeviceReducePolicy<float, int, cub::Sum>::Policy600, float*, float*, int, cub::Sum>(float*, float*, int, cub::GridEvenShare<int>, cub::Sum)", "DeviceReduceKernel"},
		{"at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "vectorized_elementwise_kernel"},
		{"  kernelB  ", "kernelB"},
		// No identifier to be had.
		{"{lambda(int)#1}", ""},
	} {
		if got := hybridKernelName(c.in); got != c.want {
			t.Errorf("hybridKernelName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Kernel times are kept from the PC-sampling pass; the hybrid pass's time
// patched code (dropped under a PC-sampling pass), the value-tracing
// pass's are host-timed (dropped under any CUPTI pass).
func TestDropTimes(t *testing.T) {
	for _, c := range []struct {
		modes []string
		want  []bool
	}{
		{[]string{"pcsampling", "hybrid", "redundancy"}, []bool{false, true, true}},
		{[]string{"pcsampling", "redundancy"}, []bool{false, true}},
		{[]string{"hybrid", "redundancy"}, []bool{false, true}},
		{[]string{"redundancy", "hybrid", "pcsampling"}, []bool{true, true, false}},
		{[]string{"redundancy", "redundancy"}, []bool{false, false}},
		{[]string{"hybrid"}, []bool{false}},
	} {
		if got := dropTimes(c.modes); !slices.Equal(got, c.want) {
			t.Errorf("dropTimes(%q) = %v, want %v", c.modes, got, c.want)
		}
	}
}
