package workerserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The reference worker, worker-server 0.9.2 (Node), as the master sees
// it: refWorker sends its requests byte for byte, over real HTTP. The
// bodies are those of its `request.post({form})`: the fields in the
// reference's order (status, data, then serverId and serverPassword; a
// ping has only the last two), each escaped as qs escapes (everything but
// A-Z a-z 0-9 - _ . ~), a data of undefined left out; its paths are the
// configured ones with ":serverId" and ":jobId" replaced, unescaped. Its
// job statuses that cannot be sent go to a file cache, <jobId>.json, one
// per job, the later overwriting the earlier; on connecting it sends
// Connecting (or Reconnecting), replays the cache, each file under the id
// `filename.slice(0, -5) * 1` (a JavaScript number), then says Online,
// with its startup data only the first time (later "{}").
type refWorker struct {
	t            *testing.T
	url          string // the master's base URL
	id, password string
	started      bool
	cache        map[string]string // file name stem → the reference's cached {status, data}
}

// refStartup is the data of the reference's first Online, as it sent it
// with two worker modules: echo.js (`version: 2`) and sum.js (`version:
// '1.0.0'`), in an app whose package.json says version 1.0.0.
const refStartup = `{"startup":true,"version":"1.0.0","workers":[{"code":"echo","version":2},{"code":"sum","version":"1.0.0"}]}`

func newRefWorker(t *testing.T, url, id string) *refWorker {
	return &refWorker{t: t, url: url, id: id, password: testServers[id], cache: map[string]string{}}
}

// qsEscape escapes as qs (RFC 3986) does.
func qsEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// body is a form in the reference's order; a nil data is left out.
func (w *refWorker) body(status, data *string) string {
	var fields []string
	if status != nil {
		fields = append(fields, "status="+qsEscape(*status))
	}
	if data != nil {
		fields = append(fields, "data="+qsEscape(*data))
	}
	return strings.Join(append(fields, "serverId="+qsEscape(w.id), "serverPassword="+qsEscape(w.password)), "&")
}

// refError is a failure as the reference sees one: it cannot reach the
// master or read its answer (Errors.Connection), or the answer carries an
// error, formErrors or a redirect to /login (Errors.Api). Either way it
// caches the status and reconnects.
type refError struct {
	code int
	msg  string
}

func (e *refError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.msg) }

