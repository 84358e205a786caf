package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"

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
	m := fmt.Sprintf("%x b py::MLP.forward:/home/user/model.py\n%x b py::<module>:/home/user/train.py\n", pyForward, pyModule)
	if err := os.WriteFile(perfMapOf(uint32(pid)), []byte(m), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 94
	}
	var buf bytes.Buffer
	if _, err := synth.WriteRank(&buf, rank, o); err != nil {
		return 98
	}
	d := rawstream.NewDecoder(&buf)
	w := rawstream.NewWriter(conn)
	for {
		f, err := d.Next()
		if errors.Is(err, io.EOF) {
			return 3
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "app:", err)
			return 93
		}
		switch f := f.(type) {
		case *rawstream.Hello:
			f.PID = uint32(pid)
		case *rawstream.Launch:
			// Return addresses inside the trampolines, between the
			// program's frames and the C start code (outermost).
			n := len(f.Host)
			f.Host = append(f.Host[:n-1:n-1], pyForward+8, pyModule+8, f.Host[n-1])
		}
		if err := w.Write(f); err != nil {
			fmt.Fprintln(os.Stderr, "app:", err)
			return 92
		}
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
	m := pub.merged(t, 0)
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
	// Every kernel was launched below MLP.forward.
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
	if _, err := os.Stat(perfMapOf(uint32(c.order[0].hello.PID))); !os.IsNotExist(err) {
		t.Errorf("perf map of pid %s left behind: %v", strconv.Itoa(int(c.order[0].hello.PID)), err)
	}
}
