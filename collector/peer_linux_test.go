package collector

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A connection made while nobody accepted is taken from the backlog at
// once, the one after it too, and an empty backlog answers at once.
func TestAcceptQueuedTakesTheBacklog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := acceptQueued(ln); ok {
		t.Fatal("accepted from an empty backlog")
	}
	var dialed []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dialed = append(dialed, c)
	}
	for i := range dialed {
		conn, ok := acceptQueued(ln)
		if !ok {
			t.Fatalf("connection %d of the backlog not taken", i)
		}
		if pid := peerPID(conn); pid != os.Getpid() {
			t.Errorf("connection %d: peer pid %d, want %d", i, pid, os.Getpid())
		}
		if _, err := dialed[i].Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := conn.Read(b); err != nil || b[0] != byte(i) {
			t.Errorf("connection %d: read %v %v, want the byte its peer wrote", i, b, err)
		}
		conn.Close()
	}
	if _, ok := acceptQueued(ln); ok {
		t.Fatal("accepted a third connection from a backlog of two")
	}
}
