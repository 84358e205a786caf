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
// streams its processes send over a Unix socket: one per process that
// loads CUDA, each measured as its own rank (assign).
func (c *Collector) run(ctx context.Context) error {
	lib := c.o.InjectLib
	if lib == "" {
		lib = DefaultInjectLib()
	}
	if _, err := os.Stat(lib); err != nil {
		return fmt.Errorf("rank %d: injection library: %w (build it with make inject, or set GPUPROF_INJECT)", c.place.base, err)
	}
	dir, err := os.MkdirTemp("", "gpuprof-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "stream.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.place.base, err)
	}
	defer ln.Close()

	cmd := c.appCommand(lib, sock)
	if err := cmd.Start(); err != nil {
		c.mu.Lock()
		c.appEnded = true
		c.mu.Unlock()
		close(c.appExited)
		return fmt.Errorf("rank %d: starting %s: %w", c.place.base, c.o.Command[0], err)
	}
	c.mu.Lock()
	c.appPID = cmd.Process.Pid
	c.mu.Unlock()
	yieldToApp(c.o.Nice, c.appExited)
	c.logf("started %s (pid %d), expecting %d rank(s)", c.o.Command[0], cmd.Process.Pid, c.place.world)
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

	streams := &appStreams{c: c}
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			streams.accept(ctx, conn)
		}
	}()

	werr := cmd.Wait()
	code := c.appWaited(cmd, werr)
	streams.mu.Lock()
	streams.exited = true
	streams.mu.Unlock()

	// Connections made before the application exited wait in the
	// listener's backlog: the accept loop stops and they are taken without
	// waiting for more (a fixed grace period here cost every run 200 ms).
	ln.SetDeadline(time.Now().Add(acceptGrace))
	<-accepting
	for {
		conn, ok := acceptQueued(ln)
		if !ok {
			break
		}
		streams.accept(ctx, conn)
	}
	streams.drain()
	why := "no stream from the application (did it use CUDA, and could it load the injection library?)"
	if streams.n > 0 {
		why = fmt.Sprintf("never connected: no CUDA process of this rank reached the collector and used the GPU before the application ended (%d process(es) connected)", streams.n)
	}
	if code < 0 && werr != nil {
		why += "; application: " + werr.Error()
	}
	streams.mu.Lock()
	defer streams.mu.Unlock()
	return errors.Join(append(streams.errs, c.missing(ctx, why))...)
}

// appCommand is the application's command, with the environment that loads
// the injection library and tells it where to send its stream.
func (c *Collector) appCommand(lib, sock string) *exec.Cmd {
	cmd := exec.Command(c.o.Command[0], c.o.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.o.Stdin, c.o.Stdout, c.o.Stderr
	cmd.Env = append(os.Environ(),
		"CUDA_INJECTION64_PATH="+lib,
		"GPUPROF_SOCKET="+sock,
		"GPUPROF_RANK="+strconv.Itoa(int(c.place.base)),
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
	if c.o.HybridKernel != "" {
		cmd.Env = append(cmd.Env, "GPUPROF_SASS_KERNEL="+c.o.HybridKernel)
	}
	if c.o.PythonFrames {
		cmd.Env = append(cmd.Env, "PYTHONPERFSUPPORT=1")
	}
	return cmd
}

// appWaited records that the application ended (werr is its Wait's) and
// returns its exit status (-1 if unknown): the status, the ranks' issues
// (the wait's error, a killing signal), appExited closed and, when the
// status is known, every rank's exit.
func (c *Collector) appWaited(cmd *exec.Cmd, werr error) int {
	c.imu.Lock()
	c.proc = nil
	c.imu.Unlock()
	code := -1
	var killedBy string
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
			killedBy = proctree.SignalName(ws.Signal())
		}
	}
	c.mu.Lock()
	c.exit = code
	c.appEnded = true
	ranks := append([]*rankState(nil), c.order...)
	owed := c.owed()
	for _, rs := range c.order {
		if code < 0 && werr != nil {
			rs.issue("application: " + werr.Error())
		}
		if killedBy != "" {
			// Its measurements stop where the signal struck.
			rs.issue("application ended by " + killedBy)
		}
	}
	c.mu.Unlock()
	close(c.appExited)
	c.logf("application exited with status %d", code)
	if code >= 0 {
		// Every rank's application has ended with the command (its
		// stream's END says how, else the command's status); the
		// analysis goes on.
		for _, rs := range ranks {
			rs.mu.Lock()
			end := rs.end
			rs.mu.Unlock()
			if end < 0 {
				end = int32(code)
			}
			rs.exited(int(end))
		}
		for _, r := range owed {
			c.note(r, RankExited, code)
		}
	}
	return code
}

