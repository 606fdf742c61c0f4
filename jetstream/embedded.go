package jetstream

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Embedded is a NATS server with JetStream running inside this process,
// the default when the user gives no NATS URL. Its methods are safe for
// concurrent use.
type Embedded struct {
	srv  *server.Server
	lock *os.File // the data directory, held
}

// ErrDataInUse is matched by StartEmbedded's error when another process's
// embedded server uses the data directory: two servers writing one store
// would corrupt it.
var ErrDataInUse = errors.New("jetstream: another server uses the data directory")

// EmbeddedOption changes the embedded server's options before it starts.
// WithToken is one; a program may write its own for anything else the
// server offers (TLS, limits, cluster routes).
type EmbeddedOption func(*server.Options)

// WithToken makes the embedded server require token from every client, or
// a RoleToken derived from it. laboro's clients (Token) prove it without
// sending it: the server greets each connection with a nonce, and the
// client answers with an HMAC of it keyed with the token. Other NATS
// clients may present it as a plain token (nats://token@host:port), which
// crosses the wire in the clear; either is compared in a time that tells
// nothing of it. A client with the token
// may do all that laboro does, but not delete a stream or the workers'
// consumer, which would lose every job without a word to the service
// (Denied); one with a RoleToken may do only what its role needs.
// (Purging, which the service uses to take back a queued job, stays
// allowed to the token: NATS cannot tell a purge of one job from a purge
// of all by its subject.)
func WithToken(token string) EmbeddedOption {
	return func(o *server.Options) {
		o.CustomClientAuthentication = tokenAuth(token)
		o.AlwaysEnableNonce = true
	}
}

// sameToken compares two tokens in a time that depends on neither.
func sameToken(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1 && want != ""
}

// StartEmbedded starts an in-process NATS server with JetStream, its file
// storage under dir, listening on host:port (port -1 picks a free port). It
// returns once the server accepts connections. Call Shutdown to stop it.
// It fails at once when another process's server uses dir (ErrDataInUse,
// on Unix) or host:port cannot be listened on (in use, say).
func StartEmbedded(dir, host string, port int, opts ...EmbeddedOption) (e *Embedded, err error) {
	if dir == "" {
		return nil, errors.New("jetstream: the embedded server needs a data directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil { // as the server would
		return nil, fmt.Errorf("jetstream: the embedded server's data directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if port > 0 {
		// The server would only say, after a while, that it is not ready.
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("jetstream: embedded server: %w", err)
		}
		ln.Close()
	}
	sopts := &server.Options{
		ServerName: "laboro-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
	}
	for _, o := range opts {
		o(sopts)
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: embedded server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errors.New("jetstream: embedded server not ready after 10 s")
	}
	return &Embedded{srv: srv, lock: lock}, nil
}

// URL returns the URL clients connect to, for example "nats://127.0.0.1:4222".
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// InProcess is the nats.Option that connects to the server inside this
// process, without a socket (nor TLS, which a socket would want).
func (e *Embedded) InProcess() nats.Option { return nats.InProcessServer(e.srv) }

// Shutdown stops the server and waits until it has stopped. Its data stays
// in the directory, for the next StartEmbedded. It is safe to call more
// than once.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.lock.Close() // the directory is free again (a second Close does nothing)
}
