package jetstream

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockDir takes dir for this process until the returned file is closed
// (or the process ends): an error matching ErrDataInUse while another
// process holds it.
func lockDir(dir string) (*os.File, error) {
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
			return nil, fmt.Errorf("%w: %s", ErrDataInUse, dir)
		}
		return nil, fmt.Errorf("jetstream: locking %s: %w", dir, err)
	}
	return f, nil
}
