package laboro_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro"
)

// Running shows the jobs that run, with their process and the output file
// that grows as they write: what a console follows live.
func TestRunningShowsProcessAndOutput(t *testing.T) {
	ex, err := laboro.New(laboro.WithPoolSize(2), laboro.WithConcurrency(2), laboro.WithOutputDir(t.TempDir()))
	require.NoError(t, err)
	defer ex.Close()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	h, err := ex.Submit(context.Background(), laboro.Job{ID: "live", Script: "echo first line; read x; echo second line", Stdin: r})
	require.NoError(t, err)
	fn, err := ex.Submit(context.Background(), laboro.Job{ID: "fn", Func: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}})
	require.NoError(t, err)

	var live laboro.Running
	require.Eventually(t, func() bool {
		running := ex.Running()
		if len(running) < 2 {
			return false
		}
		for _, run := range running {
			if run.Job.ID == "live" && run.Output != "" {
				b, _ := os.ReadFile(run.Output)
				live = run
				return string(b) == "first line\n"
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "the running job's output file, with its first line")
	assert.Positive(t, live.PID)
	assert.False(t, live.Started.IsZero())
	ids := map[string]int{}
	for _, run := range ex.Running() {
		ids[run.Job.ID] = run.PID
	}
	assert.Equal(t, map[string]int{"live": live.PID, "fn": 0}, ids, "a Func job runs with no process")

	w.Close()
	res, err := h.Wait(context.Background())
	require.NoError(t, err)
	defer res.Output.Close()
	assert.Equal(t, live.PID, res.PID)
	assert.Equal(t, live.Output, res.Output.Path(), "the file followed is the job's output")
	require.NoError(t, ex.Cancel("fn"))
	_, err = fn.Wait(context.Background())
	require.NoError(t, err)
	assert.Empty(t, ex.Running())
}
