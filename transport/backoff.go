package transport

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait between attempts of everything that retries (a
// worker reconnecting to its manager, a request its server did not
// answer): Min after the first failure, then twice as long each time up
// to Max, each wait shortened by a random part of up to Jitter of it, so
// that many workers cut off at once do not come back at once. Reset after
// a success. The zero value waits 1 s, doubling to 30 s, without jitter.
// A Backoff is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	// Jitter is the largest part of a wait taken off at random, from 0 (none)
	// to 1.
	Jitter float64

	next time.Duration
}

// Defaults of a zero Backoff.
const (
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = 30 * time.Second
)

// Next returns the wait before the next attempt and doubles the one after.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi <= 0 {
		hi = max(lo, DefaultBackoffMax)
	}
	d := min(max(b.next, lo), hi)
	b.next = min(2*d, hi)
	if b.Jitter > 0 {
		d -= time.Duration(rand.Float64() * min(b.Jitter, 1) * float64(d))
	}
	return d
}

// Reset makes the next wait Min again.
func (b *Backoff) Reset() { b.next = 0 }

// Wait sleeps for Next(), or until ctx ends, and then returns ctx.Err().
func (b *Backoff) Wait(ctx context.Context) error {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
