package collector

import (
	"net"
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
