package runexp

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// waitAcked waits until every byte written on rw, a TCP connection, has
// been acknowledged by the peer's host: until the socket's send queue
// (SIOCOUTQ: bytes not yet sent or not yet acknowledged) is empty. There
// is no event for it, so it looks again every millisecond or so. A
// connection that is not a socket returns at once.
func waitAcked(rw any, deadline time.Time) error {
	sc, ok := rw.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		var queued int
		var qerr error
		if err := raw.Control(func(fd uintptr) { queued, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
			return err
		}
		if qerr != nil || queued == 0 { // not a TCP socket (qerr), or all acknowledged
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runexp: the peer did not acknowledge %d bytes: %w", queued, os.ErrDeadlineExceeded)
		}
		time.Sleep(wait)
	}
}
