package collector

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"gpuprof/collector/online"
	"gpuprof/profile"
)

// TestRealInjection runs a CUDA program under the real injection library
// (on a machine with a GPU): GPUPROF_TEST_INJECT names the built library and
// GPUPROF_TEST_CUDA_APP the program. It checks that every mode's stream is
// decoded and analysed to its END without a complaint and that the kernels
// and their instructions are in the profile.
func TestRealInjection(t *testing.T) {
	lib, app := os.Getenv("GPUPROF_TEST_INJECT"), os.Getenv("GPUPROF_TEST_CUDA_APP")
	if lib == "" || app == "" {
		t.Skip("set GPUPROF_TEST_INJECT (the built library) and GPUPROF_TEST_CUDA_APP (a CUDA program) to run on a GPU machine")
	}
	modes := []string{"redundancy", "pcsampling", "hybrid"}
	if m := os.Getenv("GPUPROF_TEST_MODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			pub := &items{}
			c, err := New(Options{Job: "real", Rank: 0, Command: []string{app}, InjectLib: lib, Mode: mode, KernelSampling: 10,
				Publisher: pub, Stdout: os.Stderr, Analysis: online.Options{Structures: &online.SASS{}}, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Run(context.Background()); err != nil {
				t.Fatalf("%v (exit %d)", err, c.ExitCode())
			}
			m := pub.merged(t, 0)
			ri := m.Ranks[0]
			t.Logf("%s: %d items, provenance %+v, progress %+v", mode, len(pub.got), *ri, c.Progress())
			if ri.Incomplete != "" || ri.Source != "captured" || ri.Mode != mode || ri.Launches == 0 {
				t.Errorf("provenance %+v", *ri)
			}
			var kernels, insts int
			metric := map[profile.MetricID]uint64{}
			for _, n := range m.Nodes {
				switch n.Frame.Kind {
				case profile.KindKernel:
					kernels++
				case profile.KindInstruction:
					insts++
				}
				for _, v := range n.Metrics {
					metric[v.ID] += v.V
				}
			}
			if kernels == 0 || insts == 0 {
				t.Errorf("%d kernel and %d instruction nodes", kernels, insts)
			}
			switch mode {
			case "redundancy":
				if metric[profile.MemLoads]+metric[profile.MemStores] == 0 || len(m.PCs) == 0 {
					t.Errorf("no accesses analysed")
				}
			case "pcsampling":
				if metric[profile.InstSamples] == 0 {
					t.Errorf("no PC samples")
				}
			case "hybrid":
				if metric[profile.InstExecuted] == 0 {
					t.Errorf("no instruction counts")
				}
			}
			var top []string
			for id, v := range metric {
				top = append(top, id.Name()+"="+itoa(v))
			}
			t.Logf("%s: %d kernels, %d instructions, metrics %s", mode, kernels, insts, strings.Join(top, " "))
			if p, err := exec.LookPath("nvdisasm"); err == nil {
				t.Logf("structure from %s", p)
			}
		})
	}
}

func itoa(v uint64) string {
	const d = "0123456789"
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{d[v%10]}, b...)
	}
	return string(b)
}
