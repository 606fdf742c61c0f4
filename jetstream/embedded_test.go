package jetstream

import (
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An embedded server with a token admits only the clients that present
// it; they run jobs, and cannot delete the streams, which would lose jobs
// without a word.
func TestEmbeddedToken(t *testing.T) {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken("s3cret"))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	_, err = nats.Connect(srv.URL(), nats.Token("wrong"))
	require.Error(t, err)
	_, err = nats.Connect(srv.URL())
	require.Error(t, err)

	refused := make(chan error, 4) // what the server tells this client it may not do
	nc, err := nats.Connect(srv.URL(), nats.Token("s3cret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	m := newManager(t, nc, Config{})
	startWorker(t, nc, Config{}, 1)
	res := m.Run(testCtx(t, 30*time.Second), laboro.Job{ID: "ok", Command: "echo hi"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	res.Output.Close()

	js, err := natsjs.New(nc)
	require.NoError(t, err)
	// A refused request gets no answer: each waits a second, in vain.
	for _, name := range []string{"LABORO_JOBS", "LABORO_RESULTS"} {
		assert.Error(t, js.DeleteStream(testCtx(t, time.Second), name), "%s deleted", name)
		select {
		case err := <-refused:
			assert.ErrorIs(t, err, nats.ErrPermissionViolation)
			assert.ErrorContains(t, err, "STREAM.DELETE."+name)
		case <-testCtx(t, 10*time.Second).Done():
			t.Fatalf("the server did not say it refused deleting %s", name)
		}
		_, err := js.Stream(testCtx(t, 10*time.Second), name)
		require.NoError(t, err, "%s is gone", name)
	}
}

// A second embedded server is refused at once, with why, on a data
// directory in use (two servers would corrupt one store) and on an address
// in use; the directory is free again once the first has shut down.
func TestEmbeddedRefusesWhatIsInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats") // made by the first
	srv, err := StartEmbedded(dir, "127.0.0.1", -1)
	require.NoError(t, err)
	_, err = StartEmbedded(dir, "127.0.0.1", -1)
	assert.ErrorIs(t, err, ErrDataInUse)
	assert.ErrorContains(t, err, dir)

	u, err := url.Parse(srv.URL())
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	_, err = StartEmbedded(t.TempDir(), "127.0.0.1", port)
	assert.ErrorContains(t, err, "address already in use", "said at once, not as a server not ready after a while")

	srv.Shutdown()
	again, err := StartEmbedded(dir, "127.0.0.1", -1)
	require.NoError(t, err, "the directory is free once the first server is down")
	again.Shutdown()
}
