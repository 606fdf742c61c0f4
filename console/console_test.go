package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/console"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "t0ken"

// start serves a console of a new Executor; the client holds the token's
// cookie, as a browser that opened the URL with ?token= does.
func start(t *testing.T, opts ...laboro.Option) (*laboro.Executor, *httptest.Server, *http.Client) {
	return startWith(t, console.Options{Token: token}, append([]laboro.Option{laboro.WithOutputDir(t.TempDir())}, opts...)...)
}

// startWith is start with the console's options.
func startWith(t *testing.T, copts console.Options, opts ...laboro.Option) (*laboro.Executor, *httptest.Server, *http.Client) {
	con := console.New(copts)
	ex, err := laboro.New(append([]laboro.Option{laboro.WithHistory(console.History)}, opts...)...)
	require.NoError(t, err)
	con.Attach(ex)
	srv := httptest.NewServer(con)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ex.Close()
	})
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	res, err := client.Get(srv.URL + "/?token=" + copts.Token)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "/", res.Request.URL.Path, "sent on without the token in the URL")
	assert.Empty(t, res.Request.URL.RawQuery)
	return ex, srv, client
}

// seen checks that the console knows job id, which has finished: from the
// moment its Handle's Wait returns, the Executor keeps it among its recent
// jobs, where the console looks.
func seen(t *testing.T, c *http.Client, base, id string) {
	t.Helper()
	code, _ := get(t, c, base+"/jobs/"+id)
	require.Equal(t, http.StatusOK, code, "the console does not know %s, which finished", id)
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	res, err := c.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// Without the token, nothing: not the page, not the state, not an action.
func TestTokenRequired(t *testing.T) {
	ex, srv, _ := start(t)
	for _, path := range []string{"/", "/api/state", "/api/events", "/jobs/x", "/?token=wrong"} {
		code, _ := get(t, http.DefaultClient, srv.URL+path)
		assert.Equal(t, http.StatusUnauthorized, code, path)
	}
	res, err := http.PostForm(srv.URL+"/concurrency", url.Values{"n": {"7"}})
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.NotEqual(t, 7, ex.Concurrency())

	req, _ := http.NewRequest("GET", srv.URL+"/api/state", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "a program sends the token as a Bearer")
}

// The cookie that ?token= sets opens the console but is not the token,
// which may open more than the console: a cookie of the token itself, or
// of another token's session, opens nothing.
func TestCookieIsNotTheToken(t *testing.T) {
	_, srv, client := start(t)
	u, _ := url.Parse(srv.URL)
	cookies := client.Jar.Cookies(u)
	require.Len(t, cookies, 1)
	session := cookies[0].Value
	assert.NotContains(t, session, token)
	code, _ := get(t, client, srv.URL+"/api/state")
	assert.Equal(t, http.StatusOK, code, "the cookie opens the console")

	_, other, otherClient := startWith(t, console.Options{Token: "an0ther-t0ken"})
	o, _ := url.Parse(other.URL)
	assert.NotEqual(t, session, otherClient.Jar.Cookies(o)[0].Value, "each token its own session")
	for _, value := range []string{token, otherClient.Jar.Cookies(o)[0].Value, session + "x"} {
		req, _ := http.NewRequest("GET", srv.URL+"/api/state", nil)
		req.AddCookie(&http.Cookie{Name: "laboro_console", Value: value})
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, res.StatusCode, "cookie %q", value)
	}
}

