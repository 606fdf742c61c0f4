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

// One job comes back Done with its result, the other Failed with why.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "job 1 (shout): Done on w1\n  result: {\"WORD\":\"HELLO\"}\n")
	assert.Regexp(t, `job 2 \(picky\): Failed on w1\n  why: .*exit status 4.*picky: no params I like`, out.String())
}
