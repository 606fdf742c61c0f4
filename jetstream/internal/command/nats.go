package command

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// defaultURL is where the commands other than serve look for NATS, the
// address of serve's embedded server.
const defaultURL = "nats://127.0.0.1:4222"

// The wait before each round of attempts to reach the servers again: from
// reconnectMin, twice as long each round up to reconnectMax (the NATS
// client's own wait, every round), each up to half as long again at
// random, so that a fleet cut off at once does not come back at once. A
// worker is back on a laboro serve started again within a fraction of a
// second of its start, rather than up to 2 s later, its results held
// meanwhile and its jobs unsaid.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 2 * time.Second
)

// reconnectDelay is the wait before round attempts (from 1) of reaching
// the servers again.
func reconnectDelay(attempts int) time.Duration {
	d := reconnectMax
	if attempts >= 1 && attempts <= 5 {
		d = min(reconnectMin<<(attempts-1), reconnectMax)
	}
	return d + rand.N(d/2)
}

// shown is urls (comma-separated, as -nats takes them) as a log line, an
// error or a job's environment may show them: without the user, password
// or token that a NATS URL may carry before its host.
func shown(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		scheme, rest, ok := strings.Cut(p, "://")
		if !ok {
			scheme, rest = "", p
		}
		host := rest
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			host = rest[:end]
		}
		at := strings.LastIndex(host, "@")
		if at < 0 {
			continue
		}
		if ok {
			scheme += "://"
		}
		parts[i] = scheme + rest[at+1:]
	}
	return strings.Join(parts, ",")
}

