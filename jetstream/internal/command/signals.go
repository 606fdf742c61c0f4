package command

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// interruptible returns a context that ends at SIGINT or SIGTERM.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// interruptTwice returns a context that ends at the second SIGINT or
// SIGTERM; first is called at the first one. Calling the CancelFunc ends
// the context and stops listening.
func interruptTwice(first func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigs)
		select {
		case <-sigs:
			first()
		case <-ctx.Done():
			return
		}
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
