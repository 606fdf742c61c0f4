package jetstream

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
)

// startWorkerProcess runs this test binary as a worker process.
func startWorkerProcess(t *testing.T, url string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkerURL+"="+url, envWorkerDir+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func TestWorkerProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	nc, url := setupURL(t)
	cfg := Config{AckWait: time.Second}
	m := newManager(t, nc, cfg)

	workers := []*exec.Cmd{}
	for range 3 {
		workers = append(workers, startWorkerProcess(t, url))
	}
	marks := filepath.Join(t.TempDir(), "started")

	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(48), laboro.WithConcurrency(48),
		laboro.WithBufferSize(64))
	require.NoError(t, err)
	defer ex.Close()

	const n = 1000
	ctx := testCtx(t, 3*time.Minute)
	var finished atomic.Int64
	handles := make([]*laboro.Handle, 0, n)
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for finished.Load() < n/5 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		workers[0].Process.Signal(syscall.SIGKILL) // mid-job: it runs 4 at a time
	}()
	for i := range n {
		h, err := ex.Submit(ctx, laboro.Job{
			ID:     fmt.Sprintf("p%d", i),
			Script: fmt.Sprintf("echo %d >> %s; sleep 0.02; echo %d", i, marks, i),
		})
		require.NoError(t, err)
		handles = append(handles, h)
		go func() { <-h.Done(); finished.Add(1) }()
	}
	for i, h := range handles {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		require.Equal(t, laboro.StatusSucceeded, res.Status, "job %d: %v", i, res.Err)
		require.Equal(t, fmt.Sprintf("%d\n", i), string(output(t, res)))
	}
	<-killed
	require.NoError(t, ex.Shutdown(ctx))

	started, err := os.ReadFile(marks)
	require.NoError(t, err)
	lines := strings.Count(string(started), "\n")
	t.Logf("%d jobs, %d runs started, %d result messages", n, lines, streamMsgs(t, nc, "LABORO_RESULTS"))
	require.Greater(t, lines, n, "the killed worker's jobs ran again")
	require.GreaterOrEqual(t, streamMsgs(t, nc, "LABORO_RESULTS"), uint64(n))
	require.Eventually(t, func() bool { return streamMsgs(t, nc, "LABORO_JOBS") == 0 },
		10*time.Second, 50*time.Millisecond)

	for _, w := range workers[1:] {
		require.NoError(t, w.Process.Signal(syscall.SIGTERM))
		require.NoError(t, w.Wait())
	}
}
