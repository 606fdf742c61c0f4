package jetstream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// droppingProxy forwards connections to a NATS server, and drops the nth
// message its clients publish to a subject that starts with prefix: a
// request the server never answers, as when an answer is lost with a
// connection, or a server is too busy to answer.
type droppingProxy struct {
	ln      net.Listener
	prefix  string
	nth     int
	dropped chan struct{} // closed once the message is dropped
	mu      sync.Mutex
	seen    int // messages to prefix
}

func newDroppingProxy(t *testing.T, addr, prefix string, nth int) *droppingProxy {
	p := &droppingProxy{prefix: prefix, nth: nth, dropped: make(chan struct{})}
	p.ln = startProxy(t, addr, func(in io.Reader, out io.Writer) { p.forward(bufio.NewReader(in), out) })
	return p
}

// forward copies the client's protocol lines to the server, a PUB or HPUB
// with its payload, but the one to drop.
func (p *droppingProxy) forward(in *bufio.Reader, out io.Writer) {
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		msg := []byte(line)
		f := strings.Fields(line)
		if len(f) >= 3 && (strings.EqualFold(f[0], "PUB") || strings.EqualFold(f[0], "HPUB")) {
			size, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return
			}
			payload := make([]byte, size+2) // and its CR LF
			if _, err := io.ReadFull(in, payload); err != nil {
				return
			}
			if strings.HasPrefix(f[1], p.prefix) && p.drop() {
				continue
			}
			msg = append(msg, payload...)
		}
		if _, err := out.Write(msg); err != nil {
			return
		}
	}
}

// drop reports whether a message to p.prefix is the one to drop.
func (p *droppingProxy) drop() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen++; p.seen == p.nth {
		close(p.dropped)
		return true
	}
	return false
}

func (p *droppingProxy) url() string { return "nats://" + p.ln.Addr().String() }

// A request to the JetStream API that the server never answers costs the
// Service that starts one attempt (a second at first), not the whole of
// its context, which may have no end: it asks again, and serves.
func TestServiceStartsThoughARequestIsNotAnswered(t *testing.T) {
	for _, req := range []struct {
		subject string // or its start
		nth     int
	}{
		{"$JS.API.STREAM.INFO.LABORO_SUBMITTED", 1},
		{"$JS.API.STREAM.CREATE.LABORO_SUBMITTED", 1},
		{"$JS.API.STREAM.INFO.LABORO_JOBS", 1},
		{"$JS.API.STREAM.CREATE.LABORO_RESULTS", 1},
		{"$JS.API.CONSUMER.INFO.LABORO_JOBS.workers", 1},
		{"$JS.API.CONSUMER.CREATE.LABORO_JOBS.workers", 1},
		{"$JS.API.CONSUMER.INFO.LABORO_JOBS.workers", 2}, // the Service's own look
		{"$JS.API.CONSUMER.CREATE.LABORO_RESULTS.", 1},   // the Manager's reader of results
		{"$JS.API.STREAM.INFO.LABORO_WORKERS", 1},        // the heartbeats heard before
		{"$JS.API.STREAM.CREATE.LABORO_WORKERS", 1},
		{"$JS.API.STREAM.INFO.LABORO_SUBMITTED", 2},      // the submissions made before
		{"$JS.API.CONSUMER.CREATE.LABORO_SUBMITTED.", 1}, // the reader of submissions
	} {
		t.Run(fmt.Sprintf("%s#%d", req.subject, req.nth), func(t *testing.T) {
			_, url := setupURL(t)
			p := newDroppingProxy(t, strings.TrimPrefix(url, "nats://"), req.subject, req.nth)
			nc, err := nats.Connect(p.url())
			require.NoError(t, err)
			defer nc.Close()

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // against a hang
			defer cancel()
			started := make(chan struct{})
			s := &Service{Conn: nc, Config: Config{Logger: zaptest.NewLogger(t)},
				Started: func(*laboro.Executor) { close(started) }}
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("the service ended before it served: %v", err)
			}
			cancel()
			require.NoError(t, <-done)
			select {
			case <-p.dropped:
			default:
				t.Fatalf("the service asked %s fewer than %d times", req.subject, req.nth)
			}
		})
	}
}

// The same holds for a Client's first request about the SUBMITTED stream:
// its submission goes through.
func TestSubmitThoughARequestIsNotAnswered(t *testing.T) {
	nc, url := setupURL(t)
	startService(t, nc, Config{}, 2)
	startWorker(t, nc, Config{}, 2)
	p := newDroppingProxy(t, strings.TrimPrefix(url, "nats://"), "$JS.API.STREAM.INFO.LABORO_SUBMITTED", 1)
	clientConn, err := nats.Connect(p.url())
	require.NoError(t, err)
	defer clientConn.Close()

	cl := &Client{Conn: clientConn, Config: Config{Dir: t.TempDir()}}
	ids, err := cl.Submit(testCtx(t, time.Minute), "b", []laboro.Job{{Command: "true"}, {Command: "false"}})
	require.NoError(t, err)
	require.Equal(t, []string{"b-1", "b-2"}, ids)
	select {
	case <-p.dropped:
	default:
		t.Fatal("the client never asked about the SUBMITTED stream")
	}
	b, err := cl.Wait(testCtx(t, time.Minute), "b", len(ids), 20*time.Millisecond, nil)
	require.NoError(t, err)
	require.Equal(t, [3]int{2, 1, 1}, [3]int{b.Jobs, b.Succeeded, b.Failed}, "both jobs ran")
}

// A service that recalls the workers heard before it started asks again
// when its reader of their heartbeats is not made: it still learns them.
func TestRecallThoughARequestIsNotAnswered(t *testing.T) {
	nc, url := setupURL(t)
	cfg := Config{}.withDefaults()
	b, err := json.Marshal(heartbeat{WorkerInfo: WorkerInfo{Name: "held", Run: "old", Slots: 1},
		Leases: []lease{{"j1", "$JS.ACK.LABORO_JOBS.workers.1.7.7.1764370000000000000.0"}}})
	require.NoError(t, err)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	_, err = ensureFleet(testCtx(t, time.Minute), js, cfg)
	require.NoError(t, err)
	_, err = js.Publish(testCtx(t, time.Minute), cfg.workersSubject("held", "old"), b)
	require.NoError(t, err)

	p := newDroppingProxy(t, strings.TrimPrefix(url, "nats://"), "$JS.API.CONSUMER.CREATE.LABORO_WORKERS.", 1)
	serviceConn, err := nats.Connect(p.url())
	require.NoError(t, err)
	defer serviceConn.Close()
	sjs, err := natsjs.New(serviceConn)
	require.NoError(t, err)
	var f fleet
	f.reset(cfg, zap.NewNop())
	recalled, err := f.recall(testCtx(t, time.Minute), sjs, cfg, 10*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"held"}, recalled)
	select {
	case <-p.dropped:
	default:
		t.Fatal("the reader of heartbeats was made without a request")
	}
}

// On a NATS server without JetStream, the Service and a Client fail at
// once, and say what is missing: no request of theirs is answered, but
// none is waited on either.
func TestWithoutJetStreamSaysSo(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()

	const why = "no JetStream answers on this NATS server (is it started with -js?)"
	err = (&Service{Conn: nc, Config: Config{Logger: zaptest.NewLogger(t)}}).Run(testCtx(t, time.Minute))
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.ErrorContains(t, err, why)
	_, err = (&Client{Conn: nc}).Submit(testCtx(t, time.Minute), "b", []laboro.Job{{Command: "true"}})
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.ErrorContains(t, err, why)
}
