package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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

// tokenServer starts an embedded server that wants token, and connects
// to it with the token (the owner's rights).
func tokenServer(t *testing.T, token string) (url string, owner *nats.Conn) {
	t.Helper()
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken(token))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	owner, _ = roleConn(t, srv.URL(), token)
	return srv.URL(), owner
}

// relayed connects to the server at url through a relay, proving token,
// and reconnecting at once when the relay cuts the connection.
func relayed(t *testing.T, url, token string) (*e2e.Relay, *nats.Conn) {
	t.Helper()
	relay := e2e.NewRelay(t, strings.TrimPrefix(url, "nats://"))
	nc, err := nats.Connect("nats://"+relay.Addr(), Token(token),
		nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return relay, nc
}

// holdJob has m run job id, a script that notes each of its runs in the
// file runs, and then waits for release before it prints "out"; it returns
// once the job runs. done has the Run's result.
func holdJob(t *testing.T, ctx context.Context, m *Manager, id string) (runs string, release func(), done <-chan laboro.Result) {
	t.Helper()
	dir := t.TempDir()
	runs, released := filepath.Join(dir, "runs"), filepath.Join(dir, "release")
	ended := make(chan laboro.Result, 1)
	go func() {
		ended <- m.Run(ctx, laboro.Job{ID: id, Script: "echo run >> " + runs +
			"; while [ ! -e " + released + " ]; do sleep 0.02; done; echo out"})
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(runs); return err == nil },
		30*time.Second, 20*time.Millisecond, "the job runs")
	return runs, func() { require.NoError(t, os.WriteFile(released, nil, 0o644)) }, ended
}

// heldOut waits for the Run of a job of holdJob, which must succeed with
// its output; missing says what it means if none comes.
func heldOut(t *testing.T, ctx context.Context, done <-chan laboro.Result, missing string) {
	t.Helper()
	select {
	case res := <-done:
		require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
		assert.Equal(t, "out\n", string(output(t, res)))
	case <-ctx.Done():
		t.Fatal(missing)
	}
}

// noting returns a logger of Info and above that sends each entry whose
// message holds s on the channel it returns (which keeps 8, and drops
// more), and what it logged.
func noting(s string) (*zap.Logger, <-chan zapcore.Entry, *observer.ObservedLogs) {
	return notingAt(zap.InfoLevel, s)
}

// notingAt is noting for a logger of level and above.
func notingAt(level zapcore.Level, s string) (*zap.Logger, <-chan zapcore.Entry, *observer.ObservedLogs) {
	noted := make(chan zapcore.Entry, 8)
	core, logs := observer.New(level)
	return zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, s) {
			select {
			case noted <- e:
			default:
			}
		}
		return nil
	})), noted, logs
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

// A job delivered again runs at once on a worker with a worker's token,
// which may count a job's results but not read them: the worker finds out
// that none is stored without a request the server refuses (waited on
// for half the AckWait, here five minutes, before the job ran).
func TestWorkerTokenRunsAJobDeliveredAgain(t *testing.T) {
	url, owner := tokenServer(t, "s3cret")
	cfg := Config{AckWait: 10 * time.Minute}
	m := newManager(t, owner, cfg)
	marks := filepath.Join(t.TempDir(), "runs")
	first, _ := roleConn(t, url, RoleToken("s3cret", RoleWorker, ""))
	stopFirst := startWorker(t, first, Config{}, 1)

	ctx := testCtx(t, time.Minute)
	done := make(chan laboro.Result, 1)
	script := fmt.Sprintf("echo run >> %s; [ $(wc -l < %s) -ge 2 ] || sleep 600", marks, marks)
	go func() { done <- m.Run(ctx, laboro.Job{ID: "again", Script: script}) }()
	require.Eventually(t, func() bool { return lines(t, marks) == 1 }, 30*time.Second, time.Millisecond)
	stopFirst() // the job handed back: delivered again

	second, refusals := roleConn(t, url, RoleToken("s3cret", RoleWorker, ""))
	startWorker(t, second, Config{}, 1)
	res := <-done
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, 2, lines(t, marks))
	select {
	case err := <-refusals:
		t.Errorf("the worker's token was refused: %v", err)
	default:
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
		assert.True(t, authRefusal(err), "%s: %v", token, err)
	}
	nc, err := nats.Connect(srv.URL(), Token(RoleToken("s3cret", RoleClient, "OTHER")))
	require.NoError(t, err)
	nc.Close()
}