// connect connects to url (or defaultURL), for good: the connection
// reconnects whenever the server goes away, and logs it. A worker waits
// for a server that is not up yet (waitForServer); the other commands fail
// at once.
func (c *common) connect(url string, waitForServer bool) (*nats.Conn, error) {
	if url == "" {
		url = defaultURL
	}
	said := saidOnce{}
	// noToken is set when laboro's token is not proven: there is none yet,
	// or the server is not serve's.
	var noToken atomic.Bool
	// presented reports whether the command has credentials of some kind:
	// without, a refusal only says that there are none, which is said
	// already.
	presented := func() bool { return c.creds != "" || c.token != "" || !noToken.Load() || shown(url) != url }
	refusedToken := func() {
		said.once("refused", func() {
			c.log.Error("NATS "+c.refusal(url, !noToken.Load()), zap.String("url", shown(url)))
		})
	}
	dial := &dialer{Dialer: net.Dialer{Timeout: nats.GetDefaultOptions().Timeout}}
	opts := []nats.Option{
		nats.Name("laboro"),
		nats.SetCustomDialer(dial),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.log.Warn("disconnected from NATS", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			c.log.Info("reconnected to NATS", zap.String("url", shown(nc.ConnectedUrl())))
		}),
		// A refused token is said once, as soon as it is: at a connection
		// attempt that a worker waiting for its server retries, or as the
		// connection closes for it.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if errors.Is(err, nats.ErrAuthorization) && presented() {
				refusedToken()
				return
			}
			if errors.Is(err, nats.ErrNkeysNotSupported) {
				said.once("nonce", func() {
					c.log.Error("NATS offers no nonce against which to prove laboro's token, which is never sent: it is not laboro serve's (for a NATS server of your own, write its credentials in the URL, or give -creds)",
						zap.String("url", shown(url)))
				})
				return
			}
			// Why the server cannot be reached, said once: a refused
			// connection, a name that does not resolve.
			said.once("unreachable", func() {
				c.log.Info("cannot reach NATS yet; trying again", zap.String("url", shown(url)), zap.Error(dial.why(err)))
			})
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if errors.Is(nc.LastError(), nats.ErrAuthorization) && presented() {
				refusedToken()
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrAuthorization) {
				refusedToken()
				return
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.log.Error("NATS refused a request: this token's rights do not cover it (a worker's token cannot submit, a client's cannot run jobs; see laboro token)", zap.Error(err))
				return
			}
			c.log.Warn("NATS", zap.Error(err))
		}),
	}
	if !c.tokenSet && c.creds == "" {
		// $LABORO_TOKEN, else the token laboro serve made for this user;
		// either way no job started from here sees it.
		c.token, c.tokenFrom, c.tokenErr = secret.Locate("laboro", "LABORO_TOKEN")
		c.tokenSet = true
	}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			err = errors.New("no PEM certificate in it")
		}
		if err != nil {
			return nil, fmt.Errorf("-ca %s: %w", c.ca, err)
		}
		opts = append(opts, nats.RootCAs(c.ca))
	}
	if c.inProcess != nil {
		opts = append(opts, c.inProcess)
	}
	if c.role() != "" {
		// Nothing a worker or a client sends while its connection is down
		// is kept for the server it connects to next, which has yet to
		// prove itself before it is given a result or a job
		// (jetstream.Config.ProveServer): what cannot go then is sent
		// again once it has, or fails.
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	var nc *nats.Conn
	var err error
	role := c.role()
	// laboro's token is proven, never sent; with the rights of this
	// command's role only, derived from the server's token. Where there is
	// none yet for a worker (serve may not have made it), it is looked
	// for at each attempt, until the server takes it.
	var prove []nats.Option
	switch {
	case c.creds != "" || shown(url) != url:
		// The user's own credentials.
	case c.token != "":
		prove = []nats.Option{jetstream.Token(c.roleToken(c.token, role))}
	case waitForServer && role != "":
		prove = []nats.Option{nats.IgnoreAuthErrorAbort(), jetstream.RoleTokenFrom(role, c.stream, func() string {
			tok, err := secret.Find("laboro", "LABORO_TOKEN")
			noToken.Store(tok == "")
			if tok != "" {
				c.found.Store(&tok)
			}
			if err != nil {
				// Said once for each reason: none yet, or one that is
				// refused (open to other users, say).
				said.once(err.Error(), func() {
					c.log.Warn("no token to present yet; waiting (laboro serve makes laboro.token at its first start; on another machine, copy a worker's token there, see laboro token)",
						zap.Error(err))
				})
			}
			return tok
		})}
	}
	if prove != nil {
		// A first attempt tells whether the server can take a proof: one
		// that offers no nonce is not serve's, and is connected to without
		// the token.
		proven := append(slices.Clip(opts), prove...)
		nc, err = nats.Connect(url, proven...)
		if !errors.Is(err, nats.ErrNkeysNotSupported) {
			if err != nil && waitForServer {
				// Not up yet, no token yet, or a refused one: keep
				// trying, saying why once. Should what comes up offer no
				// nonce, ReconnectErrHandler says so.
				c.proved = make(chan struct{})
				var once sync.Once
				nc, err = nats.Connect(url, append(proven, nats.RetryOnFailedConnect(true),
					nats.ConnectHandler(func(*nats.Conn) { once.Do(func() { close(c.proved) }) }))...)
			}
			c.tokenProven = !noToken.Load()
			return c.connected(url, nc, dial.why(err), c.tokenProven)
		}
		c.log.Info("NATS offers no nonce against which to prove laboro's token: it is not laboro serve's; connecting without the token, which is never sent",
			zap.String("url", shown(url)))
		noToken.Store(true)
	}
	if waitForServer {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err = nats.Connect(url, opts...)
	return c.connected(url, nc, dial.why(err), !noToken.Load())
}

// jobKey returns the key of the jobs a worker may run (see
// jetstream.Config.JobKey): that of laboro's token, which its server signs
// them with; nil without a token. A worker that connected before it had
// its token (it waits for serve's first start) waits for the connection
// that proves it, or for ctx or stop to end; ok is false if they did.
func (c *common) jobKey(ctx context.Context, stop <-chan struct{}) (key []byte, ok bool) {
	if c.proved != nil {
		select {
		case <-c.proved:
		default:
			c.log.Info("waiting for the NATS server to take laboro's token")
		}
		select {
		case <-c.proved:
		case <-ctx.Done():
			return nil, false
		case <-stop:
			return nil, false
		}
	}
	tok := c.token
	if found := c.found.Load(); tok == "" && found != nil {
		tok = *found
	}
	return jetstream.JobKey(tok, c.stream), true
}

// dialer dials NATS servers as the client would, and keeps the last
// failure: the client itself only says that no server was available.
type dialer struct {
	net.Dialer
	last atomic.Pointer[error]
}

// Dial implements nats.CustomDialer.
func (d *dialer) Dial(network, address string) (net.Conn, error) {
	conn, err := d.Dialer.Dial(network, address)
	if err != nil {
		d.last.Store(&err)
	}
	return conn, err
}

// why returns err, the client's, with the last dial's failure in place of
// the client's "no servers available": a refused connection, a name that
// does not resolve.
func (d *dialer) why(err error) error {
	if last := d.last.Load(); last != nil && errors.Is(err, nats.ErrNoServers) {
		return fmt.Errorf("%w (%w)", err, *last)
	}
	return err
}

// saidOnce runs each of its functions once by key: a message that a
// connection's retries would repeat is logged once.
type saidOnce struct {
	mu   sync.Mutex
	said map[string]bool
}

func (s *saidOnce) once(key string, say func()) {
	s.mu.Lock()
	first := !s.said[key]
	if s.said == nil {
		s.said = map[string]bool{}
	}
	s.said[key] = true
	s.mu.Unlock()
	if first {
		say()
	}
}

// roleToken is the token to present for role, from tok: the role's token
// derived from a server's token, or tok itself (a role's token already,
// none, or no role).
func (c *common) roleToken(tok string, role jetstream.Role) string {
	if tok == "" || role == "" || jetstream.TokenRole(tok) != "" {
		return tok
	}
	return jetstream.RoleToken(tok, role, c.stream)
}

// role is the rights a command needs on an embedded server (see
// jetstream.Role): "" for serve and run, which use the server's token.
func (c *common) role() jetstream.Role {
	switch c.name {
	case "worker":
		return jetstream.RoleWorker
	case "serve", "run":
		return ""
	}
	return jetstream.RoleClient
}

// refused tells whether err is the server's refusal of a token.
func refused(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || (err != nil && strings.Contains(err.Error(), "Authorization Violation"))
}

// connected turns the outcome of connecting to url into what connect
// returns, with an error a user can act on.
// tokenProven says whether laboro's token was proven to the server.
func (c *common) connected(url string, nc *nats.Conn, err error, tokenProven bool) (*nats.Conn, error) {
	if refused(err) {
		if c.token == "" && c.tokenErr != nil && c.creds == "" && shown(url) == url {
			return nil, fmt.Errorf("NATS at %s wants a token: %w (copy laboro.token from the machine of laboro serve, or set LABORO_TOKEN)", shown(url), c.tokenErr)
		}
		return nil, fmt.Errorf("NATS at %s %s", shown(url), c.refusal(url, tokenProven))
	}
	if err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) || strings.Contains(err.Error(), "x509: ") {
			return nil, fmt.Errorf("NATS at %s speaks TLS with a certificate this command cannot verify (give -ca with the CA that signed it): %w", shown(url), hideCredentials(err, url))
		}
		return nil, fmt.Errorf("cannot reach NATS at %s (is `laboro serve` running?): %w", shown(url), hideCredentials(err, url))
	}
	return nc, nil
}

