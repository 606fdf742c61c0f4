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
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	away := cli.NewAway("the master", time.Hour, &out)
	away.Back() // never gone: nothing to say
	assert.Empty(t, out.String())

	require.NoError(t, away.Lost(ctx, refused))
	require.NoError(t, away.Lost(ctx, refused))
	away.Back()
	assert.Equal(t, "the master went away (connection refused); waiting for it to come back\nthe master is back\n", out.String())

	out.Reset()
	require.NoError(t, away.Lost(ctx, refused))
	assert.Equal(t, "the master went away (connection refused); waiting for it to come back\n", out.String(),
		"gone again after it came back: said again")
}

func TestAwayGivesUpAfterItsLimit(t *testing.T) {
	var out bytes.Buffer
	refused := errors.New("connection refused")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	away := cli.NewAway("the foreman", 0, &out)
	require.NoError(t, away.Lost(ctx, refused))
	err := away.Lost(ctx, refused)
	require.ErrorIs(t, err, refused)
	assert.EqualError(t, err, "the foreman has been away for 0s: connection refused")

	ended, end := context.WithCancel(t.Context())
	end()
	assert.ErrorIs(t, cli.NewAway("the foreman", time.Hour, &out).Lost(ended, refused), context.Canceled)
}
