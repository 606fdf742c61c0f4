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

// The example's session prints what the specification's commander prints,
// with each command's exit status, and the server drains at exit.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	assert.Equal(t, `$ jobCommander issueJob [echo hello from the server]
JOB <job_1, echo hello from the server> SUBMITTED
-----job_1 output start-----
hello from the server
-----job_1 output end-----
(exit status 0)
$ jobCommander setConcurrency [2]
CONCURRENCY SET AT 2
(exit status 0)
$ jobCommander issueJob [sh -c echo 'why it failed' >&2; exit 3]
JOB <job_2, sh -c 'echo '\''why it failed'\'' >&2; exit 3'> SUBMITTED
-----job_2 output start-----
-----job_2 output end-----
why it failed
(exit status 3)
$ jobCommander poll []
(exit status 0)
$ jobCommander exit []
SERVER TERMINATED
(exit status 0)
`, out.String())
}
