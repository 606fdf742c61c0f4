package transport

import (
	"context"
	"net"
	"sync"
)

// Serve is the accept loop of every server of the project: it accepts
// connections on ln until ctx ends or ln fails, handing each to handle in a
// goroutine of its own; it then closes ln, waits for every handle to
// return, and returns ctx.Err() if ctx ended, else ln's error. handle owns
// its connection and must return once ctx ends.
func Serve(ctx context.Context, ln net.Listener, handle func(context.Context, net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var conns sync.WaitGroup
	var err error
	for {
		var c net.Conn
		if c, err = ln.Accept(); err != nil {
			break
		}
		conns.Go(func() { handle(ctx, c) })
	}
	ln.Close()
	conns.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
