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
