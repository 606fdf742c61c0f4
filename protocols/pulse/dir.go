package pulse

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrUnsafeDir is returned when the socket directory could be entered or
// changed by other users: anyone who can reach the sockets can pose as a
// worker (and be handed tasks, and report results) or as the controller.
var ErrUnsafeDir = errors.New("pulse: the socket directory is open to other users")

// checkDir refuses a socket directory that is not a directory of this
// user's with no rights for the group or others (0700). The controller
// creates a missing one so; one that exists is the operator's to fix, as
// tightening it here could lock out what else uses it.
func checkDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("pulse: the socket directory: %w", err)
	}
	if fi.Mode().Type() == os.ModeSymlink {
		// Followed, it could be changed under us to lead elsewhere.
		return fmt.Errorf("%w: %s is a symbolic link: give the directory it leads to", ErrUnsafeDir, dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o; chmod 700 %s, or choose another directory", ErrUnsafeDir, dir, uint32(perm), dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s belongs to another user", ErrUnsafeDir, dir)
	}
	return nil
}