// The page and the state show jobs finished, with why a failed one
// failed.
func TestStateShowsJobs(t *testing.T) {
	ex, srv, client := start(t, laboro.WithPoolSize(2))
	ctx := context.Background()
	for _, job := range []laboro.Job{{ID: "good", Command: "echo hi"}, {ID: "bad", Script: "echo no such thing >&2; exit 4"}} {
		h, err := ex.Submit(ctx, job)
		require.NoError(t, err)
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		defer res.Output.Close()
		seen(t, client, srv.URL, job.ID)
	}
	code, body := get(t, client, srv.URL+"/api/state")
	require.Equal(t, http.StatusOK, code)
	var st console.State
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, map[string]int{"succeeded": 1, "failed": 1}, st.Counts)
	assert.Positive(t, st.Rate, "two jobs ended within the minute")
	assert.Zero(t, st.ETA, "nothing left to run")
	require.Len(t, st.Finished, 2)
	bad := st.Finished[0]
	assert.Equal(t, "bad", bad.ID, "newest first")
	assert.Equal(t, "failed", bad.Status)
	assert.Equal(t, 4, bad.Exit)
	assert.Equal(t, "no such thing\n", bad.Stderr)
	assert.Contains(t, bad.Command, "exit 4")

	code, page := get(t, client, srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, `href="/jobs/bad"`)
	assert.Contains(t, page, "no such thing")
	code, page = get(t, client, srv.URL+"/jobs/bad")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, "failed")
	assert.Contains(t, page, "no such thing")
	code, _ = get(t, client, srv.URL+"/jobs/never")
	assert.Equal(t, http.StatusNotFound, code)
}

// sse reads server-sent events.
type sse struct {
	body io.Closer
	r    *bufio.Reader
}

func openSSE(t *testing.T, c *http.Client, url string) *sse {
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	res, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	s := &sse{body: res.Body, r: bufio.NewReader(res.Body)}
	t.Cleanup(func() { res.Body.Close() })
	return s
}

// next returns the next event's name and its data, decoded.
func (s *sse) next(t *testing.T, data any) string {
	var event string
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(line[6:]), data))
		case line == "" && event != "":
			return event
		}
	}
}

// The live updates follow jobs from queued to running to done.
func TestEventsFollowJobs(t *testing.T) {
	ex, srv, client := start(t, laboro.WithPoolSize(1))
	events := openSSE(t, client, srv.URL+"/api/events")
	var st console.State
	require.Equal(t, "state", events.next(t, &st))
	assert.Empty(t, st.Finished)

	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	ctx := context.Background()
	_, err = ex.Submit(ctx, laboro.Job{ID: "first", Command: "cat", Stdin: r})
	require.NoError(t, err)
	_, err = ex.Submit(ctx, laboro.Job{ID: "second", Command: "true"})
	require.NoError(t, err)
	for len(st.Running) == 0 || len(st.Queued) == 0 {
		events.next(t, &st)
	}
	assert.Equal(t, "first", st.Running[0].ID)
	assert.Positive(t, st.Running[0].PID)
	assert.Equal(t, []console.QueuedJob{{ID: "second", Command: "true"}}, st.Queued)
	w.Close()
	for st.Counts["succeeded"] < 2 {
		events.next(t, &st)
	}
	assert.Empty(t, st.Running)
	assert.Equal(t, 0, st.QueuedCount)
}

