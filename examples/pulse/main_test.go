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

// Each task comes back solved by a worker, in the order submitted.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	assert.Equal(t, "job_1 succeeded: \"FIRST TASK\\n\"\njob_2 succeeded: \"SECOND TASK\\n\"\njob_3 succeeded: \"THIRD TASK\\n\"\n", out.String())
}
