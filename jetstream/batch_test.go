package jetstream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The batch of the tests that take servers away: n jobs (managerJob) run
// through an Executor of 32 over a Manager, and what they must leave.

// reconnecting connects to url (a list, comma-separated) for a test that
// stops servers: it reconnects quickly and forever.
func reconnecting(t *testing.T, name, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

type batch struct {
	t       *testing.T
	ex      *laboro.Executor
	marks   string // each run appends its job's number
	handles []*laboro.Handle
}

func submitBatch(t *testing.T, ctx context.Context, m *Manager, n int) *batch {
	t.Helper()
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(32), laboro.WithConcurrency(32),
		laboro.WithBufferSize(n))
	require.NoError(t, err)
	t.Cleanup(func() { ex.Close() })
	b := &batch{t: t, ex: ex, marks: filepath.Join(t.TempDir(), "marks"), handles: make([]*laboro.Handle, n)}
	for i := range n {
		b.handles[i], err = ex.Submit(ctx, managerJob(i, b.marks))
		require.NoError(t, err)
	}
	return b
}

// finished is how many jobs have their result.
func (b *batch) finished() int {
	k := 0
	for _, h := range b.handles {
		select {
		case <-h.Done():
			k++
		default:
		}
	}
	return k
}

// awaitFinished waits until k jobs have their result.
func (b *batch) awaitFinished(ctx context.Context, k int) {
	b.t.Helper()
	for b.finished() < k {
		require.NoError(b.t, ctx.Err(), "%d results", b.finished())
		time.Sleep(2 * time.Millisecond)
	}
}

// requireOutputs requires every job to succeed with its own output, then
// drains the Executor.
func (b *batch) requireOutputs(ctx context.Context) {
	b.t.Helper()
	var failed []string
	for i, h := range b.handles {
		res, err := h.Wait(ctx)
		require.NoError(b.t, err, "job %d: %d results", i, b.finished())
		switch {
		case res.Status != laboro.StatusSucceeded:
			failed = append(failed, fmt.Sprintf("job %d %v: %v", i, res.Status, res.Err))
			res.Output.Close()
		default:
			if out := string(output(b.t, res)); out != fmt.Sprintf("%d\n", i) {
				failed = append(failed, fmt.Sprintf("job %d output %q", i, out))
			}
		}
	}
	require.Empty(b.t, failed, "%d jobs of %d without their output", len(failed), len(b.handles))
	require.NoError(b.t, b.ex.Shutdown(testCtx(b.t, 10*time.Second)))
}

// requireRuns requires every job to have run at least once, and returns
// how many runs there were and which jobs ran more than once.
func (b *batch) requireRuns() (runs int, again []int) {
	b.t.Helper()
	data, err := os.ReadFile(b.marks)
	require.NoError(b.t, err)
	count := make([]int, len(b.handles))
	lines := strings.Fields(string(data))
	for _, s := range lines {
		i, err := strconv.Atoi(s)
		require.NoError(b.t, err, "marks %q", s)
		require.True(b.t, i >= 0 && i < len(count), "marks %d", i)
		count[i]++
	}
	for i, k := range count {
		require.NotZero(b.t, k, "job %d never ran", i)
		if k > 1 {
			again = append(again, i)
		}
	}
	return len(lines), again
}

// requireResults requires the RESULTS stream, read through nc, to hold a
// result for every job, and the work queue to empty once the jobs run again
// have been acknowledged (or, for a job the server kept after its
// acknowledgement, once the Manager's sweep removed it). It returns the number of result messages.
func (b *batch) requireResults(nc *nats.Conn) uint64 {
	b.t.Helper()
	js, err := natsjs.New(nc)
	require.NoError(b.t, err)
	results, err := js.Stream(testCtx(b.t, 10*time.Second), "LABORO_RESULTS")
	require.NoError(b.t, err)
	// In a cluster the stream's leader, which answers, may store the last
	// results a moment after a replica delivered them to the Manager: the
	// stream is waited for until it holds every one.
	var info *natsjs.StreamInfo
	ctx := testCtx(b.t, 30*time.Second)
	for {
		info, err = results.Info(ctx, natsjs.WithSubjectFilter("LABORO.results.>"))
		require.NoError(b.t, err)
		missing := slices.IndexFunc(b.handles, func(h *laboro.Handle) bool {
			return info.State.Subjects["LABORO.results."+h.ID()] == 0
		})
		if missing < 0 {
			break
		}
		require.NoError(b.t, ctx.Err(), "no result for job %d", missing)
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(b.t, info.State.Subjects, len(b.handles))
	if !assert.Eventually(b.t, func() bool { return streamMsgs(b.t, nc, "LABORO_JOBS") == 0 },
		30*time.Second, 50*time.Millisecond) {
		b.t.Fatalf("left in the work queue: %s", workQueue(b.t, nc))
	}
	return info.State.Msgs
}

// workQueue describes the jobs left in the JOBS stream, and the workers'
// consumer.
func workQueue(t *testing.T, nc *nats.Conn) string {
	ctx := testCtx(t, 10*time.Second)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	jobs, err := js.Stream(ctx, "LABORO_JOBS")
	require.NoError(t, err)
	info, err := jobs.Info(ctx, natsjs.WithSubjectFilter("LABORO.jobs.>"))
	require.NoError(t, err)
	cons, err := jobs.Consumer(ctx, consumerName)
	require.NoError(t, err)
	ci, err := cons.Info(ctx)
	require.NoError(t, err)
	return fmt.Sprintf("%v (stream %+v); consumer: delivered %+v, ack floor %+v, pending %d, ack pending %d, redelivered %d",
		info.State.Subjects, info.State, ci.Delivered, ci.AckFloor, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
}
