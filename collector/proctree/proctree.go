// Package proctree finds and ends the processes below a process, so that
// ending a job leaves none of them behind: a launcher killed before its
// ranks, or an application's own children, would otherwise live on as
// orphans (holding GPUs on a cluster). It reads /proc (Linux).
package proctree

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes orphaned descendants of this process its children
// rather than init's, so Descendants still finds a launcher's ranks after
// the launcher died. It fails harmlessly where the kernel lacks it.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// parents maps every live process to its parent.
func parents() map[int]int {
	out := map[int]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, _, ok := stat(pid); ok {
			out[pid] = pp
		}
	}
	return out
}

// stat reads a process's parent and state from /proc/PID/stat.
func stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+4 > len(s) {
		return 0, 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return 0, 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, f[0][0], err == nil
}

// Descendants lists the processes below pid (children first, then their
// children, ...), not pid itself.
func Descendants(pid int) []int {
	kids := map[int][]int{}
	for p, pp := range parents() {
		kids[pp] = append(kids[pp], p)
	}
	var out []int
	next := []int{pid}
	for len(next) > 0 {
		p := next[0]
		next = next[1:]
		for _, k := range kids[p] {
			out = append(out, k)
			next = append(next, k)
		}
	}
	return out
}

// Signal sends sig to every process in pids (gone ones are skipped).
func Signal(pids []int, sig syscall.Signal) {
	for _, p := range pids {
		syscall.Kill(p, sig)
	}
}

// Alive returns the processes of pids still running (zombies, dead but
// not yet waited for, are not).
func Alive(pids []int) []int {
	var out []int
	for _, p := range pids {
		if _, st, ok := stat(p); ok && st != 'Z' && st != 'X' {
			out = append(out, p)
		}
	}
	return out
}

// End ends the processes below pid: SIGTERM, up to grace for them to go,
// then SIGKILL for the rest; it reaps those that became this process's
// children (orphans under a subreaper), so call it with this process's
// pid only once the children it started itself (os/exec) were waited
// for. It returns how many it had to kill.
func End(pid int, grace time.Duration) (killed int) {
	pids := Descendants(pid)
	if len(pids) == 0 {
		return 0
	}
	Signal(pids, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for len(Alive(pids)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	left := Alive(pids)
	Signal(left, syscall.SIGKILL)
	// SIGKILL is not instant: a process dies once it is scheduled.
	for deadline := time.Now().Add(time.Second); len(Alive(left)) > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// Processes that were reparented here die as zombies until reaped.
	for _, p := range pids {
		if pp, _, ok := stat(p); ok && pp == os.Getpid() {
			var ws syscall.WaitStatus
			for i := 0; i < 50; i++ {
				if n, err := syscall.Wait4(p, &ws, syscall.WNOHANG, nil); n == p || err != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	return len(left)
}

// SignalName names a signal as shells and batch systems do ("SIGTERM").
func SignalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}
