package pulse

import (
	"net"
	"os"

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

// taskFile returns a file, with no name, to keep a task's n bytes in: for a
// small task, one in memory (memfd), which costs the file system nothing;
// else one in dir, unlinked at once.
func taskFile(dir string, n uint64) (*os.File, error) {
	if n <= smallTask {
		if fd, err := unix.MemfdCreate("pulse-task", unix.MFD_CLOEXEC); err == nil {
			return os.NewFile(uintptr(fd), "pulse-task"), nil
		}
	}
	return unlinkedFile(dir)
}
