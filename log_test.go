package laboro_test

import (
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
