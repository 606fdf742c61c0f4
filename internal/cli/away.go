package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/laboro-go/laboro/transport"
)

// Away is how a command that follows a job on a server waits out the
// server going away (a crash, a restart): it says so once, calls again
// after 100 ms, then longer up to 2 s between calls, gives up after its
// limit, and says when the server is back. Make one with NewAway.
type Away struct {
	server  string
	limit   time.Duration
	out     io.Writer
	backoff transport.Backoff
	since   time.Time // when the server went away; zero while it is there
}

// NewAway returns an Away whose messages name the server as server ("the
// master") and go to out, and that waits for it up to limit.
func NewAway(server string, limit time.Duration, out io.Writer) *Away {
	return &Away{server: server, limit: limit, out: out,
		backoff: transport.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}}
}

// Lost is called with the error of a call that found no server. It
// returns nil once it has waited a while, for the caller to call again;
// or ctx's error; or, once the server has been away longer than the
// limit, err with how long.
func (a *Away) Lost(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if a.since.IsZero() {
		a.since = time.Now()
		fmt.Fprintf(a.out, "%s went away (%v); waiting for it to come back\n", a.server, err)
	} else if time.Since(a.since) > a.limit {
		return fmt.Errorf("%s has been away for %v: %w", a.server, a.limit, err)
	}
	return a.backoff.Wait(ctx)
}

// Back is called after a call that the server answered: if it had gone
// away, Back says it is back.
func (a *Away) Back() {
	if !a.since.IsZero() {
		fmt.Fprintf(a.out, "%s is back\n", a.server)
		a.since = time.Time{}
		a.backoff.Reset()
	}
}
