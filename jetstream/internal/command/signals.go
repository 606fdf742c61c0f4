package command

import (
	"context"

	"github.com/laboro-go/laboro/internal/cli"
)

// interruptible returns a context that ends at SIGINT or SIGTERM.
func interruptible() (context.Context, context.CancelFunc) {
	return cli.Interruptible(context.Background())
}

// interruptTwice returns a context that ends at the second SIGINT or
// SIGTERM; first is called at the first one. Calling the CancelFunc ends
// the context and stops listening.
func interruptTwice(first func()) (context.Context, context.CancelFunc) {
	drain, kill, stop := cli.Interrupts(context.Background())
	stopFirst := context.AfterFunc(drain, func() {
		if context.Cause(drain) != context.Canceled { // a signal, not stop
			first()
		}
	})
	ctx, cancel := context.WithCancel(kill)
	return ctx, func() {
		stopFirst()
		cancel()
		stop()
	}
}
