package collector

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// yieldToApp sets every thread of the process to the nice value given,
// threads started after it included (within yieldEvery). It runs in a
// child test process: nice cannot be lowered back without privilege, and
// the rest of this package's tests should not run at 7.
func TestYieldToApp(t *testing.T) {
	if os.Getenv("GPUPROF_TEST_YIELD") == "1" {
		checkYield(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestYieldToApp$", "-test.v")
	cmd.Env = append(os.Environ(), "GPUPROF_TEST_YIELD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestYieldToApp")) {
		t.Fatalf("the child test process: %v\n%s", err, out)
	}
}

func checkYield(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	yieldToApp(7, done)
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // a thread of its own, maybe a new one
		close(started)
		<-done
	}()
	<-started
	time.Sleep(2 * yieldEvery)
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	checked := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Field 19 of stat, after the command in parentheses, is nice.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		if len(f) > 16 {
			checked++
			if f[16] != "7" {
				t.Errorf("thread %s has nice %s, want 7", e.Name(), f[16])
			}
		}
	}
	if checked < 2 {
		t.Errorf("%d threads checked: the test saw too few", checked)
	}
}