// A Manager or Service that finds the streams as it would make them leaves
// them alone: an update of a stream in use is work for the server (and has
// raced in it with a consumer being made), so none is sent. One whose
// settings or limits differ is put right.
func TestStreamsNotUpdatedWhenSame(t *testing.T) {
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken("s3cret"))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	owner, _ := roleConn(t, srv.URL(), "s3cret")
	js, err := natsjs.New(owner)
	require.NoError(t, err)
	ctx := testCtx(t, 30*time.Second)
	cfg := Config{}.withDefaults()
	ensureAll := func() {
		t.Helper()
		_, _, _, err := ensure(ctx, js, cfg, true)
		require.NoError(t, err)
		require.NoError(t, ensureSubmitted(ctx, owner, cfg, true))
		_, err = ensureFleet(ctx, js, cfg)
		require.NoError(t, err)
	}
	ensureAll()

	updates, err := owner.SubscribeSync("$JS.API.STREAM.UPDATE.>")
	require.NoError(t, err)
	require.NoError(t, owner.Flush())
	ensureAll()
	require.NoError(t, owner.Flush())
	n, _, err := updates.Pending()
	require.NoError(t, err)
	assert.Zero(t, n, "stream updates sent for streams that were as wanted")

	// A setting that differs is still put right.
	cfg.ResultsMaxAge = time.Hour
	_, results, _, err := ensure(ctx, js, cfg, true)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, results.CachedInfo().Config.MaxAge)
	// A limit of messages too.
	st, err := js.Stream(ctx, cfg.fleetStream())
	require.NoError(t, err)
	sc := st.CachedInfo().Config
	sc.MaxMsgsPerSubject = 10
	_, err = js.UpdateStream(ctx, sc)
	require.NoError(t, err)
	st, err = ensureFleet(ctx, js, cfg)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.CachedInfo().Config.MaxMsgsPerSubject)
}

// recordingProxy forwards connections to addr and keeps what the clients
// sent.
type recordingProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	sent bytes.Buffer
}

func newRecordingProxy(t *testing.T, addr string) *recordingProxy {
	p := &recordingProxy{}
	p.ln = startProxy(t, addr, func(in io.Reader, out io.Writer) {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			p.mu.Lock()
			p.sent.Write(buf[:n])
			p.mu.Unlock()
			if _, werr := out.Write(buf[:n]); err != nil || werr != nil {
				return
			}
		}
	})
	return p
}

// startProxy listens on a loopback port and forwards each connection it
// accepts to addr: what the client sends through forward, which returns
// when in ends, and what the server sends as it is. Its listener closes
// when the test ends, after every connection has.
func startProxy(t *testing.T, addr string, forward func(in io.Reader, out io.Writer)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer out.Close()
				forward(in, out)
			}()
			go func() {
				defer wg.Done()
				defer in.Close()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln
}

func (p *recordingProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *recordingProxy) recorded() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent.String()
}

// laboro's clients prove their token with an HMAC of the server's nonce:
// neither the server's token nor a role token's secret crosses the wire,
// and what does cannot be replayed, since the next connection's nonce
// differs.
func TestTokenNeverCrossesTheWire(t *testing.T) {
	const token = "the-server-token-0123456789"
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken(token))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	addr := strings.TrimPrefix(srv.URL(), "nats://")
	tokens := []string{token, RoleToken(token, RoleWorker, ""), RoleToken(token, RoleClient, "")}
	for _, tok := range tokens {
		proxy := newRecordingProxy(t, addr)
		nc, err := nats.Connect(proxy.url(), Token(tok))
		require.NoError(t, err, tok)
		require.NoError(t, nc.Flush())
		nc.Close()

		sent := proxy.recorded()
		secretPart := tok
		if role := TokenRole(tok); role != "" {
			secretPart = strings.Split(tok, ".")[2]
			assert.Contains(t, sent, `"nkey":"`+string(role)+`.LABORO"`)
		} else {
			assert.Contains(t, sent, `"nkey":"laboro"`)
		}
		assert.NotContains(t, sent, secretPart, "the token crossed the wire")
		assert.NotContains(t, sent, `"auth_token"`)

		// What was sent, replayed on a connection of its own, is refused.
		connect, _, ok := strings.Cut(sent[strings.Index(sent, "CONNECT "):], "\r\n")
		require.True(t, ok, sent)
		raw, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		require.NoError(t, raw.SetDeadline(time.Now().Add(10*time.Second)))
		r := bufio.NewReader(raw)
		info, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, info, `"nonce"`)
		_, err = io.WriteString(raw, connect+"\r\nPING\r\n")
		require.NoError(t, err)
		reply, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Contains(t, reply, "Authorization Violation", "replayed proof of %s", tok)
		raw.Close()
	}
}

