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

// The example runs its three jobs through the whole fleet, and shows how
// each ended: what a reader of it expects to see.
func TestRun(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	assert.Equal(t, "batch example: 3 jobs, 2 succeeded, 1 failed\n"+
		"example-1 succeeded, exit 0: \"hello from a worker\\n\"\n"+
		"example-2 failed, exit 3: \"\", stderr \"no input file\\n\"\n"+
		"example-3 succeeded, exit 0: \"args, boundaries kept\\n\"\n", out.String())
}