// refusal says what NATS at url refused; tokenProven says whether
// laboro's token was proven to it.
func (c *common) refusal(url string, tokenProven bool) string {
	switch {
	case shown(url) != url:
		return "refused the credentials written in its URL"
	case c.creds != "":
		return "refused the credentials of -creds " + c.creds
	case c.token != "" && !tokenProven:
		return "wants credentials, and it is not laboro serve's: laboro's token is not for it (write them in the URL, or give -creds)"
	}
	return "refused the token (from $LABORO_TOKEN or laboro.token): it is wrong, not the server's nor derived from it (see laboro token)"
}

// hideCredentials returns err with each of the URLs of urls that it quotes
// shown without credentials: the NATS client's words may quote a URL that
// it could not parse, password and all.
func hideCredentials(err error, urls string) error {
	text := err.Error()
	for _, u := range strings.Split(urls, ",") {
		if s := shown(u); s != u {
			text = strings.ReplaceAll(text, u, s)
		}
	}
	if text == err.Error() {
		return err
	}
	return &hidden{err: err, text: text}
}

// hidden is an error whose text has been cleaned of credentials.
type hidden struct {
	err  error
	text string
}

func (h *hidden) Error() string { return h.text }
func (h *hidden) Unwrap() error { return h.err }

// client connects to NATS and returns a Client whose results go to a
// directory of its own; release disconnects and removes the directory. On
// failure it says why on standard error and returns false.
func (c *common) client() (cl *jetstream.Client, release func(), ok bool) {
	nc, err := c.connect(c.url, false)
	if err != nil {
		c.sayError(err.Error())
		return nil, nil, false
	}
	dir, err := os.MkdirTemp("", "laboro-"+c.name+"-")
	if err != nil {
		nc.Close()
		c.sayError(err.Error())
		return nil, nil, false
	}
	cfg := c.config()
	cfg.Dir = dir
	if c.tokenProven {
		// Submit and ask only where serve proves itself: not to a
		// program holding its address while it is down.
		cfg.ClientKey, cfg.ProveServer = jetstream.ClientKey(c.roleToken(c.token, jetstream.RoleClient), c.stream), true
	}
	return &jetstream.Client{Conn: nc, Config: cfg}, func() { nc.Close(); os.RemoveAll(dir) }, true
}

// withClient runs f with a Client of the service and a context that ends
// at an interrupt, and returns f's exit status: what the commands that
// talk to a running service share.
func (c *common) withClient(f func(ctx context.Context, cl *jetstream.Client) int) int {
	defer c.log.Sync()
	ctx, stop := interruptible()
	defer stop()
	cl, release, ok := c.client()
	if !ok {
		return exitFailed
	}
	defer release()
	return f(ctx, cl)
}