// A server that offers no nonce (not an embedded server with a token)
// gets nothing: the client leaves before its CONNECT.
func TestTokenProofNeedsANonce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	received := make(chan string, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(conn, `INFO {"server_id":"fake","version":"2.10.0","proto":1,"max_payload":1048576}`+"\r\n")
			b, _ := io.ReadAll(conn) // until the client leaves
			conn.Close()
			received <- string(b)
		}
	}()
	const token = "the-server-token-0123456789"
	for _, opt := range []nats.Option{
		Token(token),
		Token(RoleToken(token, RoleWorker, "")),
		RoleTokenFrom(RoleClient, "", func() string { return token }),
	} {
		_, err := nats.Connect("nats://"+ln.Addr().String(), opt, nats.NoReconnect())
		require.ErrorIs(t, err, nats.ErrNkeysNotSupported)
		select {
		case got := <-received:
			assert.Empty(t, got, "sent to a server without a nonce")
		case <-testCtx(t, 10*time.Second).Done():
			t.Fatal("the client did not leave")
		}
	}
}

// A token that comes later (serve makes it at its first start) is looked
// for at each attempt: refused while there is none, or a wrong one, taken
// once it is right, with its role's rights only.
func TestRoleTokenFrom(t *testing.T) {
	const token = "the-server-token-0123456789"
	srv, err := StartEmbedded(t.TempDir(), "127.0.0.1", -1, WithToken(token))
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	var current atomic.Value
	current.Store("")
	reads := make(chan string, 1024) // the token of each attempt
	errs := make(chan error, 1024)
	connected := make(chan struct{})
	report := func(_ *nats.Conn, err error) {
		select {
		case errs <- err:
		default:
		}
	}
	nc, err := nats.Connect(srv.URL(),
		RoleTokenFrom(RoleWorker, "", func() string {
			tok := current.Load().(string)
			select {
			case reads <- tok:
			default:
			}
			return tok
		}),
		nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort(), nats.MaxReconnects(-1),
		nats.ReconnectWait(5*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ReconnectErrHandler(report),
		nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) { report(nc, err) }),
		nats.ConnectHandler(func(*nats.Conn) { close(connected) }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx := testCtx(t, 30*time.Second)
	attempt := func(tok string) {
		for {
			select {
			case read := <-reads:
				if read == tok {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no attempt with %q", tok)
			}
		}
	}
	for _, wrong := range []string{"", "not-the-token", RoleToken(token, RoleClient, "")} {
		current.Store(wrong)
		attempt(wrong)
		attempt(wrong) // the one before failed
		require.False(t, nc.IsConnected(), "connected with %q", wrong)
	}
	current.Store(token) // the server's: a worker's is derived from it
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("not connected once the token came")
	}
	require.NoError(t, nc.Publish("LABORO.submit.b", []byte("x")))
	var refusals int
	for {
		select {
		case err := <-errs:
			if authRefusal(err) {
				refusals++
				continue
			}
			assert.ErrorIs(t, err, nats.ErrPermissionViolation)
			assert.NotZero(t, refusals, "the wrong tokens were not refused")
			return
		case <-ctx.Done():
			t.Fatal("a worker's connection submitted a job")
		}
	}
}

// authRefusal tells a refusal of the token from other failures.
func authRefusal(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || err != nil && strings.Contains(err.Error(), "Authorization Violation")
}

// With a JobKey a worker runs only the jobs its Manager signed: a job
// published by anyone else (a program posing as the server, a Manager
// with another key or none) is handed back until its delivery limit fails
// it, never run.
func TestSignedJobs(t *testing.T) {
	const token = "the-server-token-0123456789"
	url, owner := tokenServer(t, token)
	worker, denied := roleConn(t, url, RoleToken(token, RoleWorker, ""))
	key := JobKey(token, "")
	require.Equal(t, key, JobKey(RoleToken(token, RoleWorker, ""), ""), "the worker's token gives the server's key")
	assert.Nil(t, JobKey(RoleToken(token, RoleClient, ""), ""))
	assert.Nil(t, JobKey(RoleToken(token, RoleWorker, "OTHER"), ""))

	// The first to make the workers' consumer gives it its delivery limit.
	signed := newManager(t, owner, Config{JobKey: key, MaxDeliver: 2})
	core, logs := observer.New(zap.ErrorLevel)
	runWorker(t, &Worker{Conn: worker, Config: Config{JobKey: JobKey(RoleToken(token, RoleWorker, ""), "")},
		Concurrency: 2, OutputDir: t.TempDir(), Logger: zap.New(core), Name: "keyed"})
	ctx := testCtx(t, time.Minute)

	res := signed.Run(ctx, laboro.Job{ID: "signed", Command: "echo ran"})
	require.Equal(t, laboro.StatusSucceeded, res.Status, "%v", res.Err)
	assert.Equal(t, "ran\n", string(output(t, res)))
	assert.Zero(t, logs.Len(), "%v", logs.All())

	// A message that names no job, unsigned: refused, then deleted at its
	// delivery limit (no Run waits for it).
	ojs, err := natsjs.New(owner)
	require.NoError(t, err)
	_, err = ojs.Publish(ctx, "LABORO.jobs.stray", []byte(`{"id":"stray","command":"true"}`))
	require.NoError(t, err)

	dir := t.TempDir()
	for i, m := range []*Manager{
		newManager(t, owner, Config{}),
		newManager(t, owner, Config{JobKey: JobKey("another server's token", "")}),
	} {
		mark := filepath.Join(dir, strconv.Itoa(i))
		id := "forged" + strconv.Itoa(i)
		res := m.Run(ctx, laboro.Job{ID: id, Args: []string{"touch", mark}})
		assert.Equal(t, laboro.StatusFailed, res.Status, id)
		assert.ErrorIs(t, res.Err, ErrMaxDeliver, id)
		assert.ErrorContains(t, res.Err, `worker "keyed" did not run it: it is not signed with the worker's key`,
			"%s: the user reads why", id)
		assert.NoFileExists(t, mark, "%s ran", id)
		refusals := logs.FilterMessageSnippet("not signed with this worker's key").FilterField(zap.String("subject", "LABORO.jobs."+id))
		assert.Equal(t, 2, refusals.Len(), "%s: refused at each delivery", id)
	}
	select {
	case err := <-denied:
		t.Errorf("the worker's role may not say why it refuses a job: %v", err)
	default:
	}
	require.Eventually(t, func() bool { return streamMsgs(t, owner, "LABORO_JOBS") == 0 },
		30*time.Second, 50*time.Millisecond, "the stray message is deleted")
	assert.Equal(t, 2, logs.FilterField(zap.String("subject", "LABORO.jobs.stray")).Len())
}

// A worker with Config.ProveServer takes no job from a server that proves
// nothing, and says why: another program on its address (here a Manager
// with another key, replaying a job signed with the worker's key), or no
// service answering for a while. Its heartbeats name it alone. Once a
// Manager with the key is on the server, the job runs and its result goes.
func TestWorkerProvesItsServer(t *testing.T) {
	for _, tc := range []struct {
		name, said string
		wrongKey   bool
	}{
		{name: "another key", said: "does not prove that laboro's service is on it", wrongKey: true},
		{name: "no answer", said: "laboro's service does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			workerProvesItsServer(t, tc.said, tc.wrongKey)
		})
	}
}

