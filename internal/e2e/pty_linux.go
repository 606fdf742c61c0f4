package e2e

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// OpenPTY returns the two ends of a new pseudo-terminal: what is written
// to tty is read from master. It skips the test where none can be made.
func OpenPTY(t testing.TB) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0)
	}
	if err == nil {
		tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		t.Fatalf("a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}
