package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"gpuprof/collector/proctree"
)

// run starts the application with the injection library and collects the
// streams its processes send over a Unix socket (one per process that
// loads CUDA; usually one).
func (c *Collector) run(ctx context.Context) error {
	lib := c.o.InjectLib
	if lib == "" {
		lib = DefaultInjectLib()
	}
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("rank %d: injection library: %w (build it with make inject, or set GPUPROF_INJECT)", c.rank, err)
	}
	dir, err := os.MkdirTemp("", "gpuprof-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "stream.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.rank, err)
	}
	defer ln.Close()

	cmd := exec.Command(c.o.Command[0], c.o.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.o.Stdin, c.o.Stdout, c.o.Stderr
	cmd.Env = append(os.Environ(),
		"CUDA_INJECTION64_PATH="+lib,
		"GPUPROF_SOCKET="+sock,
		"GPUPROF_RANK="+strconv.Itoa(int(c.rank)),
		"GPUPROF_JOB="+c.o.Job,
	)
	if c.o.Mode != "" {
		cmd.Env = append(cmd.Env, "GPUPROF_MODE="+c.o.Mode)
	}
	if c.o.BlockSampling > 0 {
		cmd.Env = append(cmd.Env, "GPUPROF_BLOCK_SAMPLING="+strconv.Itoa(c.o.BlockSampling))
	}
	if c.o.KernelSampling > 0 {
		cmd.Env = append(cmd.Env, "GPUPROF_KERNEL_SAMPLING="+strconv.Itoa(c.o.KernelSampling))
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("rank %d: starting %s: %w", c.rank, c.o.Command[0], err)
	}
	c.logf("started %s (pid %d)", c.o.Command[0], cmd.Process.Pid)
	// Interruptions reach the application through c.proc (Interrupt); an
	// interruption that came before it started is passed on now. Its
	// streams then end and are analysed until ctx (the analysis' stop).
	c.imu.Lock()
	c.proc = cmd.Process
	early := c.intr
	c.imu.Unlock()
	if early != nil {
		cmd.Process.Signal(early)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var conns []net.Conn
	n := 0
	accept := func(conn net.Conn) {
		mu.Lock()
		n++
		i := n
		conns = append(conns, conn)
		mu.Unlock()
		rec := c.o.Record
		if rec != "" && i > 1 {
			rec = fmt.Sprintf("%s.%d", rec, i-1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			// ctx is cancelled only when an interruption's StopTimeout is
			// over: until then the streams of an application being stopped
			// are read and analysed, their data still worth keeping.
			if err := c.stream(ctx, conn, fmt.Sprintf("stream %d", i), rec); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accept(conn)
		}
	}()

	werr := cmd.Wait()
	c.imu.Lock()
	c.proc = nil
	c.imu.Unlock()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
			// Its measurements stop where the signal struck.
			c.issue("application ended by " + proctree.SignalName(ws.Signal()))
		}
	}
	if code < 0 && werr != nil {
		c.issue("application: " + werr.Error())
	}
	c.mu.Lock()
	c.exit = code
	c.mu.Unlock()
	c.logf("application exited with status %d", code)
	c.appExited(code)

	// Connections still queued are taken; then no new ones.
	ln.SetDeadline(time.Now().Add(200 * time.Millisecond))
	<-accepting
	// Streams normally end with the processes that write them; a child
	// that outlives the application gets DrainTimeout to finish.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.o.DrainTimeout):
		c.issue(fmt.Sprintf("streams still open %v after the application exited were cut", c.o.DrainTimeout))
		mu.Lock()
		for _, cn := range conns {
			cn.Close()
		}
		mu.Unlock()
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	if n == 0 {
		c.issue("no stream from the application (did it use CUDA, and could it load the injection library?)")
	}
	return errors.Join(errs...)
}