func workerProvesItsServer(t *testing.T, said string, wrongKey bool) {
	const token = "the-server-token-0123456789"
	url, owner := tokenServer(t, token)
	worker, denied := roleConn(t, url, RoleToken(token, RoleWorker, ""))
	key := JobKey(token, "")
	cfg := Config{JobKey: key}.withDefaults()

	var wrong *Manager
	if wrongKey {
		// On the server only a Manager with another key: its answers
		// prove nothing.
		wrong = newManager(t, owner, Config{JobKey: JobKey("another server's token", "")})
	} else {
		patience := proofPatience
		proofPatience = 100 * time.Millisecond
		t.Cleanup(func() { proofPatience = patience }) // after the worker stops
	}
	beats := make(chan *nats.Msg, 64)
	beatSub, err := owner.ChanSubscribe(cfg.workersSubjects(), beats)
	require.NoError(t, err)
	t.Cleanup(func() { beatSub.Unsubscribe() })
	results, err := owner.SubscribeSync(cfg.resultsSubject("held"))
	require.NoError(t, err)
	require.NoError(t, owner.Flush())

	// A job signed with the worker's key waits in the stream.
	started := filepath.Join(t.TempDir(), "started")
	data, err := json.Marshal(wireJob{ID: "held", Args: []string{"sh", "-c", "touch " + started + "; echo out"}})
	require.NoError(t, err)
	job := nats.NewMsg(cfg.jobsSubject("held"))
	job.Header.Set(hdrJob, "held")
	job.Header.Set(hdrSigned, jobMAC(key, job.Subject, data))
	job.Data = data
	js, err := natsjs.New(owner)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	_, _, _, err = ensure(ctx, js, cfg, false) // the streams, made by a Manager before
	require.NoError(t, err)
	_, err = js.PublishMsg(ctx, job)
	require.NoError(t, err)

	log, warned, logs := noting("takes no job from it")
	runWorker(t, &Worker{Conn: worker, Config: Config{JobKey: key, ProveServer: true}, OutputDir: t.TempDir(), Logger: log, Name: "w1"})
	select {
	case e := <-warned:
		assert.Equal(t, zapcore.WarnLevel, e.Level)
		assert.Contains(t, e.Message, said)
		if wrongKey {
			assert.Contains(t, logs.FilterMessage(e.Message).All()[0].ContextMap()["error"], ErrServerUnproven.Error())
		}
	case <-ctx.Done():
		t.Fatal("the worker did not say that its server proves nothing")
	}
	// Its heartbeats, asked for by a roll call, name the worker.
	unprovenBeats(t, ctx, owner, cfg, beats)
	// The job was not taken.
	cons, err := mustStream(t, js, cfg.jobsStream()).Consumer(ctx, consumerName)
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.Delivered.Consumer, "a job taken from an unproven server")
	assert.NoFileExists(t, started)

	// The Manager with the key comes: the job runs, its result goes.
	if wrong != nil {
		require.NoError(t, wrong.Close())
	}
	newManager(t, owner, Config{JobKey: key})
	msg, err := results.NextMsgWithContext(ctx)
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(int(laboro.StatusSucceeded)), msg.Header.Get(hdrStatus))
	assert.Equal(t, "out\n", string(msg.Data))
	assert.FileExists(t, started)
	assert.Equal(t, 1, logs.FilterMessageSnippet("proved that laboro's service is on it").Len())
	assert.Equal(t, 1, logs.FilterMessageSnippet("takes no job from it").Len())
	select {
	case err := <-denied:
		t.Errorf("the worker's role may not challenge its server: %v", err)
	default:
	}
}

