package fuq

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
)

// The reference's HTTPS + websocket transport: a worker logs in with
// POST HelloPath and gets a cookie named CookieName, then opens a websocket
// at PersistentPath with it, over which the fuq messages go, one to each
// binary websocket message.
const (
	HelloPath      = "/hello"
	PersistentPath = "/node/persistent"
	CookieName     = "fuq_foreman_auth"

	// DefaultPingInterval is how often each end of a websocket pings the
	// other, as the reference does (a fifth of its five-minute timeout).
	// A peer that answers nothing, not even a ping, for PingInterval plus
	// the timeout is taken for dead.
	DefaultPingInterval = 60 * time.Second

	// AuthEnv is the environment variable that fuq-foreman and fuq-worker
	// read the shared secret from when no file is given.
	AuthEnv = "FUQ_AUTH"
)

// Limits of the login, as the reference's where it has one.
const (
	maxCookieLen    = 128      // the reference's MaxCookieLength
	maxHelloBody    = 64 << 10 // a /hello request
	maxHelloReply   = 64 << 10 // a /hello answer
	cookieAge       = 14 * 24 * time.Hour
	maxNames        = 4096        // node:pid prefixes numbered; past that, numbering starts over
	cookieBytes     = 16          // random bytes of a session key
	maxNameInCookie = 48          // bytes of a worker's name kept in its cookie
	closeWait       = time.Second // for the close frame of a websocket
)

// ErrAuth is returned (wrapped) by Worker.Run when the foreman refuses the
// worker's login: a wrong secret, or a session of another foreman. It
// does not fix itself, so the worker stops.
var ErrAuth = errors.New("fuq: the foreman refused the login")

