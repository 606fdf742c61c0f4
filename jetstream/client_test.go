package jetstream

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SubmitAll stores a batch that comes one job at a time, more than it
// keeps in memory, numbered as Submit numbers; a batch with
// one bad job, or whose source fails, stores none.
func TestSubmitAll(t *testing.T) {
	nc := setup(t)
	cl := &Client{Conn: nc}
	ctx := testCtx(t, time.Minute)
	pad := strings.Repeat("x", 1000)
	const n = 3 * spoolInMemory / 1000 // three times what stays in memory
	jobs := func(bad error, badID bool) func(func(laboro.Job, error) bool) {
		return func(yield func(laboro.Job, error) bool) {
			for i := range n {
				job := laboro.Job{Script: fmt.Sprintf("true %d %s", i, pad)}
				if i == n-1 && badID {
					job.ID = "a b"
				}
				if !yield(job, nil) {
					return
				}
			}
			if bad != nil {
				yield(laboro.Job{}, bad)
			}
		}
	}
	stored := func(batch string) int {
		js, err := natsjs.New(nc)
		require.NoError(t, err)
		got, err := batchSize(ctx, js, cl.Config.withDefaults(), cl.Config.withDefaults().submitSubject(batch))
		require.NoError(t, err)
		return got
	}

	got, err := cl.SubmitAll(ctx, "big", jobs(nil, false))
	require.NoError(t, err)
	assert.Equal(t, n, got)
	assert.Equal(t, n, stored("big"))
	ids, err := cl.Submit(ctx, "big", []laboro.Job{{Script: "true"}})
	require.NoError(t, err)
	assert.Equal(t, []string{fmt.Sprintf("big-%d", n+1)}, ids, "numbered after the batch's jobs")

	_, err = cl.SubmitAll(ctx, "bad", jobs(nil, true))
	assert.ErrorContains(t, err, fmt.Sprintf("(job %d of the batch)", n))
	readErr := errors.New("line 7: too long")
	_, err = cl.SubmitAll(ctx, "bad", jobs(readErr, false))
	assert.ErrorIs(t, err, readErr)
	assert.Zero(t, stored("bad"), "nothing stored of a batch that failed")
}

// A full SUBMITTED stream refuses what comes, with ErrSubmissionsFull,
// and drops nothing it holds: the jobs stored before it run.
func TestSubmissionsFull(t *testing.T) {
	nc := setup(t)
	cfg := Config{Dir: t.TempDir(), SubmittedMaxBytes: 4 << 10}
	cl := &Client{Conn: nc, Config: cfg}
	ctx := testCtx(t, time.Minute)
	var jobs []laboro.Job
	for range 100 {
		jobs = append(jobs, laboro.Job{Command: "echo a command line of some length, as jobs have"})
	}
	_, err := cl.Submit(ctx, "b", jobs)
	require.ErrorIs(t, err, ErrSubmissionsFull)
	assert.ErrorContains(t, err, "maximum bytes exceeded")

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, cfg.withDefaults().submitStream())
	require.NoError(t, err)
	info := s.CachedInfo()
	stored := info.State.Msgs
	require.NotZero(t, stored)
	assert.Less(t, stored, uint64(100))
	assert.Equal(t, uint64(1), info.State.FirstSeq, "a submission was dropped to make room")
	_, err = cl.Submit(ctx, "c", jobs[:1])
	require.ErrorIs(t, err, ErrSubmissionsFull)

	// What is stored runs.
	startWorker(t, nc, Config{}, 2)
	startService(t, nc, cfg, 4)
	b, err := cl.Wait(ctx, "b", int(stored), 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, int(stored), b.Succeeded)
}

// A SUBMITTED stream that holds more than its new bound when a Service
// sets it keeps every submission, and refuses new ones.
func TestSubmissionsBoundLater(t *testing.T) {
	nc := setup(t)
	ctx := testCtx(t, time.Minute)
	cl := &Client{Conn: nc, Config: Config{Dir: t.TempDir(), SubmittedMaxBytes: -1}}
	var jobs []laboro.Job
	for range 100 {
		jobs = append(jobs, laboro.Job{Command: "echo a command line of some length, as jobs have"})
	}
	_, err := cl.Submit(ctx, "b", jobs)
	require.NoError(t, err)
	cfg := Config{SubmittedMaxBytes: 4 << 10}
	require.NoError(t, ensureSubmitted(ctx, nc, cfg.withDefaults(), true))
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, cfg.withDefaults().submitStream())
	require.NoError(t, err)
	assert.Equal(t, uint64(100), s.CachedInfo().State.Msgs)
	assert.Equal(t, uint64(1), s.CachedInfo().State.FirstSeq)
	_, err = cl.Submit(ctx, "c", jobs[:1])
	require.ErrorIs(t, err, ErrSubmissionsFull)
}
