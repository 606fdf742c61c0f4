package fuq

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/fuq/fuqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// testSecret is a shared secret such as the reference generates (base64).
const testSecret = "JZ/ib5B35Ejb1JNnFWsWkaHxuwq8O0ts+NOOzycTAm8"

// serveWeb starts ServeWeb for the system's Foreman, over TLS, beside its
// TCP listener, and returns its URL.
func (s *system) serveWeb(pki fuqtest.PKI, ping time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(s.t, err)
	ctx, cancel := context.WithCancel(s.ctx)
	served := make(chan error, 1)
	go func() {
		served <- s.f.ServeWeb(ctx, ln, WebConfig{Auth: []byte(testSecret), TLS: pki.Server, PingInterval: ping})
	}()
	s.t.Cleanup(func() {
		cancel()
		assert.ErrorIs(s.t, <-served, context.Canceled)
	})
	return "https://" + ln.Addr().String()
}

// webWorker starts a Worker that joins the foreman at url with secret.
func (s *system) webWorker(url string, pki fuqtest.PKI, procs int, secret string) (*Worker, <-chan error) {
	w := &Worker{
		Web:   &WebDialer{URL: url, TLS: pki.Client, Auth: []byte(secret), Node: "node-a"},
		Procs: procs, SpoolDir: s.t.TempDir(), Reconnect: 50 * time.Millisecond, Timeout: 5 * time.Second,
		Logger: s.f.Logger.With(zap.String("side", "worker")),
	}
	ran := make(chan error, 1)
	s.workers.Go(func() { ran <- w.Run(s.ctx) })
	return w, ran
}

// refWorker is a worker played by the test as the reference's worker
// (fuqsrv -dispatch) speaks: the same library (gorilla/websocket), the
// same buffer sizes, the login and cookie of fuq.Endpoint, and each
// message written as proto.Message.Send writes it, header then body, into
// one binary websocket message.
type refWorker struct {
	t      *testing.T
	base   string
	client *http.Client
	jar    *cookiejar.Jar
	tls    *fuqtest.PKI
	c      *websocket.Conn
	hi     int64
}

func newRefWorker(t *testing.T, base string, pki fuqtest.PKI) *refWorker {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: pki.Client, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &refWorker{t: t, base: base, jar: jar, tls: &pki, hi: -1,
		client: &http.Client{Transport: tr, Jar: jar, Timeout: 10 * time.Second}}
}

