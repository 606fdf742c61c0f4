package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flaky is a listener whose first accepts fail as a process out of file
// descriptors does.
type flaky struct {
	net.Listener
	failures atomic.Int32
}

func (l *flaky) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: fmt.Errorf("accept4: %w", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of file descriptors for a moment slows the loop down; it
// does not end it.
func TestServeOutlivesPassingAcceptErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fl := &flaky{Listener: ln}
	fl.failures.Store(5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- transport.Serve(ctx, fl, func(_ context.Context, c net.Conn) { c.Close(); close(handled) })
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	<-handled
	cancel()
	assert.ErrorIs(t, <-served, context.Canceled)
}

// Any other accept error ends it, with that error.
func TestServeEndsOnAListenerError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln.Close()
	err = transport.Serve(context.Background(), ln, func(context.Context, net.Conn) {})
	assert.True(t, errors.Is(err, net.ErrClosed), "%v", err)
}