// unprovenBeats has nc call the workers' roll, again every 100 ms while
// none answers, until two heartbeats came on beats, and asserts that each
// names worker w1 of one slot and no job: what an unproven server hears.
func unprovenBeats(t *testing.T, ctx context.Context, nc *nats.Conn, cfg Config, beats <-chan *nats.Msg) {
	t.Helper()
	ask := time.NewTicker(100 * time.Millisecond)
	defer ask.Stop()
	for heard := 0; heard < 2; {
		require.NoError(t, nc.Publish(cfg.rollSubject(), nil))
		select {
		case msg := <-beats:
			var info WorkerInfo
			require.NoError(t, json.Unmarshal(msg.Data, &info))
			assert.NotEmpty(t, info.Run, "the run's id")
			assert.Equal(t, WorkerInfo{Name: "w1", Run: info.Run, Slots: 1}, info, "a heartbeat to an unproven server")
			heard++
		case <-ask.C:
		case <-ctx.Done():
			t.Fatal("no heartbeat")
		}
	}
}

// poser is laboro's server, with a Manager that holds the jobs' key, and a
// program posing as it: a server that takes the same token (as one that
// relays the server's nonce would) and has the streams, but only a Manager
// of another key.
type poser struct {
	token, url, poserURL string
	poserOwner           *nats.Conn
	cfg                  Config // with the jobs' key
	m                    *Manager
}