// appStreams are the streams of the application's processes, each read
// and analysed on a goroutine of its own, and their errors.
type appStreams struct {
	c      *Collector
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	conns  []net.Conn
	exited bool // the application exited: a process connecting now is late
	n      int  // connections accepted
}

// accept starts reading the stream of a process that connected.
func (s *appStreams) accept(ctx context.Context, conn net.Conn) {
	c := s.c
	// The launcher environment is read now, while the process lives;
	// a rank of its own is claimed now, any other (by order, or an
	// extra id for a rank already taken) at its first GPU work.
	pid := peerPID(conn)
	pr := c.readRank(pid, os.Getenv)
	s.mu.Lock()
	s.n++
	i := s.n
	s.conns = append(s.conns, conn)
	late := s.exited
	s.mu.Unlock()
	source := fmt.Sprintf("stream %d (pid %d)", i, pid)
	claim := func() *rankState {
		rs := c.assign(pid, pr)
		rs.logf("%s: rank by %s", source, rs.how)
		if late {
			rs.issue(fmt.Sprintf("pid %d connected after the application had exited", pid))
		}
		return rs
	}
	var rs *rankState
	if pr.ok && c.free(pr.own.Rank) {
		rs = claim() // now, so that no process numbered by order takes it
	}
	// Recorded under the rank's name; a rank found later is recorded
	// under the pid first and renamed.
	rec := ""
	if rs != nil {
		rec = recordPath(c.o.Record, rs.rank, i)
	} else {
		rec = recordPath(c.o.Record, -1, i)
		if rankPattern.MatchString(c.o.Record) {
			rec = rankPattern.ReplaceAllString(c.o.Record, fmt.Sprintf("pid%d", pid))
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer conn.Close()
		// ctx is cancelled only when an interruption's StopTimeout is
		// over: until then the streams of an application being stopped
		// are read and analysed, their data still worth keeping.
		got, err := c.stream(ctx, rs, claim, conn, source, rec)
		if rs == nil && rec != "" && rankPattern.MatchString(c.o.Record) {
			if got != nil {
				if rerr := os.Rename(rec, recordPath(c.o.Record, got.rank, i)); rerr != nil {
					c.recordFailed(rerr)
				}
			} else {
				os.Remove(rec) // no GPU work: nothing worth keeping
			}
		}
		// The rank is done when its stream is: its done item goes out
		// now, not when the last process of the job ends.
		if got != nil {
			err = errors.Join(err, got.publishDone(ctx))
		}
		if err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
	}()
}

// drain waits for the streams to end.
func (s *appStreams) drain() {
	c := s.c
	// Streams normally end with the processes that write them; a child
	// that outlives the application gets DrainTimeout to finish.
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.o.DrainTimeout):
		c.mu.Lock()
		for _, rs := range c.order {
			rs.issue(fmt.Sprintf("streams still open %v after the application exited were cut", c.o.DrainTimeout))
		}
		c.mu.Unlock()
		s.mu.Lock()
		for _, cn := range s.conns {
			cn.Close()
		}
		s.mu.Unlock()
		<-done
	}
}

// DefaultNice is the collector's nice value while the application runs,
// unless set: on the H100's 16 cores, loop_reload's wall time under the
// collector fell from 6.91x native to 6.20x with 10 (and 6.35x with 19),
// dominant_load's from 1.90x to 1.80x, single_value's from 3.17x to
// 2.99x (median of 3 runs each, docs/overhead.md).
const DefaultNice = 10