// post sends body to path as fuq.Endpoint.SendMessage does, and returns
// the answer and its body.
func (r *refWorker) post(path, body string) (*http.Response, []byte) {
	r.t.Helper()
	resp, err := r.client.Post(r.base+path, "application/json", strings.NewReader(body))
	require.NoError(r.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	return resp, b
}

// login posts the reference's first HELLO of a node.
func (r *refWorker) login(secret string) (*http.Response, []byte) {
	return r.post(HelloPath, fmt.Sprintf(`{"auth":%q,"node":"refnode","pid":4242,"session":"","nproc":1}`, secret))
}

// dial opens the websocket with the cookies of the jar, as
// websocket.DialWithTLS does; header adds to the request.
func (r *refWorker) dial(header http.Header) (*websocket.Conn, *http.Response, error) {
	d := websocket.Dialer{ReadBufferSize: 1024, WriteBufferSize: 1024, Jar: r.jar, TLSClientConfig: r.tls.Client,
		HandshakeTimeout: 10 * time.Second}
	c, resp, err := d.Dial("wss"+strings.TrimPrefix(r.base, "https")+PersistentPath, header)
	if c != nil {
		r.t.Cleanup(func() { c.Close() })
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
	}
	return c, resp, err
}

func (r *refWorker) connect() {
	r.t.Helper()
	c, _, err := r.dial(nil)
	require.NoError(r.t, err)
	r.c = c
}

// writeRaw sends b as one binary websocket message, in two writes.
func (r *refWorker) writeRaw(b []byte) {
	r.t.Helper()
	w, err := r.c.NextWriter(websocket.BinaryMessage)
	require.NoError(r.t, err)
	_, err = w.Write(b[:min(len(b), HeaderSize)])
	require.NoError(r.t, err)
	_, err = w.Write(b[min(len(b), HeaderSize):])
	require.NoError(r.t, err)
	require.NoError(r.t, w.Close())
}

func (r *refWorker) write(m Message) {
	r.t.Helper()
	b, err := m.AppendBinary(nil)
	require.NoError(r.t, err)
	r.writeRaw(b)
}

// readRaw reads one websocket message, which must be binary.
func (r *refWorker) readRaw() []byte {
	r.t.Helper()
	typ, b, err := r.c.ReadMessage()
	require.NoError(r.t, err)
	require.Equal(r.t, websocket.BinaryMessage, typ)
	return b
}

func (r *refWorker) read() Message {
	r.t.Helper()
	b := r.readRaw()
	m, err := ReadMessage(bytes.NewReader(b), 0)
	require.NoError(r.t, err)
	r.hi = max(r.hi, int64(m.Seq))
	return m
}

func (r *refWorker) readType(typ Type) Message {
	r.t.Helper()
	m := r.read()
	require.Equal(r.t, typ, m.Type, "%+v", m.Header)
	return m
}

// request numbers m as the reference's sequencer does (n<<1 above all
// seen), sends it and returns the reply.
func (r *refWorker) request(m Message) Message {
	r.t.Helper()
	m.Seq = uint32((r.hi + 2) &^ 1)
	r.hi = int64(m.Seq)
	r.write(m)
	reply := r.read()
	require.Equal(r.t, m.Seq, reply.Seq, "the reply to %v", m.Type)
	return reply
}

func (r *refWorker) reply(req, m Message) {
	r.t.Helper()
	m.Seq = req.Seq
	r.write(m)
}

func (r *refWorker) update(t Task, success bool, status string) Message {
	r.t.Helper()
	return r.request(Message{Header: Header{Type: TypeUpdate}, Update: &StatusUpdate{JobId: t.JobDescription.JobId, Task: t.Task, Success: success, Status: status}})
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// The login and the websocket, byte for byte as the reference's worker
// speaks them and as its foreman answers: POST /hello with {auth, node,
// pid, session, nproc} gets a fuq_foreman_auth cookie (Path /, HttpOnly,
// 14 days) and {Name, Session, Cookie}, Name being node:pid:n; the
// websocket carries one message in each binary websocket message (the
// HELLO and OK of the project's wire vectors).
func TestWebReferenceWorker(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{})
	base := s.serveWeb(pki, 0)
	r := newRefWorker(t, base, pki)

	resp, body := r.login(testSecret)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	assert.Equal(t, CookieName, c.Name)
	assert.Equal(t, "/", c.Path)
	assert.True(t, c.HttpOnly)
	assert.WithinDuration(t, time.Now().Add(14*24*time.Hour), c.Expires, time.Minute)
	assert.LessOrEqual(t, len(c.Value), maxCookieLen, "within the reference's limit")
	var reply map[string]string
	require.NoError(t, json.Unmarshal(body, &reply))
	assert.Equal(t, []string{"Cookie", "Name", "Session"}, slices.Sorted(maps.Keys(reply)))
	assert.Equal(t, "refnode:4242:1", reply["Name"])
	assert.Equal(t, c.Value, reply["Cookie"])
	assert.NotEmpty(t, reply["Session"])
	assert.True(t, bytes.HasSuffix(body, []byte("}\n")), "a json.Encoder's line")

	// A second login of the same node and pid gets the next name; the
	// session the foreman gave is accepted.
	resp, body = r.post(HelloPath, fmt.Sprintf(`{"auth":%q,"node":"refnode","pid":4242,"session":%q,"nproc":1}`, testSecret, reply["Session"]))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var second helloReply
	require.NoError(t, json.Unmarshal(body, &second))
	assert.Equal(t, "refnode:4242:2", second.Name)

	r.connect()
	// HELLO{NumProcs: 4, Running: []} at seq 0, from the wire vectors.
	r.writeRaw(unhex(t, "47c00200000000000000000014000000 82a84e756d50726f637304a752756e6e696e6790"))
	assert.Equal(t, unhex(t, "47c00100000000000000000000000400"), r.readRaw(), "OK(4|0) at seq 0")
	r.hi = 0
	require.Eventually(t, func() bool {
		ws := s.f.Workers()
		return len(ws) == 1 && ws[0].Node == "refnode:4242:2"
	}, 10*time.Second, time.Millisecond)

	h, _ := s.submit("ref", "/bin/true", 2)
	job1 := r.readType(TypeJob)
	require.Len(t, job1.Tasks, 1, "one task to a JOB over the websocket")
	r.reply(job1, Message{Header: Header{Type: TypeOK, Arg0: PackOK(3, 1)}})
	job2 := r.readType(TypeJob)
	require.Len(t, job2.Tasks, 1)
	r.reply(job2, Message{Header: Header{Type: TypeOK, Arg0: PackOK(2, 2)}})
	assert.Equal(t, PackOK(3, 1), r.update(job1.Tasks[0], true, "done").Arg0)
	assert.Equal(t, PackOK(4, 0), r.update(job2.Tasks[0], true, "done").Arg0)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
}

// refDispatch answers JOBs as the reference worker's node.Dispatch does:
// its processors are procs less the tasks in its list, which keeps a task
// that has ended until the OK to its UPDATE has come back and been
// handled; it takes a JOB's tasks in order while it has a processor, and
// keeps those it took when it answers ERROR(no procs, nproc|nrun).
type refDispatch struct {
	procs int
	tasks []TaskPair
}

func (d *refDispatch) answer(r *refWorker, job Message) {
	for _, t := range job.Tasks {
		if len(d.tasks) == d.procs {
			r.reply(job, Message{Header: Header{Type: TypeError, Code: CodeNoProcs, Arg0: PackOK(0, uint16(len(d.tasks)))}})
			return
		}
		d.tasks = append(d.tasks, TaskPair{JobId: t.JobDescription.JobId, Task: t.Task})
	}
	r.reply(job, Message{Header: Header{Type: TypeOK, Arg0: PackOK(uint16(d.procs-len(d.tasks)), uint16(len(d.tasks)))}})
}

// record drops a task that has ended from the list, as the reference
// worker does once the OK to its UPDATE is handled.
func (d *refDispatch) record(p TaskPair) {
	d.tasks = slices.DeleteFunc(d.tasks, func(q TaskPair) bool { return q == p })
}

// The reference worker keeps the tasks of a JOB it took before it ran
// out of processors, and its ERROR(no procs) does not say which: a JOB
// over the websocket carries one task, taken whole or refused whole, so
// that no task runs there while the foreman offers it to others. (The
// foreman sent a JOB of two tasks after a refusal; the reference worker
// ran the first, and the foreman gave both to the next worker.)
func TestWebReferenceWorkerKeepsPartOfAJob(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{})
	base := s.serveWeb(pki, 0)
	r := newRefWorker(t, base, pki)
	resp, _ := r.login(testSecret)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r.connect()
	d := &refDispatch{procs: 2}
	r.request(Message{Header: Header{Type: TypeHello}, Hello: &Hello{NumProcs: 2, Running: []Task{}}})

	a, _ := s.submit("a", "/bin/true", 2)
	var aTasks []Task
	for len(aTasks) < 2 {
		job := r.readType(TypeJob)
		d.answer(r, job)
		aTasks = append(aTasks, job.Tasks...)
	}
	b, _ := s.submit("b", "/bin/true", 2)
	require.Eventually(t, func() bool { info, ok := s.f.JobByRef(b.ID()); return ok && info.Pending == 2 }, 10*time.Second, time.Millisecond)

	// A task ends: the JOB right after the OK finds it still listed, and
	// is refused.
	r.update(aTasks[0], true, "done")
	d.answer(r, r.readType(TypeJob))
	d.record(pairs(aTasks)[0])
	// The other ends: the JOB after it finds one processor free.
	r.update(aTasks[1], true, "done")
	job := r.readType(TypeJob)
	d.answer(r, job)
	d.record(pairs(aTasks)[1])
	assert.Equal(t, laboro.StatusSucceeded, wait(t, a).Status)

	// Every task the worker took is the worker's for the foreman.
	require.Len(t, job.Tasks, 1)
	for len(d.tasks) < 2 {
		d.answer(r, r.readType(TypeJob))
	}
	info, _ := s.f.JobByRef(b.ID())
	for _, ti := range info.Tasks {
		assert.Equal(t, TaskRunning, ti.State, "task %d", ti.Task)
		assert.Equal(t, "worker-1", ti.Worker, "task %d", ti.Task)
	}
	for _, p := range slices.Clone(d.tasks) {
		r.update(Task{Task: p.Task, JobDescription: JobDescription{JobId: p.JobId}}, true, "done")
		d.record(p)
	}
	assert.Equal(t, laboro.StatusSucceeded, wait(t, b).Status)
	info, _ = s.f.JobByRef(b.ID())
	for _, ti := range info.Tasks {
		assert.Equal(t, 1, ti.Attempts, "task %d ran once", ti.Task)
	}
}