func newPoser(t *testing.T) poser {
	t.Helper()
	p := poser{token: "the-server-token-0123456789"}
	url, owner := tokenServer(t, p.token)
	p.url = url
	p.poserURL, p.poserOwner = tokenServer(t, p.token)
	p.cfg = Config{JobKey: JobKey(p.token, "")}.withDefaults()
	p.m = newManager(t, owner, Config{JobKey: p.cfg.JobKey})
	newManager(t, p.poserOwner, Config{JobKey: JobKey("another server's token", "")})
	return p
}

// A worker whose connection moves, while a job runs, to a server that
// proves nothing (its address taken while laboro's server is away) tells
// that server nothing of the job: its heartbeats name the worker alone, and
// a request for the job's live output goes unanswered. Back on laboro's
// server, the job's result goes.
func TestWorkerTellsAPoserNothing(t *testing.T) {
	p := newPoser(t)
	cfg, poserOwner := p.cfg, p.poserOwner
	beats := make(chan *nats.Msg, 64)
	beatSub, err := poserOwner.ChanSubscribe(cfg.workersSubjects(), beats)
	require.NoError(t, err)
	t.Cleanup(func() { beatSub.Unsubscribe() })
	require.NoError(t, poserOwner.Flush())

	relay, conn := relayed(t, p.url, RoleToken(p.token, RoleWorker, ""))
	runWorker(t, &Worker{Conn: conn, Config: Config{JobKey: cfg.JobKey, ProveServer: true}, OutputDir: t.TempDir(), Name: "w1"})
	ctx := testCtx(t, 2*time.Minute)
	_, release, done := holdJob(t, ctx, p.m, "held")

	relay.Retarget(strings.TrimPrefix(p.poserURL, "nats://"))
	relay.Cut()
	// Its heartbeats reach the poser once the worker is connected to it.
	unprovenBeats(t, ctx, poserOwner, cfg, beats)
	_, err = poserOwner.Request(cfg.liveSubject("held"), nil, 500*time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "live output answered to an unproven server")

	relay.Retarget(strings.TrimPrefix(p.url, "nats://"))
	relay.Cut()
	release()
	heldOut(t, ctx, done, "no result once back on laboro's server")
}

// A result whose publication is under way when the worker's connection
// moves to another server (its address taken while laboro's server is
// away) is not given to that server: each attempt is proven first. It
// goes once the worker is back on a server where the Manager proves
// itself.
func TestResultGoesOnlyToAProvenServer(t *testing.T) {
	p := newPoser(t)
	url, poserURL, poserOwner, key, cfg, m := p.url, p.poserURL, p.poserOwner, p.cfg.JobKey, p.cfg, p.m

	leaked := make(chan *nats.Msg, 1)
	sub, err := poserOwner.ChanSubscribe(cfg.resultsSubject("held"), leaked)
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	require.NoError(t, poserOwner.Flush())

	relay, conn := relayed(t, url, RoleToken(p.token, RoleWorker, ""))
	log, warned, logs := noting("does not prove")
	runWorker(t, &Worker{Conn: conn, Config: Config{JobKey: key, ProveServer: true}, OutputDir: t.TempDir(), Logger: log})

	ctx := testCtx(t, 2*time.Minute)
	_, release, done := holdJob(t, ctx, m, "held")

	// The job ends while the network stalls: its result is sent, and lost.
	relay.Stall()
	release()
	require.NoError(t, relay.Dropped(ctx, cfg.resultsSubject("held")))
	// The connection comes back, to the poser.
	relay.Retarget(strings.TrimPrefix(poserURL, "nats://"))
	relay.Cut()
	relay.Resume()
	select {
	case <-warned:
	case <-leaked:
		t.Fatal("the result went to a server that proved nothing")
	case <-ctx.Done():
		t.Fatal("the worker did not say that the server it came back to proves nothing")
	}
	poserJS, err := natsjs.New(poserOwner)
	require.NoError(t, err)
	poserResults := mustStream(t, poserJS, "LABORO_RESULTS")
	stored, err := lookup(ctx, poserOwner, poserResults, cfg.resultsSubject("held"))
	require.NoError(t, err)
	assert.Nil(t, stored, "a result given to an unproven server")

	// Back on laboro's server: the result goes.
	relay.Retarget(strings.TrimPrefix(url, "nats://"))
	relay.Cut()
	heldOut(t, ctx, done, "no result once back on laboro's server")
	stored, err = lookup(ctx, poserOwner, poserResults, cfg.resultsSubject("held"))
	require.NoError(t, err)
	assert.Nil(t, stored, "a result given to an unproven server")
	assert.Positive(t, logs.FilterMessageSnippet("proved that laboro's service is on it").Len())
}

