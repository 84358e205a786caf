package collector

import (
	"net"
	"os"
	"syscall"
)

// peerPID is the process at the other end of a Unix socket connection
// (SO_PEERCRED: the process that connected, as the kernel saw it, in the
// collector's pid namespace), 0 if unknown.
func peerPID(conn net.Conn) int {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// acceptQueued takes a connection already waiting in ln's backlog, without
// waiting for one to come; ok is false when none waits (or on an error).
func acceptQueued(ln *net.UnixListener) (conn net.Conn, ok bool) {
	raw, err := ln.SyscallConn()
	if err != nil {
		return nil, false
	}
	nfd := -1
	raw.Control(func(fd uintptr) {
		for {
			// The listener is non-blocking: an empty backlog is EAGAIN.
			n, _, err := syscall.Accept4(int(fd), syscall.SOCK_CLOEXEC)
			if err == syscall.EINTR {
				continue
			}
			if err == nil {
				nfd = n
			}
			return
		}
	})
	if nfd < 0 {
		return nil, false
	}
	f := os.NewFile(uintptr(nfd), "stream")
	defer f.Close() // FileConn holds a duplicate
	conn, err = net.FileConn(f)
	return conn, err == nil
}

// acceptGrace is how long the accept loop goes on after the application
// exited: none, as acceptQueued takes what the backlog holds.
const acceptGrace = 0
