// Package console serves a live web console for an Executor: the jobs
// queued, running and finished, counts by status with a rate and an ETA,
// each job's page with its standard error tail and a live tail of its
// output while it runs, and the actions an operator needs: cancel a job,
// stop a queued one, change the concurrency level while jobs run.
//
// Three lines add it to a program that embeds laboro:
//
//	ex, err := laboro.New(laboro.WithHistory(console.History))
//	con := console.New(console.Options{Token: token})
//	con.Attach(ex); http.Handle("/", con)
//
// The console reads the Executor (its Stats, Running, Queued and, for the
// finished jobs, Recent: what WithHistory keeps) when a browser asks and
// while one follows the live updates, never in between: it costs the jobs
// nothing when no one looks, and a look costs a few readings under the
// Executor's lock, however fast the jobs end.
//
// The page is rendered on the server (html/template) and kept up to date
// by a small script of its own over server-sent events; it works without
// the script too (forms and reloads). With a Token, every request must
// carry it: the console's URL with ?token=… sets a cookie (HttpOnly,
// SameSite=Strict; a value derived from the token, not the token) and the
// page then works with that; a program can send "Authorization: Bearer …". Every action is a POST refused unless it
// comes from the console's own page (same origin).
//
// A slow browser never slows the jobs: each browser gets a fresh snapshot
// when it can take one; updates it was too slow for are not queued but
// folded into the next.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/laboro-go/laboro"
)

//go:embed static templates
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"since": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "" // not known (a job that never started), as the page's script shows it
		}
		return t.Format("15:04:05")
	},
}).ParseFS(files, "templates/*.html"))

// Options set up a Console.
type Options struct {
	// Token, when set, is required of every request (see the package
	// documentation). Leave it empty only behind another authentication.
	Token string
	// MaxClients bounds the browsers following the live updates at once
	// (64 if 0); more are answered 503.
	MaxClients int
	// Metrics, when set, is served at /metrics behind the same token (a
	// Prometheus scraper sends it as a bearer token), for example
	// promhttp.HandlerFor a registry that holds a metrics.Collector.
	Metrics http.Handler

	// For an Executor whose jobs run on other machines (a fleet, such as
	// the jetstream package's Service):
	//
	// Tail, when set, reads a running job's output from the machine that
	// runs it, for the live tail of a job that is no process of this one:
	// the bytes written from offset on (at most a chunk, none when nothing
	// more yet), or an error when no machine runs the job now.
	Tail func(ctx context.Context, id string, offset int64) ([]byte, error)
	// Workers, when set, lists the machines that run the jobs: the page
	// shows them, their slots and what each runs.
	Workers func() []Worker
	// Batches, when set, lists the last batches of jobs, newest first: the
	// page shows them, finished ones included.
	Batches func() []Batch
	// Cancel, when set, is what the page's cancel and stop of a job do,
	// instead of the Executor's Cancel and Stop: a fleet that keeps its
	// jobs beyond the Executor (in streams, across restarts) records the
	// cancel there, so that a job stopped while it waited does not run
	// again. Its error is shown; laboro.ErrNotFound for a job it does not
	// know.
	Cancel func(ctx context.Context, id string) error
}

// Batch is a batch of jobs submitted together, as Options.Batches lists it.
type Batch struct {
	Name      string    `json:"name"`
	Jobs      int       `json:"jobs"`
	Succeeded int       `json:"succeeded"`
	Failed    int       `json:"failed"`    // ended otherwise than succeeded or cancelled
	Cancelled int       `json:"cancelled"` // cancelled: not counted in Failed
	Submitted time.Time `json:"submitted"`
	Ended     time.Time `json:"ended"` // zero while it runs
}

// Worker is a machine of a fleet, as Options.Workers lists it.
type Worker struct {
	Name    string   `json:"name"`
	Slots   int      `json:"slots"`
	Running []string `json:"running"` // the ids of the jobs it runs
}

// History is how many finished jobs an Executor shown by a console should
// keep (laboro.WithHistory): the page lists MaxListed of them, and a
// job's page is found among them.
const History = 200

// Console is an http.Handler for one Executor's console. Its methods are
// safe for concurrent use.
type Console struct {
	opts    Options
	ex      atomic.Pointer[laboro.Executor]
	mux     *http.ServeMux
	clients atomic.Int32

	mu      sync.Mutex
	samples []sample // of the jobs ended, a second apart at least, over the last rateWindow
}

