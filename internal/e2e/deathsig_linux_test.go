package e2e_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/laboro-go/laboro/internal/e2e"
)

// A test process that ends without its cleanups (here, killed) takes the
// binaries it started with it: none is left running, holding its ports.
func TestStartedProcessEndsWithTheTestProcess(t *testing.T) {
	if os.Getenv("E2E_DEATHSIG_HELPER") != "" {
		// The test process to be killed: it starts a binary, tells its
		// pid, and waits to be killed.
		p := e2e.Start(t, nil, "/bin/sleep", "600")
		os.Stdout.WriteString(strconv.Itoa(p.Cmd.Process.Pid) + "\n")
		select {}
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestStartedProcessEndsWithTheTestProcess$")
	helper.Env = append(os.Environ(), "E2E_DEATHSIG_HELPER=1", "TMPDIR="+t.TempDir())
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the helper's binary's pid")
	pid, err := strconv.Atoi(line[:len(line)-1])
	require.NoError(t, err)
	pidfd, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err)
	defer unix.Close(pidfd)
	t.Cleanup(func() { unix.Kill(pid, unix.SIGKILL) }) // should this test fail

	require.NoError(t, helper.Process.Kill())
	helper.Wait()
	// The pidfd becomes readable once the binary has ended; a binary left
	// running keeps it unreadable until the poll gives up.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 30_000)
	for err == unix.EINTR {
		n, err = unix.Poll(fds, 30_000)
	}
	require.NoError(t, err)
	require.Equal(t, 1, n, "the binary the killed test process started (pid %d) still runs", pid)
}