// A submission whose connection drops while its jobs are on the way (a
// network that stalls, a server restarting) goes on once the connection is
// back and the service has proved itself again: every job is stored, once.
func TestSubmitRidesOutADroppedConnection(t *testing.T) {
	const token = "the-server-token-0123456789"
	url, owner := tokenServer(t, token)
	startService(t, owner, Config{ClientKey: ClientKey(token, ""), JobKey: JobKey(token, "")}, 1)
	relay, conn := relayed(t, url, RoleToken(token, RoleClient, ""))
	cl := &Client{Conn: conn, Config: Config{ClientKey: ClientKey(token, ""), ProveServer: true, Dir: t.TempDir()}}

	const n = 2000
	jobs := make([]laboro.Job, n)
	for i := range jobs {
		jobs[i] = laboro.Job{Command: "true"}
	}
	subject := Config{}.withDefaults().submitSubject("big")
	// The first job's publication, and all that follows it, are lost.
	relay.StallOn("HPUB " + subject)
	ctx := testCtx(t, 2*time.Minute)
	type submitted struct {
		ids []string
		err error
	}
	done := make(chan submitted, 1)
	go func() {
		ids, err := cl.Submit(ctx, "big", jobs)
		done <- submitted{ids, err}
	}()
	require.NoError(t, relay.Dropped(ctx, subject))
	relay.Cut()
	relay.Resume()
	var res submitted
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the submission did not end")
	}
	require.NoError(t, res.err)
	require.Len(t, res.ids, n)
	assert.Equal(t, "big-1", res.ids[0])
	assert.Equal(t, "big-2000", res.ids[n-1])
	assert.Equal(t, uint64(n), streamMsgs(t, owner, "LABORO_SUBMITTED"), "each job stored once")
}

// Waiting for a batch goes on while the server is out of reach for
// longer than a request's time (a restart that takes a while), and ends
// with the batch once it is back.
func TestWaitOutlastsAnUnreachableServer(t *testing.T) {
	const token = "the-server-token-0123456789"
	url, owner := tokenServer(t, token)
	startService(t, owner, Config{ClientKey: ClientKey(token, ""), JobKey: JobKey(token, "")}, 2)
	startWorker(t, owner, Config{JobKey: JobKey(token, "")}, 1)
	relay, conn := relayed(t, url, RoleToken(token, RoleClient, ""))
	log, unanswered, logs := notingAt(zap.DebugLevel, "did not answer; asking again")
	cl := &Client{Conn: conn, Config: Config{ClientKey: ClientKey(token, ""), ProveServer: true, Dir: t.TempDir(), Logger: log}}
	ctx := testCtx(t, 2*time.Minute)
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	_, err := cl.Submit(ctx, "b", []laboro.Job{{Script: "while [ ! -e " + release + " ]; do sleep 0.02; done"}})
	require.NoError(t, err)

	relay.Down.Store(true)
	relay.Cut()
	type waited struct {
		b   BatchStatus
		err error
	}
	done := make(chan waited, 1)
	// No deadline: each request then has a time of its own.
	waitCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		b, err := cl.Wait(waitCtx, "b", 1, 10*time.Millisecond, nil)
		done <- waited{b, err}
	}()
	// Each request waits for the service in its time, and Wait asks again.
	for range 2 {
		select {
		case <-unanswered:
		case w := <-done:
			t.Fatalf("Wait returned while the server was out of reach: %+v", w)
		case <-ctx.Done():
			t.Fatal("Wait did not ask again")
		}
	}
	relay.Down.Store(false)
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	select {
	case w := <-done:
		require.NoError(t, w.err)
		assert.Equal(t, 1, w.b.Succeeded)
	case <-ctx.Done():
		t.Fatal("Wait did not end with the batch")
	}
	// The wait is said once, however many requests it took, and its end.
	assert.Equal(t, 1, logs.FilterMessageSnippet("waiting for laboro's service to prove itself").Len())
	assert.Equal(t, 1, logs.FilterMessageSnippet("proved itself on the NATS server: going on").Len())
}

