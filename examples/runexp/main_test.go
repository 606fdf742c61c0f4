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

// Each experiment runs on the runner and its report says how it went; the
// one that failed is all that is left to run.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	assert.Contains(t, out.String(), "sweep/a succeeded: runexp summary: success\n")
	assert.Contains(t, out.String(), "sweep/b failed: runexp summary: failure\n")
	assert.Contains(t, out.String(), "sweep/c succeeded: runexp summary: success\n")
	assert.Contains(t, out.String(), "left to run: sweep/b\n")
	assert.Equal(t, 4, bytes.Count(out.Bytes(), []byte("\n")), out.String())
}
