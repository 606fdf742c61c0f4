package fuq

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A running task's output is in the worker's own directory, not right in
// the logging directory. A worker that runs a task for a logging
// directory removes what dead workers left there (their lock is free),
// and leaves a live worker's directory alone, and one it cannot tell
// dead. It removes its own when it ends.
func TestWorkerOutputsLeaveNothingBehind(t *testing.T) {
	s := startSystem(t, &Foreman{})
	logDir := filepath.Join(s.dir, "logs")
	require.NoError(t, os.Mkdir(logDir, 0o755))
	leftover := func(name string, lock bool) string {
		dir := filepath.Join(logDir, runningPrefix+name)
		require.NoError(t, os.Mkdir(dir, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "4242.output"), []byte("half a task's output"), 0o600))
		if lock {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "lock"), nil, 0o600))
		}
		return dir
	}
	dead := leftover("dead", true)
	unknown := leftover("nolock", false)
	live := leftover("live", true)
	held, err := os.OpenFile(filepath.Join(live, "lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer held.Close()
	require.NoError(t, syscall.Flock(int(held.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "the live worker's lock")
	// Not ours by its name: never touched.
	require.NoError(t, os.WriteFile(filepath.Join(logDir, "notes.output"), nil, 0o600))

	_, ran := s.worker(s.addr, 1)
	hold := filepath.Join(s.dir, "hold")
	cmd := s.script("echo task $1; touch " + hold + ".started; while [ ! -e " + hold + " ]; do sleep 0.01; done\n")
	h, err := s.ex.Submit(t.Context(), NewJob("j", cmd, 1, s.dir, logDir))
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := os.Stat(hold + ".started"); return err == nil }, 30*time.Second, time.Millisecond)

	// The output gets its name <pid>.output once the process has started,
	// which may be after the task's first command ran.
	var outputs, mine []string
	require.Eventually(t, func() bool {
		outputs, err = filepath.Glob(filepath.Join(logDir, runningPrefix+"*", "*.output"))
		require.NoError(t, err)
		mine = mine[:0]
		for _, o := range outputs {
			if !strings.HasPrefix(o, live) && !strings.HasPrefix(o, unknown) {
				mine = append(mine, o)
			}
		}
		return len(mine) > 0
	}, 30*time.Second, time.Millisecond, "the running task's output, in the worker's directory: %v", outputs)
	require.Len(t, mine, 1, "the running task's output, in the worker's directory: %v", outputs)
	assert.NoDirExists(t, dead, "a dead worker's outputs are removed")
	assert.FileExists(t, filepath.Join(live, "4242.output"), "a live worker's are kept")
	assert.FileExists(t, filepath.Join(unknown, "4242.output"), "and those of one not known dead")

	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	require.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	s.f.StopWorkers(0)
	require.ErrorIs(t, <-ran, ErrStopped)
	entries, err := os.ReadDir(logDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"j_1.log", "notes.output", runningPrefix + "live", runningPrefix + "nolock"}, names,
		"the worker's own directory is gone with it")
}
