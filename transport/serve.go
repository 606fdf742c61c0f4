package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// Serve is the accept loop of every server of the project: it accepts
// connections on ln until ctx ends or ln fails, handing each to handle in a
// goroutine of its own; it then closes ln, waits for every handle to
// return, and returns ctx.Err() if ctx ended, else ln's error. handle owns
// its connection and must return once ctx ends.
//
// An accept that fails for want of a resource that comes back (too many
// open files, a connection aborted before it was accepted) does not end
// the loop: it tries again after 5 ms, then twice as long up to 1 s, as
// net/http does, so that a burst of connections slows the server down
// instead of stopping it.
func Serve(ctx context.Context, ln net.Listener, handle func(context.Context, net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var conns sync.WaitGroup
	var err error
	backoff := Backoff{Min: 5 * time.Millisecond, Max: time.Second}
	for {
		var c net.Conn
		if c, err = ln.Accept(); err != nil {
			if passing(err) && ctx.Err() == nil {
				if backoff.Wait(ctx) == nil {
					continue
				}
			}
			break
		}
		backoff.Reset()
		conns.Go(func() { handle(ctx, c) })
	}
	ln.Close()
	conns.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// passing reports whether an accept error may clear by itself.
func passing(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
