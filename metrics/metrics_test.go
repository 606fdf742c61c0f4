package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// What a scrape shows after jobs succeeded, failed and were stopped, and
// after the concurrency changed.
func TestCollector(t *testing.T) {
	col := metrics.New()
	ex, err := laboro.New(laboro.WithPoolSize(2), laboro.WithBufferSize(8),
		laboro.WithOutputDir(t.TempDir()))
	require.NoError(t, err)
	defer ex.Close()
	col.Attach(ex)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))

	ctx := context.Background()
	require.NoError(t, ex.SetConcurrency(0)) // hold the jobs in the buffer
	var handles []*laboro.Handle
	for _, job := range []laboro.Job{
		{ID: "ok", Command: "echo hello"},         // 6 bytes
		{ID: "bad", Script: "printf abc; exit 3"}, // 3 bytes
		{ID: "held", Command: "echo never"},
	} {
		h, err := ex.Submit(ctx, job)
		require.NoError(t, err)
		handles = append(handles, h)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP laboro_jobs_queued Jobs waiting in the buffer.
# TYPE laboro_jobs_queued gauge
laboro_jobs_queued 3
# HELP laboro_concurrency The concurrency level.
# TYPE laboro_concurrency gauge
laboro_concurrency 0
`), "laboro_jobs_queued", "laboro_concurrency"))

	require.NoError(t, ex.Stop("held"))
	require.NoError(t, ex.SetConcurrency(2))
	for _, h := range handles {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		if res.Output != nil {
			res.Output.Close()
		}
	}
	// Each job's counts are in before its Handle has its result.

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP laboro_jobs_started_total Jobs taken from the buffer to run.
# TYPE laboro_jobs_started_total counter
laboro_jobs_started_total 2
# HELP laboro_jobs_finished_total Jobs that ended, by status.
# TYPE laboro_jobs_finished_total counter
laboro_jobs_finished_total{status="cancelled"} 0
laboro_jobs_finished_total{status="failed"} 1
laboro_jobs_finished_total{status="killed"} 0
laboro_jobs_finished_total{status="stopped"} 1
laboro_jobs_finished_total{status="succeeded"} 1
laboro_jobs_finished_total{status="terminated before execution"} 0
laboro_jobs_finished_total{status="timed out"} 0
# HELP laboro_job_output_bytes_total Bytes of standard output the jobs wrote.
# TYPE laboro_job_output_bytes_total counter
laboro_job_output_bytes_total 9
# HELP laboro_jobs_running Jobs running now.
# TYPE laboro_jobs_running gauge
laboro_jobs_running 0
# HELP laboro_jobs_queued Jobs waiting in the buffer.
# TYPE laboro_jobs_queued gauge
laboro_jobs_queued 0
# HELP laboro_buffer_size The buffer's capacity.
# TYPE laboro_buffer_size gauge
laboro_buffer_size 8
`), "laboro_jobs_started_total", "laboro_jobs_finished_total", "laboro_job_output_bytes_total", "laboro_jobs_running", "laboro_jobs_queued", "laboro_buffer_size"))
	assert.Equal(t, 1, testutil.CollectAndCount(col, "laboro_job_run_seconds"))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		switch f.GetName() {
		case "laboro_job_run_seconds":
			assert.EqualValues(t, 2, f.GetMetric()[0].GetHistogram().GetSampleCount(), "the two jobs that ran")
		case "laboro_job_queue_wait_seconds":
			assert.EqualValues(t, 2, f.GetMetric()[0].GetHistogram().GetSampleCount(), "the two jobs that started")
		}
	}
}

// For a fleet, the workers connected are read when scraped.
func TestCollectorCountsWorkers(t *testing.T) {
	col := metrics.New()
	assert.Equal(t, 0, testutil.CollectAndCount(col, "laboro_workers_connected"), "not a fleet")
	workers := 3
	col.CountWorkers(func() int { return workers })
	assert.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(`
# HELP laboro_workers_connected Workers of the fleet heard from lately (with CountWorkers).
# TYPE laboro_workers_connected gauge
laboro_workers_connected 3
`), "laboro_workers_connected"))
	workers = 1
	assert.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(`
# HELP laboro_workers_connected Workers of the fleet heard from lately (with CountWorkers).
# TYPE laboro_workers_connected gauge
laboro_workers_connected 1
`), "laboro_workers_connected"))
}
