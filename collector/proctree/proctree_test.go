package proctree

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// A shell's children, and theirs, are found below this process and
// ended, the ones that ignore SIGTERM with SIGKILL.
func TestDescendantsAndEnd(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30.1 & (trap '' TERM; sleep 30.2) & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var below []int
	deadline := time.Now().Add(10 * time.Second)
	for len(Alive(below)) < 3 && time.Now().Before(deadline) { // sh and two sleeps (a subshell may exec its last command)
		time.Sleep(20 * time.Millisecond)
		below = Descendants(os.Getpid())
	}
	if !slices.Contains(below, cmd.Process.Pid) || len(Alive(below)) < 3 {
		t.Fatalf("descendants %v of %d, want the shell %d and its children", below, os.Getpid(), cmd.Process.Pid)
	}
	killed := End(cmd.Process.Pid, 300*time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if left := Alive(below); len(left) > 0 {
		t.Fatalf("still alive after End: %v", left)
	}
	if killed == 0 {
		t.Error("the process that ignores SIGTERM was not counted as killed")
	}
}

func TestSignalName(t *testing.T) {
	for s, want := range map[os.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL"} {
		if got := SignalName(s); got != want {
			t.Errorf("%v: %q, want %q", s, got, want)
		}
	}
}