// A running job's output is followed as it is written, and ends when the
// job does.
func TestLiveOutput(t *testing.T) {
	ex, srv, client := start(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	h, err := ex.Submit(context.Background(), laboro.Job{ID: "talk", Script: "echo first; read x; echo second", Stdin: r})
	require.NoError(t, err)
	out := openSSE(t, client, srv.URL+"/jobs/talk/output")
	var text string
	require.Equal(t, "output", out.next(t, &text))
	assert.Equal(t, "first\n", text)
	w.Close() // the job goes on only now: the first line came while it ran
	got := ""
	for {
		if out.next(t, &text) == "end" {
			break
		}
		got += text
	}
	assert.Equal(t, "second\n", got)
	res, err := h.Wait(context.Background())
	require.NoError(t, err)
	res.Output.Close()
}

func post(t *testing.T, c *http.Client, url string, form url.Values, header map[string]string) int {
	req, _ := http.NewRequest("POST", url, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// The actions: the concurrency level, cancelling a running job, stopping
// a queued one; none from another site's page.
func TestActions(t *testing.T) {
	ex, srv, client := start(t, laboro.WithPoolSize(4), laboro.WithConcurrency(1))
	script := map[string]string{"X-Requested-With": "console", "Origin": srv.URL}

	assert.Equal(t, http.StatusForbidden, post(t, client, srv.URL+"/concurrency", url.Values{"n": {"3"}},
		map[string]string{"Origin": "http://evil.example"}))
	assert.Equal(t, http.StatusForbidden, post(t, client, srv.URL+"/concurrency", url.Values{"n": {"3"}},
		map[string]string{"Sec-Fetch-Site": "cross-site"}))
	assert.Equal(t, 1, ex.Concurrency())
	assert.Equal(t, http.StatusBadRequest, post(t, client, srv.URL+"/concurrency", url.Values{"n": {"many"}}, script))
	assert.Equal(t, http.StatusNoContent, post(t, client, srv.URL+"/concurrency", url.Values{"n": {"2"}}, script))
	assert.Equal(t, 2, ex.Concurrency())

	ctx := context.Background()
	require.NoError(t, ex.SetConcurrency(1))
	long, err := ex.Submit(ctx, laboro.Job{ID: "long", Command: "sleep 300"})
	require.NoError(t, err)
	queued, err := ex.Submit(ctx, laboro.Job{ID: "queued", Command: "true"})
	require.NoError(t, err)
	// A form without the script is sent back to the page.
	assert.Equal(t, http.StatusOK, post(t, client, srv.URL+"/jobs/queued/stop", nil, nil))
	res, err := queued.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusStopped, res.Status)
	code, page := get(t, client, srv.URL+"/jobs/queued")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, "<dt>Ran</dt><dd> – </dd>", "a job that never ran has no times, not midnight")
	require.Eventually(t, func() bool { return len(ex.Running()) == 1 && ex.Running()[0].PID > 0 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, http.StatusNoContent, post(t, client, srv.URL+"/jobs/long/cancel", nil, script))
	res, err = long.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	if res.Output != nil {
		res.Output.Close()
	}
	assert.Equal(t, http.StatusConflict, post(t, client, srv.URL+"/jobs/long/cancel", nil, script), "it ended")
}

// The output reaches the page byte for byte, a character cut by a chunk's
// end included.
func TestOutputWhole(t *testing.T) {
	ex, srv, client := start(t)
	want := strings.Repeat("a", 16<<10-1) + "é€" + strings.Repeat("b", 40000) + "✓\n"
	h, err := ex.Submit(context.Background(), laboro.Job{ID: "wide", Args: []string{"printf", "%s", want}})
	require.NoError(t, err)
	res, err := h.Wait(context.Background())
	require.NoError(t, err)
	defer res.Output.Close()
	seen(t, client, srv.URL, "wide")
	out := openSSE(t, client, srv.URL+"/jobs/wide/output")
	got := ""
	var text string
	for out.next(t, &text) == "output" {
		assert.True(t, utf8.ValidString(text), "a chunk of whole characters")
		got += text
	}
	assert.Equal(t, want, got)
}

// remoteRunner runs each job "on another machine": nothing here but the
// output it is given at the end, as the jetstream Manager does.
type remoteRunner struct {
	release chan struct{}
	dir     string
	output  string
}

func (r remoteRunner) Run(ctx context.Context, job laboro.Job) laboro.Result {
	<-r.release
	path := filepath.Join(r.dir, job.ID+".output")
	if err := os.WriteFile(path, []byte(r.output), 0o600); err != nil {
		return laboro.Result{Err: err}
	}
	return laboro.Result{Output: laboro.NewOutput(path, int64(len(r.output)))}
}

// For a fleet, the page shows the workers and where each job runs, and a
// job's live tail is read from its worker (Options.Tail) while it runs,
// then from its output here once it ended: byte for byte, a character cut
// between the two included.
func TestFleetTail(t *testing.T) {
	full := "first line\nhé" + "llo from afar\n"
	remote := full[:len("first line\nh")+1] // ends inside "é"
	var (
		mu      sync.Mutex
		written = ""
	)
	tailed := make(chan int64, 100)
	copts := console.Options{Token: token,
		Tail: func(ctx context.Context, id string, offset int64) ([]byte, error) {
			if id != "far" {
				return nil, errors.New("no such job")
			}
			select {
			case tailed <- offset:
			default:
			}
			mu.Lock()
			defer mu.Unlock()
			if offset > int64(len(written)) {
				return nil, errors.New("beyond the output")
			}
			return []byte(written[offset:]), nil
		},
		Workers: func() []console.Worker {
			return []console.Worker{{Name: "w1", Slots: 2, Running: []string{"far"}}, {Name: "w2", Slots: 1}}
		},
		Batches: func() []console.Batch {
			return []console.Batch{{Name: "nightly", Jobs: 4, Succeeded: 1, Failed: 1, Cancelled: 1, Submitted: time.Now()}}
		},
	}
	run := remoteRunner{release: make(chan struct{}), dir: t.TempDir(), output: full}
	ex, srv, client := startWith(t, copts, laboro.WithRunner(run))

	h, err := ex.Submit(context.Background(), laboro.Job{ID: "far", Command: "run far away"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(ex.Running()) == 1 }, 10*time.Second, time.Millisecond)
	code, body := get(t, client, srv.URL+"/api/state")
	require.Equal(t, http.StatusOK, code)
	var st console.State
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.True(t, st.Fleet)
	assert.Equal(t, []console.Worker{{Name: "w1", Slots: 2, Running: []string{"far"}}, {Name: "w2", Slots: 1, Running: []string{}}}, st.Workers)
	require.Len(t, st.Running, 1)
	assert.Equal(t, "w1", st.Running[0].Worker)
	code, page := get(t, client, srv.URL+"/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, "<h2>Workers</h2>")
	assert.Contains(t, page, "1 of 2")
	assert.Contains(t, page, "<h2>Batches</h2>")
	assert.Contains(t, page, "<td>nightly</td><td>4</td><td>1</td><td>1</td><td>1</td>", "a cancelled job is no failure")
	require.Len(t, st.Batches, 1)
	assert.Equal(t, "nightly", st.Batches[0].Name)
	assert.Equal(t, 1, st.Batches[0].Cancelled)
	assert.True(t, st.Batches[0].Ended.IsZero(), "it runs")

	out := openSSE(t, client, srv.URL+"/jobs/far/output")
	mu.Lock()
	written = "first line\n"
	mu.Unlock()
	var text string
	require.Equal(t, "output", out.next(t, &text))
	assert.Equal(t, "first line\n", text)
	mu.Lock()
	written = remote
	mu.Unlock()
	require.Equal(t, "output", out.next(t, &text))
	assert.Equal(t, "h", text, "the cut character waits for its other byte")
	for len(tailed) > 0 {
		<-tailed
	}
	assert.Equal(t, int64(len(remote)), <-tailed, "the next read asks for what comes after the cut byte")
	close(run.release) // it ends: the rest comes from its output here
	got := ""
	for out.next(t, &text) == "output" {
		got += text
	}
	assert.Equal(t, full, "first line\nh"+got)
	res, err := h.Wait(context.Background())
	require.NoError(t, err)
	res.Output.Close()
}

// With Options.Cancel, the page's cancel and stop go through it (a fleet
// records them), not the Executor's; its error is shown.
func TestCancelThroughOptions(t *testing.T) {
	var asked []string
	_, srv, client := startWith(t, console.Options{Token: token, Cancel: func(_ context.Context, id string) error {
		asked = append(asked, id)
		if id == "nobody" {
			return fmt.Errorf("%w: %s", laboro.ErrNotFound, id)
		}
		return nil
	}}, laboro.WithOutputDir(t.TempDir()))
	for _, action := range []string{"cancel", "stop"} {
		req, _ := http.NewRequest("POST", srv.URL+"/jobs/j-"+action+"/"+action, nil)
		req.Header.Set("X-Requested-With", "console")
		res, err := client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusNoContent, res.StatusCode, action)
	}
	res, err := client.PostForm(srv.URL+"/jobs/nobody/cancel", nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusConflict, res.StatusCode)
	assert.Contains(t, string(b), "laboro: job not found: nobody")
	assert.Equal(t, []string{"j-cancel", "j-stop", "nobody"}, asked)
}
