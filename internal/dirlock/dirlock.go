// Package dirlock takes a directory for one process at a time, with the
// kernel's lock (flock), which goes with the process however it ends.
package dirlock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ErrHeld is returned by Lock while another process holds the directory.
var ErrHeld = errors.New("dirlock: the directory is held by another process")

// Lock takes dir, which must exist, until the returned file is closed or
// the process ends. It returns an error matching ErrHeld while another
// process (or another Lock of this one) holds it.
func Lock(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { err = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) })
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrHeld
		}
		return nil, &os.PathError{Op: "lock", Path: dir, Err: err}
	}
	return f, nil
}
