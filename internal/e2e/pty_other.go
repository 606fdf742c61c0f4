//go:build !linux

package e2e

import (
	"os"
	"testing"
)

// OpenPTY skips the test: pseudo-terminals are made on Linux alone here.
func OpenPTY(t testing.TB) (master, tty *os.File) {
	t.Helper()
	t.Skip("pseudo-terminals are made on Linux alone")
	return nil, nil
}
