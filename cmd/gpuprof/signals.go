package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Interruptions: Ctrl-C (SIGINT) and a batch system's SIGTERM (Slurm sends
// it at a job's time limit, then SIGKILL after KillWait, 30 s by default).
// gpuprof run passes the first to the application through its launcher and
// writes the report of what was merged; gpuprof collect passes it to its
// rank's application and publishes what it measured (docs/faults.md).

// dupWindow: a signal repeated within it is one signal that arrived twice,
// from the terminal (which signals a whole process group) and from the
// parent passing its own copy on, not a second Ctrl-C.
const dupWindow = 500 * time.Millisecond

// notifyInterrupts delivers SIGINT and SIGTERM, dropping repeats within
// dupWindow; stop ends the delivery.
func notifyInterrupts() (sigs <-chan os.Signal, stop func()) {
	raw := make(chan os.Signal, 4)
	signal.Notify(raw, os.Interrupt, syscall.SIGTERM)
	out := make(chan os.Signal, 4)
	done := make(chan struct{})
	go func() {
		var last time.Time
		for {
			select {
			case <-done:
				return
			case s := <-raw:
				if now := time.Now(); now.Sub(last) >= dupWindow {
					last = now
					select {
					case out <- s:
					default: // a third and later: the second already acts
					}
				}
			}
		}
	}()
	return out, func() { signal.Stop(raw); close(done) }
}

// signalNumber is the number of sig (SIGTERM: 15), for 128+n exit statuses.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return int(syscall.SIGTERM)
}
