package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"gpuprof/collector/online"
	"gpuprof/collector/rawstream"
	"gpuprof/collector/synth"
	"gpuprof/profile"
)

// Python functions' trampolines in the stand-in's perf map: the kernels
// are launched from MLP.forward, called from the script's <module>.
const (
	pyForward = 0x7e0000001000
	pyModule  = 0x7e000000100b
)

// pythonApp is a stand-in for a CPython process run with its perf
// trampoline: it writes its perf map as CPython does (/tmp/perf-PID.map)
// and a stream whose host stacks pass through two Python frames, with
// its own pid in HELLO as the injection library writes it.
func pythonApp(conn net.Conn, rank int, o synth.Options) int {
	if os.Getenv("PYTHONPERFSUPPORT") != "1" {
		fmt.Fprintln(os.Stderr, "app: PYTHONPERFSUPPORT not set")
		return 95
	}
	pid := os.Getpid()
	if err := os.WriteFile(perfMapOf(uint32(pid)), []byte(pythonMap), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 94
	}
	if err := writePythonStream(conn, uint32(pid), rank, o); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 93
	}
	return 3
}

// pythonMap is the perf map of the stand-in's two Python functions.
var pythonMap = fmt.Sprintf("%x b py::MLP.forward:/home/user/model.py\n%x b py::<module>:/home/user/train.py\n", pyForward, pyModule)

// writePythonStream writes a generated stream as process pid, its kernels
// launched through the two Python functions' trampolines.
func writePythonStream(out io.Writer, pid uint32, rank int, o synth.Options) error {
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, rank, o); err != nil {
		return err
	}
	d := rawstream.NewDecoder(&buf)
	w := rawstream.NewWriter(out)
	for {
		f, err := d.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *rawstream.Hello:
			f.PID = pid
		case *rawstream.Launch:
			// Return addresses inside the trampolines, between the
			// program's frames and the C start code (outermost).
			n := len(f.Host)
			f.Host = append(f.Host[:n-1:n-1], pyForward+8, pyModule+8, f.Host[n-1])
		}
		if err := w.Write(f); err != nil {
			return err
		}
	}
}

// pythonFrames finds the two Python frames in a profile and checks that
// every kernel sits below MLP.forward, itself below <module>.
func pythonFrames(t *testing.T, m *profile.Profile) {
	t.Helper()
	var fwd, mod *profile.Node
	for _, n := range m.Nodes {
		if n.Frame.HostClass() != profile.HostPython {
			continue
		}
		switch n.Frame.Function {
		case "MLP.forward":
			fwd = n
		case "<module>":
			mod = n
		}
	}
	if fwd == nil || mod == nil {
		t.Fatal("no Python frames in the profile")
	}
	if fwd.Frame.File != "/home/user/model.py" || mod.Frame.File != "/home/user/train.py" || fwd.Parent != mod.ID {
		t.Errorf("Python frames %+v under %+v", fwd.Frame, mod.Frame)
	}
	kernels, below := 0, 0
	for _, n := range m.Nodes {
		if n.Frame.Kind != profile.KindKernel {
			continue
		}
		kernels++
		for p := n.Parent; p != profile.RootID; p = m.Nodes[p].Parent {
			if p == fwd.ID {
				below++
				break
			}
		}
	}
	if kernels == 0 || below != kernels {
		t.Errorf("%d of %d kernels below MLP.forward", below, kernels)
	}
}

// A Python process run for its frames (--python-frames): its kernels sit
// under the Python functions that launched them, named from its perf map,
// which the collector removes once read.
func TestPythonFrames(t *testing.T) {
	pub := &items{}
	o := appOptions(t, pub)
	o.Rank = 0
	o.PythonFrames = true
	o.Stdin = bytes.NewReader(nil)
	o.Stdout = io.Discard
	t.Setenv("GPUPROF_TEST_PERFMAP", "1")
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background()); ExitCode(err) != 3 {
		t.Fatalf("error %v, want the application's status 3", err)
	}
	pythonFrames(t, pub.merged(t, 0))
	if _, err := os.Stat(perfMapOf(uint32(c.order[0].hello.PID))); !os.IsNotExist(err) {
		t.Errorf("perf map of pid %s left behind: %v", strconv.Itoa(int(c.order[0].hello.PID)), err)
	}
}

// A recorded stream's Python frames come from the perf map given with it.
func TestReplayWithPerfMap(t *testing.T) {
	dir := t.TempDir()
	var stream bytes.Buffer
	if err := writePythonStream(&stream, 4242, 0, synth.Options{Seed: 13, BlockSampling: 4, FrameRecords: 64}); err != nil {
		t.Fatal(err)
	}
	path, pm := filepath.Join(dir, "rank0.gpraw"), filepath.Join(dir, "perf-4242.map")
	os.WriteFile(path, stream.Bytes(), 0o644)
	os.WriteFile(pm, []byte(pythonMap), 0o644)
	pub := &items{}
	if err := Collect(context.Background(), Options{Job: "job", Rank: 0, Replay: path, PerfMap: pm, Publisher: pub,
		Analysis: online.Options{Structures: &online.SASS{NVDisasm: "-"}}}); err != nil {
		t.Fatal(err)
	}
	pythonFrames(t, pub.merged(t, 0))
	if _, err := os.Stat(pm); err != nil {
		t.Errorf("a perf map given by the user was removed: %v", err)
	}
}