// rateWindow is how far back the rate of finished jobs looks.
const rateWindow = time.Minute

// sample is how many jobs had ended at a time.
type sample struct {
	at    time.Time
	ended int64
}

// Finished is a job that ended, as the console shows it.
type Finished struct {
	ID      string    `json:"id"`
	Command string    `json:"command"`
	Status  string    `json:"status"`
	Exit    int       `json:"exit"`
	Error   string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	Stderr  string    `json:"stderr,omitempty"`
	Output  string    `json:"-"` // the output file while the job's consumer keeps it
}

// New returns a Console; Attach the Executor it shows.
func New(opts Options) *Console {
	if opts.MaxClients <= 0 {
		opts.MaxClients = 64
	}
	c := &Console{opts: opts}
	mux := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.index)
	mux.HandleFunc("GET /api/state", c.stateJSON)
	mux.HandleFunc("GET /api/events", c.events)
	mux.HandleFunc("GET /jobs/{id}", c.job)
	mux.HandleFunc("GET /jobs/{id}/output", c.output)
	mux.HandleFunc("POST /jobs/{id}/cancel", c.act(func(ex *laboro.Executor, r *http.Request) error {
		return c.end(r, ex.Cancel)
	}))
	mux.HandleFunc("POST /jobs/{id}/stop", c.act(func(ex *laboro.Executor, r *http.Request) error {
		return c.end(r, ex.Stop)
	}))
	mux.HandleFunc("POST /concurrency", c.act(func(ex *laboro.Executor, r *http.Request) error {
		n, err := strconv.Atoi(r.FormValue("n"))
		if err != nil || n < 0 {
			return fmt.Errorf("%w: concurrency %q: must be a number of at least 0", errBadInput, r.FormValue("n"))
		}
		return ex.SetConcurrency(n)
	}))
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	c.mux = mux
	return c
}

// Attach makes the console show ex. Give ex laboro.WithHistory (History)
// for the console to list the jobs that ended.
func (c *Console) Attach(ex *laboro.Executor) { c.ex.Store(ex) }

// describe makes a finished job readable.
func describe(f *laboro.Finished) Finished {
	res := f.Result
	d := Finished{ID: res.ID, Command: command(f.Job), Status: res.Status.String(), Exit: res.ExitCode,
		Started: res.Started, Ended: res.Ended, Stderr: string(res.Stderr)}
	if res.Err != nil {
		d.Error = res.Err.Error()
	}
	if res.Output != nil {
		d.Output = res.Output.Path()
	}
	return d
}

// ServeHTTP serves the console, once the request proved it holds the token.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(w, r) {
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	c.mux.ServeHTTP(w, r)
}

const cookieName = "laboro_console"

// cookieLabel is what a session's cookie is the token's HMAC of.
const cookieLabel = "laboro console session"

// authorized checks the token: a Bearer header, the cookie, or ?token= on
// a GET, which sets the cookie and sends the browser to the same URL
// without it. The cookie holds not the token but a value derived from it
// (its HMAC of cookieLabel): a browser's cookie store, or a cookie that
// leaks, gives the console and nothing else the token may open (a
// program's other services, workers' credentials derived from it).
func (c *Console) authorized(w http.ResponseWriter, r *http.Request) bool {
	if c.opts.Token == "" {
		return true
	}
	// Sums of equal length are compared, so that the time tells nothing
	// of the token, its length included.
	want := sha256.Sum256([]byte(c.opts.Token))
	match := func(s string) bool {
		got := sha256.Sum256([]byte(s))
		return subtle.ConstantTimeCompare(got[:], want[:]) == 1
	}
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && auth[:7] == "Bearer " && match(auth[7:]) {
		return true
	}
	session := c.session()
	if ck, err := r.Cookie(cookieName); err == nil && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(session)) == 1 {
		return true
	}
	if tok := r.URL.Query().Get("token"); tok != "" && r.Method == http.MethodGet && match(tok) {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: session, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		u := *r.URL
		q := u.Query()
		q.Del("token")
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return false
	}
	http.Error(w, "the console needs its token: open the URL with ?token=… that the program printed", http.StatusUnauthorized)
	return false
}

