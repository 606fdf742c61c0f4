package fuq

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A control socket served by another user is refused before any request
// leaves: the client would give a stranger its jobs and believe its
// answers. (The test listens as another user, which needs root.)
func TestControlClientRefusesAnotherUsersSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("listening as another user needs root")
	}
	// A directory the other user can reach (t.TempDir's parent is root's
	// alone).
	dir, err := os.MkdirTemp("", "fuq-peer")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, os.Chmod(dir, 0o777))
	path := filepath.Join(dir, "control.sock")
	// The socket's peer is who listened: nobody, for the moment it takes.
	require.NoError(t, syscall.Seteuid(65534))
	ln, err := net.Listen("unix", path)
	require.NoError(t, syscall.Seteuid(0))
	require.NoError(t, err)
	asked := make(chan struct{}, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked <- struct{}{}
		w.Write([]byte("{}"))
	})}
	go srv.Serve(ln)
	defer srv.Close()

	err = ControlClient{Socket: path}.Do(context.Background(), "GET", "/jobs", nil, nil)
	require.ErrorIs(t, err, ErrForeignSocket)
	assert.Contains(t, err.Error(), "served by user 65534")
	assert.False(t, Unreachable(err), "a foreign foreman is not an absent one")
	select {
	case <-asked:
		t.Fatal("the request reached the other user's server")
	default:
	}

	// This user's own server is asked.
	own := filepath.Join(t.TempDir(), "own.sock")
	ln2, err := net.Listen("unix", own)
	require.NoError(t, err)
	srv2 := &http.Server{Handler: srv.Handler}
	go srv2.Serve(ln2)
	defer srv2.Close()
	require.NoError(t, ControlClient{Socket: own}.Do(context.Background(), "GET", "/jobs", nil, nil))
}