// helloRequest is the body of POST /hello: the reference's fuq.Hello, the
// secret and the node's description, keyed as its JSON tags say.
type helloRequest struct {
	Auth     string   `json:"auth"`
	Node     string   `json:"node"`
	Pid      int      `json:"pid"`
	Session  string   `json:"session"`
	UniqName string   `json:"unique_name,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	NumProc  int      `json:"nproc"`
}

// helloReply is the reference's answer to /hello (Go field names, no
// tags); the cookie also comes as a Set-Cookie header.
type helloReply struct {
	Name    string
	Session string
	Cookie  string
}

// ReadAuth reads the shared secret from a file: either the secret alone
// (surrounding white space is dropped), or a fuq configuration file such
// as the reference's fuqsrv.conf, whose "auth SECRET" line gives it. An
// empty secret is an error.
func ReadAuth(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if f := strings.Fields(line); len(f) == 2 && f[0] == "auth" {
			return []byte(f[1]), nil
		}
	}
	secret := bytes.TrimSpace(b)
	if len(secret) == 0 || bytes.ContainsAny(secret, "\r\n") {
		return nil, fmt.Errorf("fuq: %s holds neither a secret alone nor an \"auth\" line", path)
	}
	return secret, nil
}

// ErrNoAuth is returned by LoadAuth when neither the file nor the
// environment gives a secret.
var ErrNoAuth = errors.New("fuq: no shared secret: give a file or set " + AuthEnv)

// LoadAuth returns the shared secret: from file (see ReadAuth), or, when
// file is "", from the environment variable AuthEnv. Neither gives
// ErrNoAuth. (A secret never comes from a command line, which other users
// of the machine can read.)
func LoadAuth(file string) ([]byte, error) {
	if file != "" {
		return ReadAuth(file)
	}
	if s := strings.TrimSpace(os.Getenv(AuthEnv)); s != "" {
		return []byte(s), nil
	}
	return nil, ErrNoAuth
}

// sameSecret compares two secrets in time that depends on neither.
func sameSecret(a, b []byte) bool {
	ha, hb := sha256.Sum256(a), sha256.Sum256(b)
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// randomToken returns cookieBytes random bytes in the reference's
// encoding (base64, standard alphabet, no padding): a session key.
func randomToken() string {
	b := make([]byte, cookieBytes)
	rand.Read(b) // never fails
	return base64.RawStdEncoding.EncodeToString(b)
}

// webConn is a msgConn over a websocket: one message in each binary
// websocket message. It pings the peer every ping interval, answers its
// pings, and takes it for dead when nothing came for the interval plus
// the timeout.
type webConn struct {
	c       *websocket.Conn
	timeout time.Duration
	idle    time.Duration
	log     *zap.Logger

	once sync.Once
	stop chan struct{}
	done chan struct{} // closed when the pinger has returned
}

func newWebConn(c *websocket.Conn, timeout, ping time.Duration, log *zap.Logger) *webConn {
	if ping <= 0 {
		ping = DefaultPingInterval
	}
	w := &webConn{c: c, timeout: timeout, idle: ping + timeout, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	alive := func() { c.SetReadDeadline(time.Now().Add(w.idle)) }
	c.SetPongHandler(func(string) error { alive(); return nil })
	c.SetPingHandler(func(data string) error {
		alive()
		err := c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(timeout))
		var ne net.Error
		if errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &ne) && ne.Timeout() {
			return nil // the reader finds out for itself
		}
		return err
	})
	go w.ping(ping)
	return w
}

// ping pings the peer every d until the connection is closed.
func (w *webConn) ping(d time.Duration) {
	defer close(w.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if err := w.c.WriteControl(websocket.PingMessage, []byte("PING:laboro:"+strconv.Itoa(n)), time.Now().Add(w.timeout)); err != nil {
			w.log.Debug("ping failed", zap.Error(err))
			w.c.Close() // the reader ends
			return
		}
	}
}

func (w *webConn) readMessage(maxBody int) (Message, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	// The library refuses a longer websocket message (and tells the peer
	// with a close frame); ReadMessage checks the header's length too.
	w.c.SetReadLimit(int64(HeaderSize + maxBody))
	w.c.SetReadDeadline(time.Now().Add(w.idle))
	typ, r, err := w.c.NextReader()
	if err != nil {
		return Message{}, w.limitError(err, maxBody)
	}
	if typ != websocket.BinaryMessage {
		return Message{}, &ProtocolError{Msg: "a websocket text message; fuq messages are binary"}
	}
	w.c.SetReadDeadline(time.Now().Add(w.timeout)) // the message has begun
	m, err := ReadMessage(r, maxBody)
	if errors.Is(err, websocket.ErrReadLimit) {
		return Message{}, w.limitError(err, maxBody)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return Message{}, &ProtocolError{Msg: "a websocket message shorter than its fuq message"}
	}
	if err != nil {
		return m, err
	}
	var one [1]byte
	n, err := r.Read(one[:])
	if errors.Is(err, websocket.ErrReadLimit) {
		return Message{}, w.limitError(err, maxBody)
	}
	if n > 0 {
		return Message{}, &ProtocolError{Msg: "bytes after the fuq message in its websocket message"}
	}
	return m, nil
}

// limitError is err, or ErrBodyTooLarge when it is the library's word on a
// websocket message over the limit.
func (w *webConn) limitError(err error, maxBody int) error {
	if errors.Is(err, websocket.ErrReadLimit) {
		return fmt.Errorf("%w: a websocket message over %d bytes", ErrBodyTooLarge, HeaderSize+maxBody)
	}
	return err
}

func (w *webConn) writeMessage(b []byte) error {
	w.c.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.c.WriteMessage(websocket.BinaryMessage, b)
}

// close says goodbye with a close frame, as the reference does, closes
// the connection and waits for the pinger.
func (w *webConn) close() error {
	w.once.Do(func() {
		close(w.stop)
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "closing")
		w.c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(min(w.timeout, closeWait)))
		w.c.Close()
	})
	<-w.done
	return nil
}

// WebDialer is how a Worker joins a foreman the way the reference's
// workers do (fuqsrv -dispatch): POST /hello with the shared secret and
// the node's description, then a websocket at /node/persistent with the
// cookie the answer set. Its fields are read-only once the Worker runs.
type WebDialer struct {
	// URL is the foreman's address, https://HOST:PORT (http:// or the
	// ws:// and wss:// forms also do); required.
	URL string
	// TLS configures HTTPS (the reference's CA as RootCAs, its certname
	// as ServerName); nil means the system's roots.
	TLS *tls.Config
	// Auth is the foreman's shared secret; required.
	Auth []byte
	// Node is the name the worker gives; "" means the host's name.
	Node string
	// PingInterval is how often the worker pings the foreman; 0 means
	// DefaultPingInterval.
	PingInterval time.Duration
}

// webClient is a Worker's side of the login, kept across its
// connections: the cookie stays in its jar until the foreman refuses it.
type webClient struct {
	d       *WebDialer
	base    *url.URL // https or http
	jar     *cookiejar.Jar
	client  *http.Client
	dialer  *websocket.Dialer
	procs   int
	timeout time.Duration
	log     *zap.Logger
	logged  bool // a login's cookie is in the jar
}

func newWebClient(d *WebDialer, procs int, timeout time.Duration, log *zap.Logger) (*webClient, error) {
	base, err := url.Parse(d.URL)
	if err != nil {
		return nil, fmt.Errorf("fuq: foreman URL: %w", err)
	}
	switch base.Scheme {
	case "https", "wss":
		base.Scheme = "https"
	case "http", "ws":
		base.Scheme = "http"
	default:
		return nil, fmt.Errorf("fuq: foreman URL %q: the scheme must be https or http", d.URL)
	}
	if base.Host == "" {
		return nil, fmt.Errorf("fuq: foreman URL %q has no host", d.URL)
	}
	if len(d.Auth) == 0 {
		return nil, errors.New("fuq: WebDialer needs Auth")
	}
	base.Path, base.RawQuery, base.Fragment = strings.TrimSuffix(base.Path, "/"), "", ""
	jar, _ := cookiejar.New(nil) // never fails without options
	var tc *tls.Config
	if d.TLS != nil {
		tc = d.TLS.Clone()
		tc.NextProtos = []string{"http/1.1"} // a websocket needs HTTP/1.1
	}
	return &webClient{
		d: d, base: base, jar: jar, procs: procs, timeout: timeout, log: log,
		client: &http.Client{
			Jar: jar, Timeout: timeout,
			// No idle connection outlives a login: logins are rare.
			Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true, DisableCompression: true,
				Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		dialer: &websocket.Dialer{TLSClientConfig: tc, Jar: jar, HandshakeTimeout: timeout, Proxy: http.ProxyFromEnvironment},
	}, nil
}

// endpoint returns the URL of path at the foreman.
func (c *webClient) endpoint(path string) *url.URL {
	u := *c.base
	u.Path += path
	return &u
}

// login posts /hello, and keeps the cookie of the answer in the jar.
func (c *webClient) login(ctx context.Context) error {
	node := c.d.Node
	if node == "" {
		node, _ = os.Hostname()
	}
	body, _ := json.Marshal(helloRequest{Auth: string(c.d.Auth), Node: node, Pid: os.Getpid(), NumProc: c.procs})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint(HelloPath).String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: POST %s: %s", ErrAuth, HelloPath, resp.Status)
	default:
		return fmt.Errorf("fuq: POST %s: %s", HelloPath, resp.Status)
	}
	var reply helloReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxHelloReply)).Decode(&reply); err != nil {
		return fmt.Errorf("fuq: the answer to %s: %w", HelloPath, err)
	}
	if reply.Cookie == "" {
		return fmt.Errorf("fuq: the answer to %s has no cookie", HelloPath)
	}
	// The reference sets the cookie in a header too; a foreman that
	// sets it only in the body still works.
	if len(c.jar.Cookies(c.endpoint(PersistentPath))) == 0 {
		c.jar.SetCookies(c.endpoint("/"), []*http.Cookie{{Name: CookieName, Value: reply.Cookie, Path: "/"}})
	}
	c.logged = true
	c.log.Info("logged in to the foreman", zap.String("name", reply.Name))
	return nil
}

// dial logs in if no cookie is at hand, and opens the websocket; a
// cookie the foreman no longer knows gets a new login.
func (c *webClient) dial(ctx context.Context) (msgConn, error) {
	for attempt := 0; ; attempt++ {
		if !c.logged {
			if err := c.login(ctx); err != nil {
				return nil, err
			}
		}
		ws := c.endpoint(PersistentPath)
		ws.Scheme = map[string]string{"https": "wss", "http": "ws"}[ws.Scheme]
		conn, resp, err := c.dialer.DialContext(ctx, ws.String(), nil)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err == nil {
			return newWebConn(conn, c.timeout, c.d.PingInterval, c.log), nil
		}
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && attempt == 0 {
			c.log.Info("the foreman refused the cookie; logging in again", zap.String("status", resp.Status))
			c.logged = false
			continue
		}
		if resp != nil {
			return nil, fmt.Errorf("fuq: websocket at %s: %s", PersistentPath, resp.Status)
		}
		return nil, err
	}
}

// WebConfig configures Foreman.ServeWeb.
type WebConfig struct {
	// Auth is the shared secret a worker's /hello must carry; required.
	// It is compared in constant time.
	Auth []byte
	// TLS, when set, makes the server speak HTTPS, as the reference
	// does; it needs a certificate. nil serves plain HTTP (behind a proxy
	// that terminates TLS, or in tests).
	TLS *tls.Config
	// PingInterval is how often the foreman pings each worker; 0 means
	// DefaultPingInterval.
	PingInterval time.Duration
}

// webServer serves the reference's workers for a Foreman.
type webServer struct {
	f       *Foreman
	cfg     WebConfig
	timeout time.Duration
	session string
	ctx     context.Context // the sessions' context, cancelled when serving ends

	mu      sync.Mutex
	closing bool
	conns   sync.WaitGroup
	names   map[string]int // logins by node:pid, for unique names
}

// ServeWeb serves the reference's workers on ln until ctx ends: POST
// /hello checks the shared secret and sets a cookie (fuq_foreman_auth),
// GET /node/persistent turns a request with a known cookie into a
// websocket over which the worker is served as on Serve's connections.
// With cfg.TLS set, ln's connections speak TLS. Then it closes ln and
// every connection, and waits for the goroutines it started; it returns
// ctx.Err() or the listener's error.
func (f *Foreman) ServeWeb(ctx context.Context, ln net.Listener, cfg WebConfig) error {
	f.init()
	if len(cfg.Auth) == 0 {
		ln.Close()
		return errors.New("fuq: WebConfig needs Auth")
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &webServer{f: f, cfg: cfg, timeout: timeout, session: randomToken(), ctx: sctx, names: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc(HelloPath, s.hello)
	mux.HandleFunc(PersistentPath, s.persistent)
	hs := &http.Server{
		Handler: mux, ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		IdleTimeout: timeout, MaxHeaderBytes: 16 << 10,
		ErrorLog: zap.NewStdLog(f.Logger.WithOptions(zap.IncreaseLevel(zap.WarnLevel))),
	}
	// A websocket needs HTTP/1.1: no HTTP/2.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	// The connections are bounded before a peer has shown anything: one
	// that never logs in holds a place as long as one that does.
	ln = netutil.LimitListener(ln, cmp.Or(f.MaxConns, DefaultMaxConns))
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		tc.NextProtos = []string{"http/1.1"}
		ln = tls.NewListener(ln, tc)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
		hs.Close()
		<-served
	case err = <-served:
		hs.Close()
	}
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	cancel() // ends the websockets' sessions
	s.conns.Wait()
	return err
}

// hello is POST /hello: the worker's login.
func (s *webServer) hello(w http.ResponseWriter, r *http.Request) {
	log := s.f.Logger.With(zap.String("addr", r.RemoteAddr))
	if r.Method != http.MethodPost {
		httpError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
		return
	}
	var h helloRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxHelloBody)).Decode(&h); err != nil {
		log.Info("login refused: unreadable", zap.Error(err))
		httpError(w, http.StatusBadRequest, "bad request")
		return
	}
	if !sameSecret([]byte(h.Auth), s.cfg.Auth) {
		log.Warn("login refused: wrong secret", zap.String("node", h.Node))
		httpError(w, http.StatusForbidden, "access forbidden")
		return
	}
	if h.Session != "" && h.Session != s.session {
		log.Info("login refused: a session of another foreman", zap.String("node", h.Node))
		httpError(w, http.StatusUnauthorized, "access not authorized")
		return
	}
	name := s.register(h)
	expires := time.Now().Add(cookieAge)
	cookie := makeCookie(s.cfg.Auth, name, expires)
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookie, Path: "/", Expires: expires, HttpOnly: true})
	log.Info("worker logged in", zap.String("name", name), zap.Int("nproc", h.NumProc))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(helloReply{Name: name, Session: s.session, Cookie: cookie})
}

// register gives a login its unique name, as the reference does:
// node:pid:n.
func (s *webServer) register(h helloRequest) string {
	prefix := h.Node + ":" + strconv.Itoa(h.Pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.names[prefix]; !ok && len(s.names) >= maxNames {
		clear(s.names) // numbers may repeat after that many nodes: names are for people
	}
	s.names[prefix]++
	return prefix + ":" + strconv.Itoa(s.names[prefix])
}

// persistent is GET /node/persistent: a logged-in worker's websocket.
func (s *webServer) persistent(w http.ResponseWriter, r *http.Request) {
	log := s.f.Logger.With(zap.String("addr", r.RemoteAddr))
	if r.Method != http.MethodGet {
		httpError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
		return
	}
	c, err := r.Cookie(CookieName)
	switch {
	case err != nil:
		log.Info("websocket refused: no cookie")
		http.Error(w, "missing session cookie", http.StatusUnauthorized)
		return
	case len(c.Value) > maxCookieLen:
		log.Info("websocket refused: cookie too long", zap.Int("length", len(c.Value)))
		http.Error(w, "cannot validate cookie", http.StatusUnauthorized)
		return
	}
	name, known := checkCookie(s.cfg.Auth, c.Value, time.Now())
	if !known {
		log.Info("websocket refused: unknown cookie")
		http.Error(w, "cannot validate cookie", http.StatusForbidden)
		return
	}
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.conns.Add(1)
	}
	s.mu.Unlock()
	if closing {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.conns.Done()
	if !s.f.admit() {
		log.Warn("websocket refused: too many connections, the foreman serves no more workers' connections at once",
			zap.Int("at most", cmp.Or(s.f.MaxConns, DefaultMaxConns)))
		http.Error(w, "too many connections", http.StatusServiceUnavailable)
		return
	}
	defer s.f.conns.Add(-1)
	up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024, HandshakeTimeout: s.timeout}
	conn, err := up.Upgrade(w, r, nil) // answers the request itself on an error
	if err != nil {
		log.Info("websocket refused", zap.Error(err))
		return
	}
	s.f.serveMsgConn(s.ctx, newWebConn(conn, s.timeout, s.cfg.PingInterval, log), r.RemoteAddr, name, true)
}

// makeCookie returns the cookie of a login: the worker's name and the
// cookie's expiry, signed with a key drawn from the shared secret. The
// reference keeps its cookies in its database, so that its workers come
// back after it restarts; a signed cookie needs no storage for that: a
// foreman started again with the same secret knows it. It is base64
// (URL alphabet, no padding) of id (8 random bytes), expiry (8, Unix
// seconds), MAC (16: HMAC-SHA-256, cut) and the name (up to
// maxNameInCookie bytes); at most 107 characters, below the reference's
// limit of 128.
func makeCookie(secret []byte, name string, expires time.Time) string {
	if len(name) > maxNameInCookie {
		name = name[:maxNameInCookie]
	}
	b := make([]byte, 32, 32+len(name))
	rand.Read(b[:8])
	binary.BigEndian.PutUint64(b[8:16], uint64(expires.Unix()))
	b = append(b, name...)
	copy(b[16:32], cookieMAC(secret, b[:16], b[32:]))
	return base64.RawURLEncoding.EncodeToString(b)
}

// checkCookie returns the worker's name in cookie, and whether the cookie
// is one of makeCookie's for this secret that has not expired at now.
func checkCookie(secret []byte, cookie string, now time.Time) (string, bool) {
	// Strict: a cookie has one spelling (the bits past its last byte
	// are zero), and it is no longer than makeCookie's.
	if len(cookie) > maxCookieLen {
		return "", false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(cookie)
	if err != nil || len(b) < 32 || len(b) > 32+maxNameInCookie {
		return "", false
	}
	if !hmac.Equal(b[16:32], cookieMAC(secret, b[:16], b[32:])) {
		return "", false
	}
	if now.Unix() > int64(binary.BigEndian.Uint64(b[8:16])) {
		return "", false
	}
	return string(b[32:]), true
}

// cookieMAC signs a cookie's id, expiry and name.
func cookieMAC(secret, idExpires, name []byte) []byte {
	key := sha256.Sum256(append([]byte("laboro fuq cookie\x00"), secret...))
	m := hmac.New(sha256.New, key[:])
	m.Write(idExpires)
	m.Write(name)
	return m.Sum(nil)[:16]
}

// httpError answers as the reference does: "<code> <text>".
func httpError(w http.ResponseWriter, code int, text string) {
	http.Error(w, strconv.Itoa(code)+" "+text, code)
}