// session is the cookie's value: the token's HMAC of cookieLabel, in
// unpadded base64url (43 characters).
func (c *Console) session() string {
	m := hmac.New(sha256.New, []byte(c.opts.Token))
	m.Write([]byte(cookieLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin refuses what another site's page could make a browser send.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

// errBadInput is a form value an action cannot take.
var errBadInput = errors.New("console")

// act runs an action from the console's page: a POST from its own origin,
// answered with a redirect back for a form, or 204 for the script.
func (c *Console) act(do func(*laboro.Executor, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			http.Error(w, "refused: not from the console's own page", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		ex := c.ex.Load()
		if ex == nil {
			http.Error(w, "no executor attached", http.StatusServiceUnavailable)
			return
		}
		if err := do(ex, r); err != nil {
			code := http.StatusConflict
			if errors.Is(err, laboro.ErrInvalidConfig) || errors.Is(err, errBadInput) {
				code = http.StatusBadRequest
			}
			http.Error(w, err.Error(), code)
			return
		}
		if r.Header.Get("X-Requested-With") == "console" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		back := r.Header.Get("Referer")
		if u, err := url.Parse(back); back == "" || err != nil || u.Host != r.Host {
			back = "/"
		}
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
}

// end cancels or stops the job the request names: through Options.Cancel
// when set, else with the Executor's.
func (c *Console) end(r *http.Request, executors func(id string) error) error {
	if c.opts.Cancel != nil {
		return c.opts.Cancel(r.Context(), r.PathValue("id"))
	}
	return executors(r.PathValue("id"))
}

// State is what the console shows, as /api/state gives it.
type State struct {
	Concurrency int            `json:"concurrency"`
	Parallelism int            `json:"parallelism"`
	PoolSize    int            `json:"pool_size"`
	BufferSize  int            `json:"buffer_size"`
	Running     []RunningJob   `json:"running"`
	Queued      []QueuedJob    `json:"queued"`       // the first MaxListed
	QueuedCount int            `json:"queued_count"` // all of them
	Finished    []Finished     `json:"finished"`     // the last MaxListed, newest first
	Counts      map[string]int `json:"counts"`       // finished jobs by status
	Rate        float64        `json:"rate"`         // jobs finished per second, over the last minute; 0 unknown
	ETA         float64        `json:"eta"`          // seconds until the queued and running jobs are done; -1 unknown
	Fleet       bool           `json:"fleet"`        // the jobs run on the Workers (Options.Workers)
	Workers     []Worker       `json:"workers"`
	Batches     []Batch        `json:"batches"`
}

// RunningJob is a job that runs, as the console shows it.
type RunningJob struct {
	ID      string    `json:"id"`
	Command string    `json:"command"`
	PID     int       `json:"pid,omitempty"`
	Started time.Time `json:"started"`
	Worker  string    `json:"worker,omitempty"` // where it runs, in a fleet
}

// QueuedJob is a job waiting in the buffer.
type QueuedJob struct {
	ID      string `json:"id"`
	Command string `json:"command"`
}

// MaxListed bounds the queued and finished jobs a snapshot lists.
const MaxListed = 100

func command(j laboro.Job) string {
	if j.Func == nil && j.Script != "" {
		return j.Script
	}
	return j.String()
}

// Snapshot returns what the console shows now.
func (c *Console) Snapshot() State {
	st := State{Counts: map[string]int{}, ETA: -1, Running: []RunningJob{}, Queued: []QueuedJob{}, Workers: []Worker{}}
	if c.opts.Batches != nil {
		st.Batches = c.opts.Batches()
	}
	if st.Batches == nil {
		st.Batches = []Batch{}
	}
	where := map[string]string{} // job id → worker
	if c.opts.Workers != nil {
		st.Fleet = true
		if ws := c.opts.Workers(); ws != nil {
			st.Workers = ws
		}
		for i, w := range st.Workers {
			if w.Running == nil {
				st.Workers[i].Running = []string{}
			}
			for _, id := range w.Running {
				where[id] = w.Name
			}
		}
	}
	st.Finished = []Finished{}
	ex := c.ex.Load()
	if ex == nil {
		return st
	}
	s := ex.Stats()
	st.Concurrency, st.Parallelism, st.PoolSize, st.BufferSize = s.Concurrency, s.Parallelism, s.PoolSize, s.BufferSize
	for _, r := range ex.Running() {
		st.Running = append(st.Running, RunningJob{ID: r.Job.ID, Command: command(r.Job), PID: r.PID, Started: r.Started,
			Worker: where[r.Job.ID]})
	}
	st.QueuedCount = s.Queued
	for _, j := range ex.Peek(MaxListed) {
		st.Queued = append(st.Queued, QueuedJob{ID: j.ID, Command: command(j)})
	}
	recent := ex.Recent(MaxListed)
	for i := range recent {
		st.Finished = append(st.Finished, describe(&recent[i]))
	}
	for status, n := range s.Ended {
		if n > 0 {
			st.Counts[laboro.Status(status).String()] = int(n)
		}
	}
	st.Rate = c.rate(time.Now(), s.Finished(), recent)
	if st.Rate > 0 {
		st.ETA = float64(st.QueuedCount+len(st.Running)) / st.Rate
	}
	return st
}

// rate returns the jobs finished per second over the last minute, from
// the samples of ended, the count of jobs ended at now, that the console
// takes as it is looked at, a second apart at least. Until they span a
// second, it is read from the times the recent jobs ended; 0 when
// unknown.
func (c *Console) rate(now time.Time, ended int64, recent []laboro.Finished) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	drop := 0
	for drop < len(c.samples) && now.Sub(c.samples[drop].at) > rateWindow {
		drop++
	}
	c.samples = c.samples[drop:]
	if n := len(c.samples); n == 0 || now.Sub(c.samples[n-1].at) >= time.Second {
		c.samples = append(c.samples, sample{at: now, ended: ended})
	}
	if first := c.samples[0]; now.Sub(first.at) >= time.Second {
		return float64(ended-first.ended) / now.Sub(first.at).Seconds()
	}
	jobs, since := 0, now
	for _, f := range recent {
		if e := f.Result.Ended; !e.IsZero() && now.Sub(e) <= rateWindow {
			jobs++
			if e.Before(since) {
				since = e
			}
		}
	}
	if jobs == 0 {
		return 0
	}
	return float64(jobs) / max(now.Sub(since).Seconds(), 1)
}

// worker returns the worker that runs job id, in a fleet, or "".
func (c *Console) worker(id string) string {
	if c.opts.Workers == nil {
		return ""
	}
	for _, w := range c.opts.Workers() {
		if slices.Contains(w.Running, id) {
			return w.Name
		}
	}
	return ""
}

func (c *Console) lookup(id string) (running *RunningJob, output string, fin *Finished) {
	if ex := c.ex.Load(); ex != nil {
		for _, r := range ex.Running() {
			if r.Job.ID == id {
				return &RunningJob{ID: id, Command: command(r.Job), PID: r.PID, Started: r.Started, Worker: c.worker(id)}, r.Output, nil
			}
		}
		// Not running: it ended already (after Running's look, it would
		// be among the recent ones), or it is unknown.
		if f, ok := ex.Ended(id); ok {
			d := describe(&f)
			return nil, d.Output, &d
		}
	}
	return nil, "", nil
}

func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "index.html", c.Snapshot()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (c *Console) stateJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(c.Snapshot())
}

func (c *Console) job(w http.ResponseWriter, r *http.Request) {
	running, output, fin := c.lookup(r.PathValue("id"))
	if running == nil && fin == nil {
		http.Error(w, "no such job among those running or remembered", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	data := struct {
		ID        string
		Running   *RunningJob
		Finished  *Finished
		HasOutput bool
	}{r.PathValue("id"), running, fin, output != ""}
	if err := pages.ExecuteTemplate(w, "job.html", data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// writeTimeout bounds each write to a browser: one that stops reading is
// cut off rather than held.
const writeTimeout = 10 * time.Second

// minInterval is the shortest time between two snapshots to one browser,
// and how often a browser's stream looks for changes.
const minInterval = 200 * time.Millisecond

// sse starts a server-sent event stream, within the bound of clients.
func (c *Console) sse(w http.ResponseWriter) (*http.ResponseController, func(), bool) {
	if int(c.clients.Add(1)) > c.opts.MaxClients {
		c.clients.Add(-1)
		http.Error(w, "too many consoles open", http.StatusServiceUnavailable)
		return nil, nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	rc := http.NewResponseController(w)
	// The headers go at once: the stream is open before its first event,
	// which may be long to come (a job that prints nothing yet).
	w.WriteHeader(http.StatusOK)
	rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if rc.Flush() != nil {
		c.clients.Add(-1)
		return nil, nil, false
	}
	return rc, func() { c.clients.Add(-1) }, true
}

// events streams a snapshot at once and after every change.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	rc, done, ok := c.sse(w)
	if !ok {
		return
	}
	defer done()
	tick := time.NewTicker(minInterval)
	defer tick.Stop()
	var seen uint64 // the Executor's Changes at the last snapshot sent
	var sent time.Time
	for first := true; ; first = false {
		if !first {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
		// Changes meanwhile are folded into one snapshot.
		var changes uint64
		if ex := c.ex.Load(); ex != nil {
			st := ex.Stats()
			changes = st.Changes
		}
		if since := time.Since(sent); !first && (since < steadyInterval || changes == seen && since < refresh) {
			continue
		}
		seen, sent = changes, time.Now()
		b, _ := json.Marshal(c.Snapshot())
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// A change is shown within minInterval after a quiet time, but snapshots
// to one browser are steadyInterval apart at least: while jobs end by the
// thousand, a faster list could not be read anyway, and each snapshot
// takes the Executor's lock and the processors from the jobs (side by side
// at a million trivial jobs a second, 200 ms apart cost 6% of the job
// rate, 500 ms under the noise). refresh is the longest time between two
// snapshots: the rate, and a fleet's workers, change without the
// Executor's state.
const (
	steadyInterval = 500 * time.Millisecond
	refresh        = 2 * time.Second
)

// outputChunk bounds what one event of the output stream carries.
const outputChunk = 16 << 10

// output streams a job's output as it is written: what the file holds,
// then what is added while the job runs, then an "end" event. Nothing is
// held whole: the file is read a chunk at a time.
func (c *Console) output(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	running, path, fin := c.lookup(id)
	if running == nil && fin == nil {
		http.Error(w, "no such job among those running or remembered", http.StatusNotFound)
		return
	}
	rc, done, ok := c.sse(w)
	if !ok {
		return
	}
	defer done()
	send := func(event, data string) bool {
		b, _ := json.Marshal(data)
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	buf := make([]byte, outputChunk)
	held := 0 // bytes of a character cut by the last read, at buf's start
	var sent int64
	for path == "" && running != nil { // started, its process not here or not yet reported
		if c.opts.Tail != nil {
			// It may run on another machine: read it from there, and
			// what it writes after its end from its output here.
			data, err := c.opts.Tail(r.Context(), id, sent+int64(held))
			if err == nil && len(data) > 0 {
				data = append(buf[:held:held], data...)
				held = incomplete(data)
				if !send("output", string(data[:len(data)-held])) {
					return
				}
				sent += int64(len(data) - held)
				copy(buf, data[len(data)-held:])
				continue
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(minInterval):
		}
		running, path, fin = c.lookup(id)
		if running == nil && fin == nil {
			send("end", "the job ended, and is no longer among those the Executor keeps")
			return
		}
	}
	f, err := os.Open(path)
	if err != nil {
		send("end", "the output is gone (its consumer closed it)")
		return
	}
	defer f.Close()
	if _, err := f.Seek(sent+int64(held), io.SeekStart); err != nil {
		send("end", err.Error())
		return
	}
	for {
		n, err := f.Read(buf[held:])
		if n > 0 {
			n += held
			// A character the read cut in two waits for its other bytes.
			held = incomplete(buf[:n])
			if !send("output", string(buf[:n-held])) {
				return
			}
			copy(buf, buf[n-held:n])
			continue
		}
		if err != nil && err != io.EOF {
			send("end", err.Error())
			return
		}
		// At the end of what is written: follow while the job runs.
		if still, _, _ := c.lookup(id); still == nil {
			if n, _ := f.Read(buf[held:]); n > 0 { // written just before it ended
				held += n
				continue
			}
			if held > 0 && !send("output", string(buf[:held])) {
				return
			}
			send("end", "")
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(minInterval):
		}
	}
}

// incomplete returns how many bytes at the end of b begin a UTF-8
// character that b does not hold whole.
func incomplete(b []byte) int {
	for i := 1; i <= min(utf8.UTFMax-1, len(b)); i++ {
		if c := b[len(b)-i]; utf8.RuneStart(c) {
			if c >= utf8.RuneSelf && !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}
