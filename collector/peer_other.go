//go:build !linux

package collector

import (
	"net"
	"time"
)

// peerPID is unknown off Linux: processes are then numbered in order of
// first CUDA use.
func peerPID(net.Conn) int { return 0 }

// acceptQueued cannot look into the backlog off Linux: the collector then
// waits acceptGrace for connections made before the application exited.
func acceptQueued(*net.UnixListener) (net.Conn, bool) { return nil, false }

const acceptGrace = 200 * time.Millisecond
