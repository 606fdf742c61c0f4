package laboro_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// An Executor with a logger logs each job that fails or times out once,
// with its id, command, exit status, error and the end of its standard
// error: what an operator reads in a server's log. Successes and the
// user's own cancellations are not logged.
func TestFailedJobLoggedOnce(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ex := newExecutor(t, laboro.WithLogger(zap.New(core)))
	ctx := testCtx(t)
	for _, job := range []laboro.Job{
		{ID: "ok", Command: "true"},
		{ID: "bad", Script: "echo 'no such input' >&2; exit 3"},
	} {
		h, err := ex.Submit(ctx, job)
		require.NoError(t, err)
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		res.Output.Close()
	}
	h, err := ex.Submit(ctx, laboro.Job{ID: "cancelled", Command: "sleep 60"})
	require.NoError(t, err)
	require.NoError(t, ex.Cancel(h.ID()))
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	res.Output.Close()

	failed := logs.FilterMessage("job failed").AllUntimed()
	require.Len(t, failed, 1)
	fields := failed[0].ContextMap()
	assert.Equal(t, zap.WarnLevel, failed[0].Level)
	assert.Equal(t, "bad", fields["job"])
	assert.Equal(t, "echo 'no such input' >&2; exit 3", fields["command"])
	assert.Equal(t, "failed", fields["status"])
	assert.EqualValues(t, 3, fields["exit"])
	assert.Equal(t, "exit status 3", fields["error"])
	assert.Equal(t, "no such input\n", fields["stderr"])
}

// source names a script job by its origin, as a protocol's Payload does.
type source string

func (s source) String() string { return string(s) }

// A failed script whose Payload has a String (a job made from a file) is
// logged by it, not by its text; a script without one, by its text.
func TestFailedScriptLoggedByItsPayload(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ex := newExecutor(t, laboro.WithLogger(zap.New(core)))
	ctx := testCtx(t)
	long := "#!/bin/sh\n# a long header of comments\n" + strings.Repeat("# and more\n", 40) + "exit 3\n"
	for _, job := range []laboro.Job{
		{ID: "from-file", Script: long, Payload: source("runs/a/one.sh")},
		{ID: "inline", Script: "exit 4"},
	} {
		h, err := ex.Submit(ctx, job)
		require.NoError(t, err)
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		res.Output.Close()
	}
	failed := logs.FilterMessage("job failed").AllUntimed()
	require.Len(t, failed, 2)
	commands := map[any]any{}
	for _, e := range failed {
		commands[e.ContextMap()["job"]] = e.ContextMap()["command"]
	}
	assert.Equal(t, map[any]any{"from-file": "runs/a/one.sh", "inline": "exit 4"}, commands)
}

// A job running when its Executor is closed is logged once as killed,
// with how far it got: the end of its standard error.
func TestKilledJobLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ex, err := laboro.New(laboro.WithLogger(zap.New(core)))
	require.NoError(t, err)
	ctx := testCtx(t)
	fifo := filepath.Join(t.TempDir(), "halfway")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	h, err := ex.Submit(ctx, laboro.Job{ID: "long", Script: "echo 'step 1 of 2' >&2; echo >" + fifo + "; sleep 60"})
	require.NoError(t, err)
	halfway, err := os.ReadFile(fifo) // until the job has written its stderr
	require.NoError(t, err)
	require.Equal(t, "\n", string(halfway))
	require.NoError(t, ex.Close())
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	res.Output.Close()
	require.Equal(t, laboro.StatusKilled, res.Status)

	killed := logs.FilterMessage("job killed").AllUntimed()
	require.Len(t, killed, 1)
	fields := killed[0].ContextMap()
	assert.Equal(t, zap.WarnLevel, killed[0].Level)
	assert.Equal(t, "long", fields["job"])
	assert.Equal(t, "killed", fields["status"])
	assert.Equal(t, "step 1 of 2\n", fields["stderr"])
	assert.Empty(t, logs.FilterMessage("job failed").AllUntimed())
}
