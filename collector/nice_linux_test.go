package collector

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// yieldToApp sets every thread of the process to the nice value given,
// threads started after it included (within yieldEvery).
// (It lowers the test process itself, for good: nice cannot be raised
// back without privilege.)
func TestYieldToApp(t *testing.T) {
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
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Field 19 of stat, after the command in parentheses, is nice.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		if len(f) > 16 && f[16] != "7" {
			t.Errorf("thread %s has nice %s, want 7", e.Name(), f[16])
		}
	}
}
