package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
)

func TestBackoffDoublesUpToMaxAndResets(t *testing.T) {
	b := transport.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	var got []time.Duration
	for range 6 {
		got = append(got, b.Next())
	}
	assert.Equal(t, []time.Duration{100, 200, 400, 800, 1000, 1000}, scale(got, time.Millisecond))
	b.Reset()
	assert.Equal(t, 100*time.Millisecond, b.Next())

	var zero transport.Backoff
	assert.Equal(t, transport.DefaultBackoffMin, zero.Next())
	for range 10 {
		zero.Next()
	}
	assert.Equal(t, transport.DefaultBackoffMax, zero.Next())
}

func TestBackoffJitterShortensOnly(t *testing.T) {
	b := transport.Backoff{Min: time.Second, Max: time.Second, Jitter: 0.5}
	for range 100 {
		d := b.Next()
		assert.True(t, d > 500*time.Millisecond-1 && d <= time.Second, d)
	}
}

func TestBackoffWaitEndsWithItsContext(t *testing.T) {
	b := transport.Backoff{Min: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, b.Wait(ctx), context.Canceled)
	b = transport.Backoff{Min: time.Millisecond}
	assert.NoError(t, b.Wait(context.Background()))
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}
