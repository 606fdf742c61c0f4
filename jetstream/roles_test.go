package jetstream

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// roleConn connects with token and gathers the server's refusals.
func roleConn(t *testing.T, url, token string) (*nats.Conn, <-chan error) {
	t.Helper()
	refusals := make(chan error, 64)
	nc, err := nats.Connect(url, Token(token), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case refusals <- err:
		default:
		}
	}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, refusals
}

// refused publishes to subject and waits for the server's refusal.
func refused(t *testing.T, nc *nats.Conn, refusals <-chan error, subject string) {
	t.Helper()
	require.NoError(t, nc.Publish(subject, []byte("x")))
	select {
	case err := <-refusals:
		assert.ErrorIs(t, err, nats.ErrPermissionViolation, subject)
		assert.Contains(t, err.Error(), subject)
	case <-testCtx(t, 10*time.Second).Done():
		t.Errorf("publishing to %s was not refused", subject)
	}
}

// A machine that runs workers holds a worker's token, and one that submits
// a client's: together they run jobs through the service as with the
// server's token, but a worker cannot submit, forge a job or read
// results, and a client cannot take a job or store a result; neither can
// take jobs back or overhear the other's answers.
func TestRoleTokens(t *testing.T) {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken("s3cret"))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	owner, _ := roleConn(t, srv.URL(), "s3cret")
	worker, workerRefusals := roleConn(t, srv.URL(), RoleToken("s3cret", RoleWorker, ""))
	client, clientRefusals := roleConn(t, srv.URL(), RoleToken("s3cret", RoleClient, ""))

	startWorker(t, worker, Config{}, 2) // before the service: it makes the streams
	startService(t, owner, Config{}, 4)
	cl := &Client{Conn: client, Config: Config{Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)
	ids, err := cl.Submit(ctx, "b", []laboro.Job{
		{ID: "ok", Command: "echo hello"},
		{ID: "bad", Script: "echo why >&2; exit 3"},
		{ID: "long", Command: "sleep 60"},
	})
	require.NoError(t, err)
	require.Len(t, ids, 3)
	res, err := cl.Result(ctx, "ok")
	require.NoError(t, err)
	assert.Equal(t, "hello\n", string(output(t, res)))
	res, err = cl.Result(ctx, "bad")
	require.NoError(t, err)
	res.Output.Close()
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "why\n", string(res.Stderr))
	reply, err := cl.Cancel(ctx, "long")
	require.NoError(t, err)
	assert.Equal(t, "cancelled", reply.Jobs[0].State)
	b, err := cl.Wait(ctx, "b", 3, 10*time.Millisecond, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, b.Succeeded)
	assert.Equal(t, 2, b.Failed)
	// Doing their work, neither met a refusal.
	for _, c := range []<-chan error{workerRefusals, clientRefusals} {
		select {
		case err := <-c:
			t.Errorf("refused: %v", err)
		default:
		}
	}

	for _, subject := range []string{
		"LABORO.jobs.forged", "LABORO.submit.b", "LABORO.api.status", "LABORO.cancel.ok",
		"$JS.API.STREAM.PURGE.LABORO_JOBS", "$JS.API.STREAM.UPDATE.LABORO_RESULTS",
		"$JS.API.DIRECT.GET.LABORO_RESULTS.LABORO.results.ok", "$JS.API.STREAM.DELETE.LABORO_JOBS",
	} {
		refused(t, worker, workerRefusals, subject)
	}
	for _, subject := range []string{
		"LABORO.results.ok", "LABORO.jobs.forged", "LABORO.cancel.ok",
		"$JS.API.CONSUMER.MSG.NEXT.LABORO_JOBS.workers", "$JS.API.STREAM.PURGE.LABORO_SUBMITTED",
		"$JS.API.STREAM.INFO.LABORO_JOBS", "$JS.API.CONSUMER.DELETE.LABORO_JOBS.workers",
	} {
		refused(t, client, clientRefusals, subject)
	}
	// Nor may a role listen beyond its own answers.
	_, err = worker.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	select {
	case err := <-workerRefusals:
		assert.ErrorIs(t, err, nats.ErrPermissionViolation)
	case <-ctx.Done():
		t.Error("a worker listens to every inbox")
	}
}

// A role token is good only for its role and streams, with its server's
// token: anything else is refused at the door.
func TestRoleTokenForged(t *testing.T) {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken("s3cret"))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	good := RoleToken("s3cret", RoleWorker, "")
	for _, token := range []string{
		RoleToken("other", RoleWorker, ""),
		strings.Replace(good, "worker.", "client.", 1),
		strings.Replace(good, ".LABORO.", ".OTHER.", 1),
		"admin.LABORO." + strings.Split(good, ".")[2],
		good[:len(good)-1],
	} {
		_, err := nats.Connect(srv.URL(), Token(token))
		assert.True(t, errors.Is(err, nats.ErrAuthorization) || err != nil && strings.Contains(err.Error(), "Authorization"), "%s: %v", token, err)
	}
	nc, err := nats.Connect(srv.URL(), Token(RoleToken("s3cret", RoleClient, "OTHER")))
	require.NoError(t, err)
	nc.Close()
}

// A Manager or Service that finds the streams as it would make them leaves
// them alone: an update of a stream in use is work for the server (and has
// raced in it with a consumer being made), so none is sent.
func TestStreamsNotUpdatedWhenSame(t *testing.T) {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken("s3cret"))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	owner, _ := roleConn(t, srv.URL(), "s3cret")
	js, err := natsjs.New(owner)
	require.NoError(t, err)
	ctx := testCtx(t, 30*time.Second)
	cfg := Config{}.withDefaults()
	_, _, _, err = ensure(ctx, js, cfg, true)
	require.NoError(t, err)
	require.NoError(t, ensureSubmitted(ctx, owner, cfg, true))

	updates, err := owner.SubscribeSync("$JS.API.STREAM.UPDATE.>")
	require.NoError(t, err)
	require.NoError(t, owner.Flush())
	_, _, _, err = ensure(ctx, js, cfg, true)
	require.NoError(t, err)
	require.NoError(t, ensureSubmitted(ctx, owner, cfg, true))
	require.NoError(t, owner.Flush())
	n, _, err := updates.Pending()
	require.NoError(t, err)
	assert.Zero(t, n, "stream updates sent for streams that were as wanted")

	// A setting that differs is still put right.
	cfg.ResultsMaxAge = time.Hour
	_, results, _, err := ensure(ctx, js, cfg, true)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, results.CachedInfo().Config.MaxAge)
}
