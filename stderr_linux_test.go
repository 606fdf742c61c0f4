package laboro

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Without pidfds (kernels before 5.3), the tail is still collected, and a
// background child that keeps standard error open delays the result by
// about stderrGrace, not until it exits.
func TestStderrTailWithoutPidfd(t *testing.T) {
	pidfdOpen = func(int, int) (int, error) { return -1, unix.ENOSYS }
	t.Cleanup(func() { pidfdOpen = unix.PidfdOpen })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r := &ProcessRunner{Dir: dir}

	res := r.Run(ctx, Job{Args: []string{"sh", "-c", "head -c 100000 /dev/zero >&2; echo failed >&2; exit 4"}})
	require.NoError(t, res.Output.Close())
	assert.Equal(t, 4, res.ExitCode)
	assert.Len(t, res.Stderr, DefaultStderrTail)
	assert.True(t, strings.HasSuffix(string(res.Stderr), "\x00failed\n"))

	pidFile := filepath.Join(dir, "child.pid")
	start := time.Now()
	res = r.Run(ctx, Job{Script: fmt.Sprintf("sleep 30 & echo $! > %s; echo bye >&2", pidFile)})
	elapsed := time.Since(start)
	require.NoError(t, res.Output.Close())
	assert.Equal(t, StatusSucceeded, res.Status)
	assert.Equal(t, "bye\n", string(res.Stderr))
	assert.Less(t, elapsed, 10*time.Second)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(child, syscall.SIGKILL))
}
