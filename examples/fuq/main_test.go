package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The job's four tasks run on the worker; the one that fails fails the
// job, and each task's log holds what it printed.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	assert.Equal(t, `job job_1 failed
task 1 done (done): log "task 1 computed 1\n"
task 2 done (done): log "task 2 computed 4\n"
task 3 failed (error encountered: exit status 3): log "no input for task 3\n"
task 4 done (done): log "task 4 computed 16\n"
`, out.String())
}
