package fuq

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkPeer refuses a control socket served by another user: the client
// would hand a stranger its jobs' commands and directories, and take its
// answers for the foreman's.
func checkPeer(conn net.Conn, path string) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("fuq: who serves %s: %w", path, cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s is served by user %d (process %d), not by this user", ErrForeignSocket, path, cred.Uid, cred.Pid)
	}
	return nil
}
