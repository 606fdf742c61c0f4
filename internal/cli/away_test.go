package cli_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAwaySaysGoneOnceAndBack(t *testing.T) {
	var out bytes.Buffer
	refused := errors.New("connection refused")
	away := cli.NewAway("the master", time.Hour, &out)
	away.Back() // never gone: nothing to say
	assert.Empty(t, out.String())

	require.NoError(t, away.Lost(t.Context(), refused))
	require.NoError(t, away.Lost(t.Context(), refused))
	away.Back()
	assert.Equal(t, "the master went away (connection refused); waiting for it to come back\nthe master is back\n", out.String())

	out.Reset()
	require.NoError(t, away.Lost(t.Context(), refused))
	assert.Equal(t, "the master went away (connection refused); waiting for it to come back\n", out.String(),
		"gone again after it came back: said again")
}

func TestAwayGivesUpAfterItsLimit(t *testing.T) {
	var out bytes.Buffer
	refused := errors.New("connection refused")
	away := cli.NewAway("the foreman", 0, &out)
	require.NoError(t, away.Lost(t.Context(), refused))
	err := away.Lost(t.Context(), refused)
	require.ErrorIs(t, err, refused)
	assert.EqualError(t, err, "the foreman has been away for 0s: connection refused")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, cli.NewAway("the foreman", time.Hour, &out).Lost(ctx, refused), context.Canceled)
}