// The login and the websocket refuse what the reference refuses, with its
// status codes; the secret and the cookies are never logged.
func TestWebRefusals(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{})
	base := s.serveWeb(pki, 0)
	r := newRefWorker(t, base, pki)

	resp, body := r.login("wrong")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "403 access forbidden\n", string(body))
	assert.Empty(t, resp.Cookies())

	resp, _ = r.login(testSecret[:len(testSecret)-1])
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a prefix of the secret")
	resp, _ = r.post(HelloPath, `{"auth":`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = r.post(HelloPath, `{"auth":"`+strings.Repeat("x", maxHelloBody)+`"}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "a body over the limit")
	resp, _ = r.post(HelloPath, fmt.Sprintf(`{"auth":%q,"node":"n","pid":1,"session":"another","nproc":1}`, testSecret))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a session of another foreman")
	get, err := r.client.Get(base + HelloPath)
	require.NoError(t, err)
	get.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, get.StatusCode)

	_, resp, err = r.dial(nil)
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no cookie")
	_, resp, err = r.dial(http.Header{"Cookie": {CookieName + "=AAAAAAAAAAAAAAAAAAAAAA"}})
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "an unknown cookie")
	_, resp, err = r.dial(http.Header{"Cookie": {CookieName + "=" + strings.Repeat("A", maxCookieLen+1)}})
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a cookie too long")

	resp, _ = r.login(testSecret)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cookie := resp.Cookies()[0].Value
	resp, _ = r.post(PersistentPath, "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	_, resp, err = r.dial(nil)
	require.NoError(t, err, "the login's cookie opens the websocket")
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)

	// Our worker with a wrong secret stops at once, with ErrAuth.
	_, ran := s.webWorker(base, pki, 1, "wrong")
	select {
	case err := <-ran:
		assert.ErrorIs(t, err, ErrAuth)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker with a wrong secret did not stop")
	}

	for _, e := range s.logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += fmt.Sprint(" ", f.Key, f.String, f.Interface)
		}
		assert.NotContains(t, line, testSecret)
		assert.NotContains(t, line, cookie)
	}
}

// A message whose body is over the limit ends the websocket, as over TCP.
func TestWebOversizedMessage(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{MaxBody: 1024})
	base := s.serveWeb(pki, 0)
	r := newRefWorker(t, base, pki)
	resp, _ := r.login(testSecret)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r.connect()
	r.request(Message{Header: Header{Type: TypeHello}, Hello: &Hello{NumProcs: 1, Running: []Task{}}})

	big := Message{Header: Header{Type: TypeUpdate, Seq: 2, Arg0: 4096}}.Header
	b, err := big.AppendBinary(nil)
	require.NoError(t, err)
	r.writeRaw(b) // refused on its header: the body is not waited for
	_, _, err = r.c.ReadMessage()
	require.Error(t, err, "the foreman ended the connection")
	require.Eventually(t, func() bool {
		for _, e := range s.logs.FilterMessage("worker connection ended").All() {
			if err, ok := e.ContextMap()["error"].(string); ok && strings.Contains(err, ErrBodyTooLarge.Error()) {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

// A cookie is signed with a key drawn from the secret: a foreman started
// again with the same secret takes the cookies of the one before, as the
// reference's does (it keeps them in its database), so that the
// reference's workers, which never log in again, come back after it.
func TestWebCookieOutlivesTheForeman(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	first := startSystem(t, &Foreman{})
	r := newRefWorker(t, first.serveWeb(pki, 0), pki)
	resp, _ := r.login(testSecret)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cookie := resp.Cookies()[0].Value
	name, ok := checkCookie([]byte(testSecret), cookie, time.Now())
	assert.True(t, ok)
	assert.Equal(t, "refnode:4242:1", name)

	again := startSystem(t, &Foreman{})
	r.base = again.serveWeb(pki, 0)
	_, resp, err := r.dial(http.Header{"Cookie": {CookieName + "=" + cookie}})
	require.NoError(t, err, "the cookie of the foreman before")
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.Eventually(t, func() bool {
		ws := again.f.Workers()
		return len(ws) == 1 && ws[0].Node == "refnode:4242:1"
	}, 10*time.Second, time.Millisecond)

	_, ok = checkCookie([]byte("another secret"), cookie, time.Now())
	assert.False(t, ok, "another secret")
	_, ok = checkCookie([]byte(testSecret), cookie, time.Now().Add(cookieAge+time.Minute))
	assert.False(t, ok, "expired")
	b := []byte(cookie)
	b[len(b)-1] ^= 1
	_, ok = checkCookie([]byte(testSecret), string(b), time.Now())
	assert.False(t, ok, "altered")
	// One cookie has one spelling: the bits past the last byte (46
	// bytes: 4 of the last character's 6) must be zero, not whatever a
	// client put there.
	require.Equal(t, 1, (32+len(name))%3)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, cookie[len(cookie)-1])
	require.Zero(t, last&15, "a cookie as made has zeros past its last byte")
	respelt := cookie[:len(cookie)-1] + string(alphabet[last|1])
	_, ok = checkCookie([]byte(testSecret), respelt, time.Now())
	assert.False(t, ok, "the same bytes spelt otherwise")
	long := makeCookie([]byte(testSecret), strings.Repeat("n", 500), time.Now().Add(time.Hour))
	assert.LessOrEqual(t, len(long), maxCookieLen)
	name, ok = checkCookie([]byte(testSecret), long, time.Now())
	assert.True(t, ok)
	assert.Equal(t, strings.Repeat("n", maxNameInCookie), name)
}

// Our worker and our foreman over TLS and a websocket: a job of several
// tasks on two workers, then a job cancelled while its tasks run.
func TestWebWorkerAndForeman(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{})
	base := s.serveWeb(pki, 100*time.Millisecond) // pings too, all along
	s.webWorker(base, pki, 2, testSecret)
	s.webWorker(base, pki, 2, testSecret)
	require.Eventually(t, func() bool { return len(s.f.Workers()) == 2 }, 20*time.Second, time.Millisecond)
	for _, w := range s.f.Workers() {
		assert.Regexp(t, `^node-a:\d+:\d+$`, w.Node)
	}

	script := s.script("echo task $1\nsleep 0.1\n")
	h, logDir := s.submit("many", script, 8)
	assert.Equal(t, laboro.StatusSucceeded, wait(t, h).Status)
	assert.Len(t, logFiles(t, logDir), 8)

	started := s.dir + "/started"
	require.NoError(t, os.Mkdir(started, 0o755))
	long := s.script("touch " + started + "/$1\nexec sleep 60\n")
	h, logDir = s.submit("long", long, 4)
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(started)
		return len(entries) == 4
	}, 20*time.Second, 5*time.Millisecond)
	info, _ := s.f.JobByRef(h.ID())
	require.NoError(t, s.f.Cancel(info.JobId))
	res := wait(t, h)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, ErrJobCancelled)
	require.Eventually(t, func() bool {
		for _, w := range s.f.Workers() {
			if w.Running > 0 || w.Free != 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond, "the workers killed the tasks and are free again")
	assert.Empty(t, logFiles(t, logDir), "cancelled tasks leave no log")
}

// scriptedWebForeman is a foreman played by the test as the reference's
// fuqsrv speaks (srv.Server.HandleHello, HandleNodePersistent): it checks
// the worker's login byte for byte and hands over each websocket.
type scriptedWebForeman struct {
	t      *testing.T
	srv    *httptest.Server
	logins atomic.Int32
	refuse atomic.Int32 // websockets to refuse with 403, as for a cookie it no longer knows
	conns  chan *websocket.Conn
	cookie atomic.Value
}

func startScriptedWebForeman(t *testing.T, pki fuqtest.PKI, procs int) *scriptedWebForeman {
	f := &scriptedWebForeman{t: t, conns: make(chan *websocket.Conn, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc(HelloPath, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		want := fmt.Sprintf(`{"auth":%q,"node":"node-a","pid":%d,"session":"","nproc":%d}`, testSecret, os.Getpid(), procs)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || string(body) != want {
			t.Errorf("login: %s %s %q", r.Method, r.Header.Get("Content-Type"), body)
			http.Error(w, "403 access forbidden", http.StatusForbidden)
			return
		}
		n := f.logins.Add(1)
		cookie := fmt.Sprintf("cookie%016d", n)
		f.cookie.Store(cookie)
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookie, Expires: time.Now().Add(time.Hour), Path: "/", HttpOnly: true})
		json.NewEncoder(w).Encode(struct{ Name, Session, Cookie string }{fmt.Sprintf("node-a:%d:%d", os.Getpid(), n), "session", cookie})
	})
	mux.HandleFunc(PersistentPath, func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err != nil || c.Value != f.cookie.Load() {
			http.Error(w, "cannot validate cookie", http.StatusForbidden)
			return
		}
		if f.refuse.Add(-1) >= 0 {
			http.Error(w, "cannot validate cookie", http.StatusForbidden)
			return
		}
		up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024}
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		f.conns <- conn
	})
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.TLS = pki.Server
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

// Our worker against a foreman that speaks as the reference's: the login
// and HELLO byte for byte, the reference's numbering (its JOB after the
// HELLO is numbered 3), its pings answered, a cookie it refuses answered by
// a new login, and a STOP(immediate) numbered below what came before
// honoured (the reference honours it whatever its number).
func TestWebWorkerAgainstReferenceForeman(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	f := startScriptedWebForeman(t, pki, 2)
	f.refuse.Store(1)
	dir := t.TempDir()
	w := &Worker{
		Web:   &WebDialer{URL: f.srv.URL, TLS: pki.Client, Auth: []byte(testSecret), Node: "node-a"},
		Procs: 2, SpoolDir: t.TempDir(), Reconnect: 50 * time.Millisecond, Timeout: 5 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	var conn *websocket.Conn
	select {
	case conn = <-f.conns:
	case err := <-ran:
		t.Fatalf("the worker stopped: %v", err)
	}
	defer conn.Close()
	assert.EqualValues(t, 2, f.logins.Load(), "the refused cookie brought a new login")
	pongs := make(chan string, 1)
	conn.SetPongHandler(func(data string) error { pongs <- data; return nil })
	read := func() []byte {
		t.Helper()
		typ, b, err := conn.ReadMessage()
		require.NoError(t, err)
		require.Equal(t, websocket.BinaryMessage, typ)
		return b
	}
	write := func(m Message) {
		t.Helper()
		b, err := m.AppendBinary(nil)
		require.NoError(t, err)
		require.NoError(t, conn.WriteMessage(websocket.BinaryMessage, b))
	}

	// HELLO{NumProcs: 2, Running: []} at seq 0.
	assert.Equal(t, unhex(t, "47c00200000000000000000014000000 82a84e756d50726f637302a752756e6e696e6790"), read())
	write(Message{Header: Header{Type: TypeOK, Seq: 0, Arg0: PackOK(2, 0)}})
	require.NoError(t, conn.WriteControl(websocket.PingMessage, []byte("PING:f2w_node-a:1"), time.Now().Add(5*time.Second)))

	task := Task{Task: 1, JobDescription: JobDescription{JobId: 7, Name: "j", NumTasks: 1, WorkingDir: dir, LoggingDir: dir, Command: "/bin/true", Status: JobRunning}}
	write(Message{Header: Header{Type: TypeJob, Seq: 3}, Tasks: []Task{task}})
	m, err := ReadMessage(bytes.NewReader(read()), 0)
	require.NoError(t, err)
	assert.Equal(t, Header{Type: TypeOK, Seq: 3, Arg0: PackOK(1, 1)}, m.Header)
	assert.Equal(t, "PING:f2w_node-a:1", <-pongs, "the ping was answered before the OK")
	m, err = ReadMessage(bytes.NewReader(read()), 0)
	require.NoError(t, err)
	assert.Equal(t, TypeUpdate, m.Type)
	assert.Equal(t, uint32(4), m.Seq, "past the foreman's 3")
	assert.Equal(t, StatusUpdate{JobId: 7, Task: 1, Success: true, Status: "done"}, *m.Update)
	write(Message{Header: Header{Type: TypeOK, Seq: 4, Arg0: PackOK(2, 0)}})

	write(Message{Header: Header{Type: TypeStop, Seq: 1, Arg0: StopImmediate}})
	select {
	case err := <-ran:
		assert.ErrorIs(t, err, ErrStopped)
	case <-time.After(20 * time.Second):
		t.Fatal("STOP(immediate) did not stop the worker")
	}
}

// webPair returns the two ends of a websocket over loopback: ours as a
// webConn of the given timeout and ping interval, and the peer's.
func webPair(t *testing.T, timeout, ping time.Duration, peerWriteBuffer int) (*webConn, *websocket.Conn) {
	conns := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err == nil {
			conns <- c
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	u.Scheme = "ws"
	peer, _, err := (&websocket.Dialer{WriteBufferSize: peerWriteBuffer}).Dial(u.String(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { peer.Close() })
	ours := newWebConn(<-conns, timeout, ping, zap.NewNop())
	t.Cleanup(func() { ours.close() })
	return ours, peer
}

func encode(t *testing.T, m Message) []byte {
	b, err := m.AppendBinary(nil)
	require.NoError(t, err)
	return b
}

// What a websocket peer may send wrong, and its stalls: each is an error
// that ends the connection, in bounded time.
func TestWebConnErrors(t *testing.T) {
	okMsg := encode(t, Message{Header: Header{Type: TypeOK, Seq: 2, Arg0: 5}})
	update := encode(t, Message{Header: Header{Type: TypeUpdate, Seq: 2}, Update: &StatusUpdate{JobId: 1, Task: 1, Status: "done"}})
	var pe *ProtocolError
	cases := []struct {
		name string
		send func(*websocket.Conn) error
		want func(t *testing.T, err error)
	}{
		{"a text message", func(c *websocket.Conn) error { return c.WriteMessage(websocket.TextMessage, okMsg) },
			func(t *testing.T, err error) { assert.ErrorAs(t, err, &pe) }},
		{"a body over the limit", func(c *websocket.Conn) error {
			return c.WriteMessage(websocket.BinaryMessage, encode(t, Message{Header: Header{Type: TypeHello}, Hello: &Hello{Running: make([]Task, 20)}}))
		}, func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrBodyTooLarge) }},
		{"a websocket message over the limit", func(c *websocket.Conn) error {
			return c.WriteMessage(websocket.BinaryMessage, append(append([]byte{}, okMsg...), make([]byte, 200)...))
		}, func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrBodyTooLarge) }},
		{"bytes after the message", func(c *websocket.Conn) error {
			return c.WriteMessage(websocket.BinaryMessage, append(append([]byte{}, update...), 0))
		}, func(t *testing.T, err error) { assert.ErrorAs(t, err, &pe) }},
		{"a message cut short", func(c *websocket.Conn) error {
			return c.WriteMessage(websocket.BinaryMessage, update[:len(update)-1])
		}, func(t *testing.T, err error) { assert.ErrorAs(t, err, &pe) }},
		{"a header cut short", func(c *websocket.Conn) error { return c.WriteMessage(websocket.BinaryMessage, okMsg[:10]) },
			func(t *testing.T, err error) { assert.ErrorAs(t, err, &pe) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ours, peer := webPair(t, 5*time.Second, time.Hour, 0)
			require.NoError(t, c.send(peer))
			_, err := ours.readMessage(64)
			require.Error(t, err)
			c.want(t, err)
		})
	}

	t.Run("a peer that answers no ping", func(t *testing.T) {
		// The peer never reads, so it never answers.
		ours, _ := webPair(t, 100*time.Millisecond, 50*time.Millisecond, 0)
		start := time.Now()
		_, err := ours.readMessage(0)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout())
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("a peer that stalls inside a message", func(t *testing.T) {
		// Pings are far apart: only the message's own deadline ends it.
		ours, peer := webPair(t, 100*time.Millisecond, time.Hour, 64)
		w, err := peer.NextWriter(websocket.BinaryMessage)
		require.NoError(t, err)
		long := encode(t, Message{Header: Header{Type: TypeUpdate, Seq: 2}, Update: &StatusUpdate{Status: strings.Repeat("x", 500)}})
		_, err = w.Write(long) // longer than the buffer: its first frames go out
		require.NoError(t, err)
		start := time.Now()
		_, err = ours.readMessage(0)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout())
		assert.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("a quiet peer that answers pings stays", func(t *testing.T) {
		ours, peer := webPair(t, 100*time.Millisecond, 20*time.Millisecond, 0)
		var pings atomic.Int32
		peer.SetPingHandler(func(data string) error {
			pings.Add(1)
			return peer.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		})
		peerDone := make(chan struct{})
		go func() { // reading answers the pings
			defer close(peerDone)
			for {
				if _, _, err := peer.NextReader(); err != nil {
					return
				}
			}
		}()
		got := make(chan error, 1)
		go func() {
			m, err := ours.readMessage(0)
			if err == nil && m.Header != (Header{Type: TypeOK, Seq: 2, Arg0: 5}) {
				err = fmt.Errorf("read %+v", m.Header)
			}
			got <- err
		}()
		// Four times the time a silent peer is given.
		require.Eventually(t, func() bool { return pings.Load() >= 24 }, 20*time.Second, time.Millisecond)
		require.NoError(t, peer.WriteMessage(websocket.BinaryMessage, okMsg))
		require.NoError(t, <-got)
		ours.close()
		<-peerDone
	})
}

// Over TCP, a peer that stalls inside a message fails the read after the
// timeout; a quiet connection does not.
func TestStreamConnDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer peer.Close()
	conn, err := ln.Accept()
	require.NoError(t, err)
	ours := newStreamConn(conn, 100*time.Millisecond)
	defer ours.close()

	okMsg := encode(t, Message{Header: Header{Type: TypeOK, Seq: 2, Arg0: 5}})
	got := make(chan error, 1)
	go func() {
		_, err := ours.readMessage(0)
		got <- err
	}()
	quiet := time.NewTimer(300 * time.Millisecond) // three timeouts of silence
	select {
	case err := <-got:
		t.Fatalf("a quiet connection failed: %v", err)
	case <-quiet.C:
	}
	_, err = peer.Write(okMsg)
	require.NoError(t, err)
	require.NoError(t, <-got)

	_, err = peer.Write(okMsg[:5])
	require.NoError(t, err)
	_, err = ours.readMessage(0)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.False(t, errors.Is(err, io.EOF))
}

// The web transport accepts at most MaxConns connections at once, before
// any login: one more is answered only once another closes, so that peers
// that never log in cannot hold the foreman's descriptors.
func TestWebBoundsConnections(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{MaxConns: 2})
	base := s.serveWeb(pki, 0)
	addr := strings.TrimPrefix(base, "https://")
	var held []*tls.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 2 {
		c, err := tls.Dial("tcp", addr, pki.Client)
		require.NoError(t, err, "a handshake within MaxConns")
		held = append(held, c)
	}
	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	cfg := pki.Client.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	extra := tls.Client(raw, cfg)
	defer extra.Close()
	shaken := make(chan error, 1)
	go func() { shaken <- extra.Handshake() }()
	select {
	case err := <-shaken:
		t.Fatalf("a connection beyond MaxConns was served (handshake: %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	held[0].Close()
	held = held[1:]
	select {
	case err := <-shaken:
		require.NoError(t, err, "the handshake once a place was free")
	case <-time.After(time.Minute):
		t.Fatal("no handshake once a place was free")
	}
}

// A websocket over the foreman's MaxConns, counted with the TCP workers',
// is refused, and the log line gives the limit in words.
func TestWebRefusalNamesTheLimit(t *testing.T) {
	pki := fuqtest.NewPKI(t)
	s := startSystem(t, &Foreman{MaxConns: 2, Timeout: time.Minute})
	base := s.serveWeb(pki, 0)
	for range 2 { // the TCP workers' connections take every place
		c, err := net.Dial("tcp", s.addr)
		require.NoError(t, err)
		defer c.Close()
	}
	require.Eventually(t, func() bool { return s.f.conns.Load() == 2 }, 10*time.Second, time.Millisecond)
	r := newRefWorker(t, base, pki)
	resp, _ := r.login(testSecret)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, resp, err := r.dial(nil)
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	refused := s.logs.FilterMessageSnippet("websocket refused").All()
	require.Len(t, refused, 1)
	assertSaysLimit(t, refused[0], 2)
}