// send POSTs a body as the reference does and returns the answer's data.
func (w *refWorker) send(path, body string) (json.RawMessage, error) {
	req, err := http.NewRequest(http.MethodPost, w.url+path, strings.NewReader(body))
	require.NoError(w.t, err)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, &refError{msg: err.Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(w.t, err)
	var result struct {
		Data       json.RawMessage `json:"data"`
		Error      json.RawMessage `json:"error"`
		FormErrors json.RawMessage `json:"formErrors"`
		Redirect   string          `json:"redirect"`
	}
	switch {
	case json.Unmarshal(raw, &result) != nil:
		return nil, &refError{resp.StatusCode, "bad response: " + string(raw)}
	case result.Redirect == "/login", len(result.Error) > 0, len(result.FormErrors) > 0:
		return nil, &refError{resp.StatusCode, string(raw)}
	}
	return result.Data, nil
}

func str(s string) *string { return &s }

func (w *refWorker) serverStatus(status string, data *string) error {
	_, err := w.send("/api/servers/status/"+w.id, w.body(&status, data))
	return err
}

// jobStatus sends a job's status once; jobID is `${jobId}`.
func (w *refWorker) jobStatus(jobID, status, data string) error {
	_, err := w.send("/api/jobs/status/"+jobID, w.body(&status, &data))
	return err
}

// record is the reference's recordJobStatus: send, or else cache.
func (w *refWorker) record(jobID, status, data string) error {
	err := w.jobStatus(jobID, status, data)
	if err != nil {
		w.cache[jobID] = fmt.Sprintf(`{"status":%q,"data":%s}`, status, data)
	}
	return err
}

// connect is the reference's connectDo: Connecting or Reconnecting, the
// cache replayed, then Online.
func (w *refWorker) connect() error {
	status := ServerConnecting
	if w.started {
		status = ServerReconnecting
	}
	if err := w.serverStatus(status, nil); err != nil {
		return err
	}
	stems := make([]string, 0, len(w.cache))
	for stem := range w.cache {
		stems = append(stems, stem)
	}
	sort.Strings(stems)
	for _, stem := range stems {
		var c struct {
			Status string
			Data   json.RawMessage
		}
		require.NoError(w.t, json.Unmarshal([]byte(w.cache[stem]), &c))
		if err := w.jobStatus(jsNumber(stem), c.Status, string(c.Data)); err != nil {
			return fmt.Errorf("replaying %s.json: %w", stem, err)
		}
		delete(w.cache, stem)
	}
	data := "{}"
	if !w.started {
		data = refStartup
	}
	if err := w.serverStatus(ServerOnline, &data); err != nil {
		return err
	}
	w.started = true
	return nil
}

// refJob is a job as the reference reads it from a ping's answer.
type refJob struct {
	id     string // `${jobId}`
	worker string
}

// ping asks for a job; it returns the job, if any, and cancelJobs as sent.
func (w *refWorker) ping() (*refJob, []json.RawMessage) {
	w.t.Helper()
	data, err := w.send("/api/servers/ping/"+w.id, w.body(nil, nil))
	require.NoError(w.t, err)
	var result struct {
		Job        map[string]json.RawMessage `json:"job"`
		CancelJobs []json.RawMessage          `json:"cancelJobs"`
	}
	require.NoError(w.t, json.Unmarshal(data, &result))
	if result.Job == nil {
		return nil, result.CancelJobs
	}
	job := &refJob{id: jsString(w.t, result.Job["jobId"])}
	require.NoError(w.t, json.Unmarshal(result.Job["worker"], &job.worker))
	return job, result.CancelJobs
}

// jsString is `${v}` of a JSON string or number.
func jsString(t *testing.T, v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var f float64
	require.NoError(t, json.Unmarshal(v, &f), "jobId %s", v)
	return jsFormat(f)
}

var jsDecimal = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`)

// jsNumber is `${s * 1}`: s as a JavaScript number, written back.
func jsNumber(s string) string {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "0"
	case s == "Infinity" || s == "+Infinity":
		return "Infinity"
	case s == "-Infinity":
		return "-Infinity"
	case jsDecimal.MatchString(s):
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !math.IsInf(f, 0) {
			return "NaN"
		}
		return jsFormat(f)
	case len(s) > 2 && s[0] == '0' && strings.ContainsRune("xXoObB", rune(s[1])):
		n, err := strconv.ParseUint(s[2:], map[byte]int{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[1]], 64)
		if err != nil {
			return "NaN"
		}
		return jsFormat(float64(n))
	}
	return "NaN"
}

// jsFormat is JavaScript's String(f).
func jsFormat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0"
	case math.Abs(f) < 1e21 && math.Abs(f) >= 1e-6:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // 1e+21, 1e-07
	mant, exp, _ := strings.Cut(s, "e")
	sign, digits := exp[:1], strings.TrimLeft(exp[1:], "0")
	return mant + "e" + sign + digits
}

func TestJSNumber(t *testing.T) {
	for in, want := range map[string]string{
		"7": "7", "007": "7", "1e3": "1000", "0x10": "16", " 12\n": "12", "": "0", "-5": "-5", "1.50": "1.5",
		"9007199254740993": "9007199254740992", "api-71f335a4d67cb772": "NaN", "job-1": "NaN", "a b": "NaN",
		"123456789012345678901234": "1.2345678901234569e+23", "0.0000001": "1e-7",
	} {
		require.Equal(t, want, jsNumber(in), in)
	}
}

// apiSubmit submits a job through the user API and returns its id.
func (f *fixture) apiSubmit(body string) string {
	f.t.Helper()
	resp, err := http.Post(f.srv.URL+"/api/jobs", "application/json", strings.NewReader(body))
	require.NoError(f.t, err)
	code, a := readAnswer(f.t, resp)
	require.Equal(f.t, http.StatusOK, code, "%+v", a)
	var sub struct{ ID string }
	require.NoError(f.t, json.Unmarshal(a.Data, &sub))
	return sub.ID
}

// served is an Executor that a fixture's Submit submits to, and the
// handles of the jobs submitted.
type served struct {
	ex      *laboro.Executor
	mu      sync.Mutex
	handles map[string]*laboro.Handle
}

func (sv *served) submit(j laboro.Job) error {
	h, err := sv.ex.Submit(context.Background(), j)
	if err == nil {
		sv.mu.Lock()
		sv.handles[j.ID] = h
		sv.mu.Unlock()
	}
	return err
}

func (sv *served) handle(id string) *laboro.Handle {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.handles[id]
}

// serve gives the fixture an Executor that Submit submits to, and submits
// the table's unfinished jobs to it, as a master's main does.
func (f *fixture) serve() *served {
	f.t.Helper()
	sv := &served{ex: f.executor(), handles: map[string]*laboro.Handle{}}
	f.m.Submit = sv.submit
	for _, rec := range f.m.Unfinished() {
		require.NoError(f.t, sv.submit(NewJob(rec.ID, rec.Worker, rec.Params)))
	}
	return sv
}

// waitInLine waits until a job's Run has put it in line (or held it for
// a server), after which a ping may get it.
func (f *fixture) waitInLine(id string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		s := f.m.current()
		if s == nil {
			return false
		}
		_, ok := s.d.Lookup(id)
		return ok
	}, 10*time.Second, time.Millisecond, "job %q never in line", id)
}

// apiJob returns a job as the user API shows it, every member as sent.
func (f *fixture) apiJob(id string) map[string]json.RawMessage {
	f.t.Helper()
	resp, err := http.Get(f.srv.URL + "/api/jobs/" + id)
	require.NoError(f.t, err)
	code, a := readAnswer(f.t, resp)
	require.Equal(f.t, http.StatusOK, code, "%+v", a)
	var rec map[string]json.RawMessage
	require.NoError(f.t, json.Unmarshal(a.Data, &rec))
	return rec
}

// A numeric worker version (a module's `version: 2`) is accepted: the
// reference's Online is answered with success, and its codes are kept.
func TestReferenceNumericVersion(t *testing.T) {
	f := newFixture(t)
	w := newRefWorker(t, f.srv.URL, "s1")
	require.NoError(t, w.connect())
	rec, ok := f.m.Server("s1")
	require.True(t, ok)
	require.Equal(t, ServerOnline, rec.Status)
	require.NotNil(t, rec.Startup)
	got, err := json.Marshal(rec.Startup)
	require.NoError(t, err)
	require.JSONEq(t, `{"startup":true,"version":"1.0.0","workers":[{"code":"echo","version":"2"},{"code":"sum","version":"1.0.0"}]}`, string(got))

	// Whatever a package.json or a module says; the version is for show.
	for _, v := range []string{`1.5`, `null`, `true`, `{"major":1}`} {
		data := `{"startup":true,"version":` + v + `,"workers":[{"code":"sum","version":` + v + `}]}`
		require.NoError(t, w.serverStatus(ServerConnecting, nil), v)
		require.NoError(t, w.serverStatus(ServerOnline, &data), v)
	}
}

// A reconnection's Online ("{}": no startup, no workers) keeps the codes
// the server offered at its startup; a job for another code is never
// handed to it (the reference would crash on it).
func TestReferenceReconnectKeepsCodes(t *testing.T) {
	f := newFixture(t)
	ex := f.executor()
	w := newRefWorker(t, f.srv.URL, "s1")
	require.NoError(t, w.connect())
	require.NoError(t, w.connect()) // a reconnection: Reconnecting, Online "{}"
	rec, _ := f.m.Server("s1")
	require.NotNil(t, rec.Startup)
	require.Len(t, rec.Startup.Workers, 2, "the codes of the startup are kept")

	other, err := ex.Submit(context.Background(), NewJob("1", "resize", nil))
	require.NoError(t, err)
	f.waitInLine("1")
	sum, err := ex.Submit(context.Background(), NewJob("2", "sum", nil))
	require.NoError(t, err)
	f.waitInLine("2")
	job, _ := w.ping()
	require.NotNil(t, job)
	require.Equal(t, refJob{id: "2", worker: "sum"}, *job, "not the job for a code it never offered")
	job, _ = w.ping()
	require.Nil(t, job)
	require.NoError(t, w.record("2", JobDone, `{"sum":0}`))
	require.Equal(t, laboro.StatusSucceeded, wait(t, sum).Status)

	// A server whose startup lists no code gets no job at all.
	empty := `{"startup":true,"version":"1.0.0","workers":[]}`
	s2 := newRefWorker(t, f.srv.URL, "s2")
	require.NoError(t, s2.serverStatus(ServerConnecting, nil))
	require.NoError(t, s2.serverStatus(ServerOnline, &empty))
	job, _ = s2.ping()
	require.Nil(t, job)
	require.NoError(t, f.m.Cancel("1"))
	require.Equal(t, laboro.StatusKilled, wait(t, other).Status)
}

// A job whose id the master picks survives the reference's file cache: the
// reference reads the id back from the file name as a number, so the id
// is a decimal number, and the master picks a new one after a restart.
func TestReferenceCachesMasterChosenID(t *testing.T) {
	f := newFixture(t)
	f.serve()
	id := f.apiSubmit(`{"worker":"sum","params":{"a":1,"b":2}}`)
	f.waitInLine(id)
	w := newRefWorker(t, f.srv.URL, "s1")
	require.NoError(t, w.connect())
	job, _ := w.ping()
	require.NotNil(t, job)
	require.Equal(t, refJob{id: id, worker: "sum"}, *job)
	require.NoError(t, w.record(job.id, JobProcessing, `{"progress":{}}`))

	f.close() // the master goes away; the job's end waits in the cache
	require.Error(t, w.record(job.id, JobDone, `{"sum":3}`))
	require.Contains(t, w.cache, id)

	g := openFixture(t, f.file)
	g.serve()
	w.url = g.srv.URL
	require.NoError(t, w.connect(), "the cache replayed as the reference does")
	g.waitStatus(id, JobDone)
	require.JSONEq(t, `{"sum":3}`, string(g.record(id).Data))
	require.Empty(t, w.cache)

	next := g.apiSubmit(`{"worker":"sum"}`)
	require.NotEqual(t, id, next, "ids are not picked again after a restart")
	for _, id := range []string{id, next} {
		require.Equal(t, id, jsNumber(id), "an id the reference reads back as itself")
	}
}

// NewID picks numbers that no job has, never twice, across restarts; a
// job id that the reference would not read back is logged, once.
func TestNewID(t *testing.T) {
	for id, want := range map[string]bool{
		"1": true, "0": true, "9007199254740991": true, "9007199254740992": false, "007": false, "-1": false,
		"1e3": false, "": false, "api-1f": false, "job_1": false, " 1": false, "1.0": false, "99999999999999999": false,
	} {
		require.Equal(t, want, NumericID(id), id)
		if want {
			require.Equal(t, id, jsNumber(id))
		}
	}

	core, logs := observer.New(zap.WarnLevel)
	file := filepath.Join(t.TempDir(), "master.db")
	f := openFixture(t, file, func(m *Master) { m.Logger = zap.New(core) })
	sv := f.serve()
	require.NoError(t, sv.submit(NewJob("2", "w", nil)))
	f.waitStatus("2", JobQueued)
	var ids []string
	for range 2 {
		id, err := f.m.NewID()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.Equal(t, []string{"1", "3"}, ids, "2 is taken")
	require.Zero(t, logs.FilterMessageSnippet("not a decimal number").Len())
	for _, id := range []string{"job-a", "job-b"} {
		require.NoError(t, sv.submit(NewJob(id, "w", nil)))
		f.waitStatus(id, JobQueued)
	}
	require.Equal(t, 1, logs.FilterMessageSnippet("not a decimal number").Len(), "once: %v", logs.All())
	require.Equal(t, 1, logs.FilterMessageSnippet("no server offers").Len(), "once per code: %v", logs.All())
	require.NoError(t, f.m.Cancel("2"))
	require.Equal(t, laboro.StatusKilled, wait(t, sv.handle("2")).Status)

	f.close()
	_, err := f.m.NewID()
	require.ErrorIs(t, err, ErrMasterClosed)
	g := openFixture(t, file)
	id, err := g.m.NewID()
	require.NoError(t, err)
	require.Equal(t, "4", id)
}

// A job cancelled while its worker is down ends Cancelled and never runs
// again: when the worker's new process comes Online, when it shows no life
// for a lease, or when the master restarts meanwhile.
func TestReferenceCancelWhileWorkerDown(t *testing.T) {
	const lease = 400 * time.Millisecond
	for _, tc := range []struct {
		name string
		// down is what happens after the cancel, while s1 is down.
		down func(t *testing.T, f *fixture) (*fixture, *served)
		// back is s1 or another server showing up.
		back func(t *testing.T, f *fixture) *refWorker
	}{
		{"restart", func(t *testing.T, f *fixture) (*fixture, *served) { return f, nil }, func(t *testing.T, f *fixture) *refWorker {
			w := newRefWorker(t, f.srv.URL, "s1") // a new process
			require.NoError(t, w.connect())
			return w
		}},
		{"lease", func(t *testing.T, f *fixture) (*fixture, *served) { return f, nil }, func(t *testing.T, f *fixture) *refWorker {
			w := newRefWorker(t, f.srv.URL, "s2")
			require.NoError(t, w.connect())
			return w
		}},
		{"master restart", func(t *testing.T, f *fixture) (*fixture, *served) {
			f.close()
			g := openFixture(t, f.file, func(m *Master) { m.Lease = lease })
			return g, g.serve()
		}, func(t *testing.T, f *fixture) *refWorker {
			w := newRefWorker(t, f.srv.URL, "s1")
			require.NoError(t, w.connect())
			return w
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := openFixture(t, filepath.Join(t.TempDir(), "master.db"), func(m *Master) { m.Lease = lease })
			sv := f.serve()
			id := f.apiSubmit(`{"id":"7","worker":"echo","params":{"ms":60000}}`)
			f.waitInLine(id)
			w := newRefWorker(t, f.srv.URL, "s1")
			require.NoError(t, w.connect())
			job, _ := w.ping()
			require.NotNil(t, job)
			require.NoError(t, w.record(id, JobProcessing, `{"progress":{}}`))
			// s1 is killed (no Stopping, no Offline); the user cancels.
			require.NoError(t, f.m.Cancel(id))
			if g, gsv := tc.down(t, f); gsv != nil {
				f, sv = g, gsv
			}
			w = tc.back(t, f)
			// Whoever pings meanwhile gets nothing.
			handed := false
			require.Eventually(t, func() bool {
				if job, _ := w.ping(); job != nil {
					handed = true
					return true
				}
				return f.record(id).Status == JobCancelled
			}, 10*time.Second, 5*time.Millisecond)
			require.False(t, handed, "a cancelled job is handed out again: %v", statuses(f.record(id).History))
			rec := f.record(id)
			require.Equal(t, JobCancelled, rec.Status)
			require.Equal(t, []string{JobQueued, JobProcessing, JobProcessing, JobCancelled}, statuses(rec.History))
			require.True(t, rec.Cancelling)
			job, _ = w.ping()
			require.Nil(t, job)
			res := wait(t, sv.handle(id))
			require.Equal(t, laboro.StatusKilled, res.Status)
			var je *JobError
			require.ErrorAs(t, res.Err, &je)
			require.Equal(t, JobCancelled, je.Status)
			require.Empty(t, f.m.Unfinished())
		})
	}
}

// A job for a code that no server offers says so in the user API.
func TestReferenceUnofferedCode(t *testing.T) {
	f := newFixture(t)
	f.serve()
	id := f.apiSubmit(`{"worker":"resize"}`)
	f.waitStatus(id, JobQueued)
	unoffered := func() bool { return bytes.Equal(f.apiJob(id)["unoffered"], []byte("true")) }
	require.True(t, unoffered(), "no server at all")
	w := newRefWorker(t, f.srv.URL, "s1")
	require.NoError(t, w.connect())
	require.True(t, unoffered(), "s1 offers echo and sum")
	require.NoError(t, w.connect())
	require.True(t, unoffered(), "nor after its reconnection")

	resize := `{"startup":true,"version":"1.0.0","workers":[{"code":"resize","version":1}]}`
	s2 := newRefWorker(t, f.srv.URL, "s2")
	require.NoError(t, s2.serverStatus(ServerConnecting, nil))
	require.NoError(t, s2.serverStatus(ServerOnline, &resize))
	require.False(t, unoffered(), "s2 offers it")
	require.NoError(t, s2.serverStatus(ServerStopping, str(`{"reason":"Process stopped externally"}`)))
	require.NoError(t, s2.serverStatus(ServerOffline, nil))
	require.True(t, unoffered(), "s2 is gone")
	var list []map[string]json.RawMessage
	resp, err := http.Get(f.srv.URL + "/api/jobs")
	require.NoError(t, err)
	_, a := readAnswer(t, resp)
	require.NoError(t, json.Unmarshal(a.Data, &list))
	require.Len(t, list, 1)
	require.Equal(t, "true", string(list[0]["unoffered"]))
}

// A worker of this package takes job ids as numbers too, as the reference
// does from its master.
func TestPingDataNumericIDs(t *testing.T) {
	var pd PingData
	require.NoError(t, json.Unmarshal([]byte(`{"job":{"jobId":7,"worker":"sum","a":1},"cancelJobs":[3,"4"]}`), &pd))
	require.Equal(t, PingData{Job: &JobOrder{JobID: "7", Worker: "sum", Params: params("a", "1")}, CancelJobs: []string{"3", "4"}}, pd)
	require.NoError(t, json.Unmarshal([]byte(`{}`), &pd))
	require.Equal(t, PingData{}, pd)
	for _, bad := range []string{`{"job":{"worker":"sum"}}`, `{"job":{"jobId":null,"worker":"sum"}}`, `{"cancelJobs":[{}]}`, `{"job":{"jobId":[1],"worker":"s"}}`} {
		require.Error(t, json.Unmarshal([]byte(bad), &pd), bad)
	}
}

// The decoders of what workers and masters send: decode, encode, decode
// gives what the first decode gave, encoded the same.
func FuzzWire(f *testing.F) {
	for _, seed := range []string{
		refStartup, `{}`, `{"startup":true,"version":null,"workers":[]}`, `{"version":{"major":1},"workers":null}`,
		`{"job":{"jobId":7,"worker":"sum","a":1},"cancelJobs":[3,"4"]}`, `{"job":{"jobId":"8","worker":"echo","ms":4000}}`,
		`{"cancelJobs":["8"]}`, `{"job":{"jobId":1e3,"worker":"w","x":[1, 2]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[Startup](t, b)
		roundTrip[PingData](t, b)
	})
}

func roundTrip[T any](t *testing.T, b []byte) {
	var v1, v2 T
	if json.Unmarshal(b, &v1) != nil {
		return
	}
	e1, err := json.Marshal(v1)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(e1, &v2), "%s", e1)
	e2, err := json.Marshal(v2)
	require.NoError(t, err)
	require.Equal(t, string(e1), string(e2))
}
