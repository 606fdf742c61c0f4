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
// SIGTERM; first is called at the first one (it must not block). Calling
// the CancelFunc ends the context and stops listening.
func interruptTwice(first func()) (context.Context, context.CancelFunc) {
	_, kill, stop := cli.Interrupts(context.Background(), first, nil)
	ctx, cancel := context.WithCancel(kill)
	return ctx, func() {
		cancel()
		stop()
	}
}
