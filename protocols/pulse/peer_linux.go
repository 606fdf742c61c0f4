package pulse

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerPID returns the pid of the process at the other end of a Unix
// connection (SO_PEERCRED).
func peerPID(conn net.Conn) (int, bool) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil || cred.Pid <= 0 {
		return 0, false
	}
	return int(cred.Pid), true
}