func mustStream(t *testing.T, js natsjs.JetStream, name string) natsjs.Stream {
	t.Helper()
	s, err := js.Stream(testCtx(t, 10*time.Second), name)
	require.NoError(t, err)
	return s
}

// TestClientProvesItsServer: a Client with Config.ProveServer submits and
// asks only where the Service proves that it holds the client's key. A
// program answering with another key gets no job, and the Client says
// why; with no service, a status request says there is none; the Service
// with the key comes, and the same Client submits and asks.
func TestClientProvesItsServer(t *testing.T) {
	const token = "the-server-token-0123456789"
	url, owner := tokenServer(t, token)
	clientConn, denied := roleConn(t, url, RoleToken(token, RoleClient, ""))
	key := ClientKey(RoleToken(token, RoleClient, ""), "")
	require.Equal(t, ClientKey(token, ""), key, "the client's token gives the server's key")
	assert.Nil(t, ClientKey(RoleToken(token, RoleWorker, ""), ""))
	cl := &Client{Conn: clientConn, Config: Config{ClientKey: key, ProveServer: true, Dir: t.TempDir()}}
	ctx := testCtx(t, time.Minute)

	_, err := cl.Status(ctx, StatusRequest{})
	assert.ErrorIs(t, err, ErrNoService)

	// A program that answers, without the key.
	poser, err := owner.Subscribe("LABORO.api.prove.client", func(msg *nats.Msg) {
		require.NoError(t, answerChallenge(msg, ClientKey("another server's token", "")))
	})
	require.NoError(t, err)
	require.NoError(t, owner.Flush())
	_, err = cl.Submit(ctx, "b1", []laboro.Job{{Command: "true"}})
	assert.ErrorIs(t, err, ErrServerUnproven)
	assert.Zero(t, streamMsgs(t, owner, "LABORO_SUBMITTED"), "a job given to an unproven server")
	_, err = cl.Status(ctx, StatusRequest{})
	assert.ErrorIs(t, err, ErrServerUnproven)
	require.NoError(t, poser.Unsubscribe())

	startService(t, owner, Config{ClientKey: ClientKey(token, ""), JobKey: JobKey(token, "")}, 2)
	ids, err := cl.Submit(ctx, "b1", []laboro.Job{{Command: "true"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"b1-1"}, ids)
	reply, err := cl.Status(ctx, StatusRequest{IDs: ids})
	require.NoError(t, err)
	require.Len(t, reply.Jobs, 1, "the service answered")
	assert.Equal(t, "b1-1", reply.Jobs[0].ID)
	select {
	case err := <-denied:
		t.Errorf("the client's role may not challenge its server: %v", err)
	default:
	}
}

// A lookup beyond a token's rights fails at once, saying so, rather than
// be asked again until its context ends: the server does not answer it.
func TestLookupRefusedFailsAtOnce(t *testing.T) {
	url, owner := tokenServer(t, "s3cret")
	newManager(t, owner, Config{}) // the streams
	worker, _ := roleConn(t, url, RoleToken("s3cret", RoleWorker, ""))
	js, err := natsjs.New(worker)
	require.NoError(t, err)
	ctx := testCtx(t, time.Minute)
	results, err := js.Stream(ctx, "LABORO_RESULTS")
	require.NoError(t, err)
	cfg := Config{}.withDefaults()

	msg, err := lookup(ctx, worker, results, cfg.cancelSubject("job"))
	require.NoError(t, err, "a worker may look up the end of a job")
	assert.Nil(t, msg)
	_, err = lookup(ctx, worker, results, cfg.resultsSubject("job"))
	require.ErrorIs(t, err, nats.ErrPermissionViolation, "nor read a result")
	assert.ErrorContains(t, err, cfg.resultsSubject("job"))
	assert.NoError(t, ctx.Err(), "at once")
	n, err := count(ctx, worker, results, cfg.resultsSubject("job"))
	require.NoError(t, err, "but count them")
	assert.Zero(t, n)
}
