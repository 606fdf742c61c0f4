package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/laboro-go/laboro/protocols/fuq/fuqtest"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

// apiToken is the masters' token; "" before the first master made it.
func apiToken(testing.TB) string {
	b, _ := os.ReadFile(filepath.Join(os.Getenv("LABORO_STATE_DIR"), "workerserver-api.token"))
	return strings.TrimSpace(string(b))
}

func apiGet(t testing.TB, url string) (*http.Response, error) {
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiToken(t))
	return http.DefaultClient.Do(req)
}

func apiPost(t testing.TB, url, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest("POST", url, body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+apiToken(t))
	return http.DefaultClient.Do(req)
}

func build(t testing.TB) (master, worker string) {
	return e2e.Build(t, "github.com/laboro-go/laboro/cmd/workerserver-master"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/workerserver-worker")
}

// system is a master and its workers, on a port that stays the same
// across the master's restarts.
type system struct {
	t        testing.TB
	dir      string
	addr     string
	master   *e2e.Process
	codes    string
	password string
}

const echoCode = `#!/bin/sh
read p
if [ -n "$STARTED" ]; then : > "$STARTED/$(echo "$p" | tr -cd 0-9)"; fi
sleep ${DELAY:-0.02}
if [ -n "$GATE" ] && [ "$(echo "$p" | tr -cd 0-9)" -ge "$GATE_FROM" ]; then
	while [ ! -e "$GATE" ]; do sleep 0.02; done
fi
echo "{\"got\": $p}"
`

// newSystem makes a system whose master takes a free port at its first
// start, and that port at the next.
func newSystem(t testing.TB) *system {
	// A port below the ephemeral range: the same at every start of the
	// master, and one a retrying worker can never be given as its own.
	s := &system{t: t, dir: t.TempDir(), addr: freeport.Addr(t), password: "pw-secret"}
	s.codes = filepath.Join(s.dir, "codes")
	require.NoError(t, os.MkdirAll(s.codes, 0o755))
	// echo: the params back, as the job's result. With STARTED set, a job
	// makes the file STARTED/n as it starts. With GATE set, a job whose n
	// is GATE_FROM or more waits until the file GATE exists.
	require.NoError(t, os.WriteFile(filepath.Join(s.codes, "echo"), []byte(echoCode), 0o755))
	var servers strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&servers, "w%d %s\n", i, s.password)
	}
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "servers"), []byte(servers.String()), 0o600))
	return s
}

func (s *system) startMaster() {
	masterBin, _ := build(s.t)
	s.master = e2e.Start(s.t, nil, masterBin, "-listen", s.addr, "-db", filepath.Join(s.dir, "table.db"), "-servers", filepath.Join(s.dir, "servers"),
		"-lease", "3s")
	require.Equal(s.t, s.addr, s.master.Await(s.t, e2e.ServingAddr, 20*time.Second))
	require.Eventually(s.t, func() bool {
		resp, err := apiGet(s.t, "http://"+s.addr+"/api/jobs")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "the master did not start")
}

func (s *system) startWorker(id string, env ...string) *e2e.Process {
	_, workerBin := build(s.t)
	return e2e.Start(s.t, append(env, "WORKERSERVER_PASSWORD="+s.password), workerBin, "-url", "http://"+s.addr, "-id", id,
		"-codes", s.codes, "-cache", s.cache(id), "-c", "2", "-ping", "200ms", "-progress", "300ms", "-reconnect", "300ms")
}

func (s *system) cache(id string) string { return filepath.Join(s.dir, "cache-"+id) }

func (s *system) submit(id string, n int) {
	body, _ := json.Marshal(map[string]any{"id": id, "worker": "echo", "params": map[string]int{"n": n}})
	resp, err := apiPost(s.t, "http://"+s.addr+"/api/jobs", "application/json", bytes.NewReader(body))
	require.NoError(s.t, err)
	resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
}

func (s *system) jobs() []workerserver.JobRecord {
	resp, err := apiGet(s.t, "http://"+s.addr+"/api/jobs")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var a struct{ Data []workerserver.JobRecord }
	if json.NewDecoder(resp.Body).Decode(&a) != nil {
		return nil
	}
	return a.Data
}

func (s *system) done() int {
	n := 0
	for _, j := range s.jobs() {
		if j.Status == workerserver.JobDone {
			n++
		}
	}
	return n
}

func cached(t *testing.T, dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// checkJobs asserts that every job ended Done once, with its statuses in
// order and its params echoed.
func checkJobs(t *testing.T, jobs []workerserver.JobRecord, n int) {
	require.Len(t, jobs, n)
	for _, j := range jobs {
		assert.Equal(t, workerserver.JobDone, j.Status, j.ID)
		var want, got map[string]any
		json.Unmarshal([]byte(fmt.Sprintf(`{"got": {"n": %s}}`, strings.TrimPrefix(j.ID, "job-"))), &want)
		json.Unmarshal(j.Data, &got)
		assert.Equal(t, want, got, j.ID)
		firstDone := -1
		for i, e := range j.History {
			if e.Status == workerserver.JobDone && firstDone < 0 {
				firstDone = i
			}
			if firstDone >= 0 {
				assert.NotEqual(t, workerserver.JobProcessing, e.Status, "%s: Processing after Done: %v", j.ID, j.History)
			}
		}
		assert.GreaterOrEqual(t, firstDone, 0, j.ID)
	}
}

// gated returns how many jobs are Processing, and whether all of them wait
// at the gate (their n is from or more).
func (s *system) gated(from int) (processing int, all bool) {
	all = true
	for _, j := range s.jobs() {
		if j.Status != workerserver.JobProcessing {
			continue
		}
		processing++
		var n int
		fmt.Sscanf(j.ID, "job-%d", &n)
		all = all && n >= from
	}
	return processing, all
}

// 300 jobs over 3 workers; the master is killed with SIGKILL in the
// middle, while each worker runs two jobs, which end while it is away;
// then it is restarted. Every job ends Done exactly once in the master's
// table, per-job statuses arrived in order, the statuses of the jobs that
// ended while the master was away waited in the workers' caches, and the
// caches are empty at the end.
func TestMasterKilledAndRestarted(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	const n, half, slots = 300, 150, 6
	gate := filepath.Join(s.dir, "gate")
	var workers []*e2e.Process
	for i := 1; i <= 3; i++ {
		workers = append(workers, s.startWorker(fmt.Sprintf("w%d", i), "GATE="+gate, fmt.Sprint("GATE_FROM=", half)))
	}
	for i := range n - 1 {
		s.submit(fmt.Sprintf("job-%d", i), i)
	}
	// The last one by a user who waits for it: across the master's restart.
	masterBin, _ := build(t)
	follower := e2e.Start(t, nil, masterBin, "submit", "-url", "http://"+s.addr, "-worker", "echo",
		"-id", fmt.Sprint("job-", n-1), "-params", fmt.Sprintf(`{"n": %d}`, n-1), "-wait")
	follower.Await(t, regexp.MustCompile(`job job-299`), 20*time.Second)
	// Jobs go out about in order: most of the first half end, then jobs of
	// the second half wait at the gate in every slot of the workers.
	require.Eventually(t, func() bool { p, all := s.gated(half); return p == slots && all },
		60*time.Second, 20*time.Millisecond, "done %d", s.done())
	t.Logf("%d jobs done when the master is killed", s.done())
	require.NoError(t, s.master.Cmd.Process.Signal(syscall.SIGKILL))
	s.master.Kill()
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	cachedWhileDown := func() int {
		c := 0
		for i := 1; i <= 3; i++ {
			c += len(cached(t, s.cache(fmt.Sprintf("w%d", i))))
		}
		return c
	}
	require.Eventually(t, func() bool { return cachedWhileDown() == slots }, 30*time.Second, 20*time.Millisecond,
		"the statuses of the jobs that ended while the master was down wait in the workers' caches: %d", cachedWhileDown())
	follower.Await(t, regexp.MustCompile(`the master went away`), 30*time.Second)
	s.startMaster()
	require.Eventually(t, func() bool { return s.done() == n }, 120*time.Second, 50*time.Millisecond,
		"done %d of %d\n%s", s.done(), n, s.master.Log())
	checkJobs(t, s.jobs(), n)
	assert.Equal(t, 0, follower.Wait(t, 30*time.Second), follower.Log())
	assert.Contains(t, follower.Log(), "the master went away")
	assert.Contains(t, follower.Log(), "the master is back")
	assert.Contains(t, follower.Stdout.String(), "299")
	// The results are in the table: the files the master's Runs handed
	// them in are gone, not left in its temp dir, one a job.
	left := func() []string {
		names, _ := filepath.Glob(filepath.Join(s.master.TempDir, "workerserver-*"))
		return names
	}
	assert.Eventually(t, func() bool { return len(left()) == 0 }, 30*time.Second, 20*time.Millisecond,
		"left in the master's temp dir: %d files", len(left()))
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("w%d", i)
		assert.Eventually(t, func() bool { return len(cached(t, s.cache(id))) == 0 }, 30*time.Second, 50*time.Millisecond, "cache of %s: %v", id, cached(t, s.cache(id)))
	}
	for _, w := range workers {
		assert.NoError(t, w.Cmd.Process.Signal(syscall.SIGINT))
	}
}

// A worker killed mid-job and restarted: the statuses it cached while the
// master was away are delivered by its next run.
func TestWorkerKilledAndRestarted(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	// The jobs wait at a gate, opened once the master is gone: they end
	// while it is away, however slow the machine.
	gate, started := filepath.Join(s.dir, "gate"), filepath.Join(s.dir, "started")
	require.NoError(t, os.Mkdir(started, 0o700))
	w := s.startWorker("w1", "GATE="+gate, "GATE_FROM=0", "STARTED="+started)
	for i := range 2 {
		s.submit(fmt.Sprintf("job-%d", i), i)
	}
	// Both run on the worker (a job the master handed out as it was
	// killed may not have reached it: that one is the lease's to requeue).
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(started)
		return len(entries) == 2
	}, 20*time.Second, 20*time.Millisecond)
	s.master.Kill()
	require.NoError(t, os.WriteFile(gate, nil, 0o600)) // the jobs end while the master is away
	if !assert.Eventually(t, func() bool { return len(cached(t, s.cache("w1"))) == 2 }, 30*time.Second, 20*time.Millisecond) {
		t.Fatalf("cached: %q\nworker:\n%s", cached(t, s.cache("w1")), w.Log())
	}
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGKILL))
	w.Kill()

	s.startMaster()
	w = s.startWorker("w1")
	require.Eventually(t, func() bool { return s.done() == 2 }, 30*time.Second, 20*time.Millisecond, "%s\nworker:\n%s", s.master.Log(), w.Log())
	checkJobs(t, s.jobs(), 2)
	require.Eventually(t, func() bool { return len(cached(t, s.cache("w1"))) == 0 }, 20*time.Second, 20*time.Millisecond)
}

// A job for a code that no worker offers: submit -wait says so after a
// few seconds, status shows it, and the job can be cancelled. An id the
// master picks is a number; one a user picks that is not gets a warning.
func TestUnofferedCode(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	s.startWorker("w1") // offers echo only
	require.Eventually(t, func() bool {
		resp, err := apiGet(t, "http://"+s.addr+"/api/servers/w1")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a struct{ Data workerserver.ServerRecord }
		return json.NewDecoder(resp.Body).Decode(&a) == nil && a.Data.Status == workerserver.ServerOnline
	}, 20*time.Second, 20*time.Millisecond)
	masterBin, _ := build(t)
	url := "http://" + s.addr
	sub := e2e.Start(t, nil, masterBin, "submit", "-url", url, "-worker", "resize", "-wait")
	warning := regexp.MustCompile(`warning: no worker offers code "resize": job (\d+) waits`)
	id := sub.Await(t, warning, 20*time.Second)

	out, err := exec.Command(masterBin, "status", "-url", url, id).Output()
	require.NoError(t, err)
	assert.Equal(t, id+"\tresize\tQueued\t\tno worker offers \"resize\"\n", string(out))
	require.NoError(t, exec.Command(masterBin, "cancel", "-url", url, id).Run())
	assert.Equal(t, 1, sub.Wait(t, 20*time.Second), "a job that does not end Done")
	assert.NotContains(t, sub.Stdout.String(), id+"\n", "with -wait, standard output is the job's result alone")
	assert.Contains(t, sub.Log(), "job "+id+"\n")
	assert.Equal(t, 1, strings.Count(sub.Log(), "warning:"), sub.Log())

	cmd := exec.Command(masterBin, "submit", "-url", url, "-worker", "echo", "-id", "job-a")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, "job-a\n", string(out))
	assert.Contains(t, stderr.String(), `warning: job id "job-a" is not a decimal number`)
}

// A job cancelled with `cancel` while its worker runs a job in each of
// its slots (so it pings no more) reaches the worker with the answer to a
// progress report: the job is killed and ends Cancelled, the other runs
// on to Done.
func TestCancelReachesBusyWorker(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	gate := filepath.Join(s.dir, "gate")
	s.startWorker("w1", "GATE="+gate, "GATE_FROM=0") // two slots
	s.submit("1", 1)
	s.submit("2", 2)
	require.Eventually(t, func() bool { p, all := s.gated(0); return p == 2 && all }, 20*time.Second, 20*time.Millisecond,
		"both jobs running at the worker")
	masterBin, _ := build(t)
	url := "http://" + s.addr
	require.NoError(t, exec.Command(masterBin, "cancel", "-url", url, "1").Run())
	require.Eventually(t, func() bool {
		for _, j := range s.jobs() {
			if j.ID == "1" {
				return j.Status == workerserver.JobCancelled
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "job 1 never Cancelled: the cancel did not reach the busy worker")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.Eventually(t, func() bool { return s.done() == 1 }, 20*time.Second, 20*time.Millisecond, "job 2 Done")
}

func TestUsage(t *testing.T) {
	master, worker := build(t)
	for _, args := range [][]string{{"frobnicate"}, {"submit"}, {"-bogus"}, {"status", "a", "b"}, {"status", "-n", "0"}, {"-keep-ended", "0"}, {"-lease", "-1s"},
		{"status", "-url", "notaurl"}, {"cancel", "-url", "ftp://x", "1"}} {
		err := exec.Command(master, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
	codes := t.TempDir()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "-url is required"}, {[]string{"-url", "http://x"}, "-id is required"},
		{[]string{"-url", "http://x", "-id", "a", "-codes", codes, "-cache", "d", "extra"}, `unexpected argument "extra"`},
		{[]string{"-url", "ftp://x", "-id", "a", "-codes", codes, "-cache", "d"}, `-url "ftp://x": want the master's http:// or https:// base URL`},
		{[]string{"-url", "http://x", "-id", "a", "-codes", "nonexistent", "-cache", "d"}, `-codes "nonexistent": not a folder of executables`},
		{[]string{"-url", "http://x", "-id", "a", "-codes", codes, "-cache", "d"}, "no password: set WORKERSERVER_PASSWORD, or give -password-file"},
		{[]string{"-url", "http://x", "-ping", "-1s"}, "-ping -1s: must be more than 0"},
		{[]string{"-url", "http://x", "-max-result", "0"}, "-max-result 0: must be more than 0"},
		// A 0 that would quietly mean the default is refused.
		{[]string{"-url", "http://x", "-ping", "0s"}, "-ping 0s: must be more than 0"},
		{[]string{"-url", "http://x", "-progress", "0s"}, "-progress 0s: must be more than 0"},
		{[]string{"-url", "http://x", "-reconnect", "0s"}, "-reconnect 0s: must be more than 0"},
	} {
		cmd := exec.Command(worker, tc.args...)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "WORKERSERVER_PASSWORD=") })
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", tc.args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", tc.args)
		assert.Contains(t, string(out), tc.says, "%v", tc.args)
	}
}

// Beyond the loopback, a short API token or worker password is refused at
// start, naming which; on the loopback it will do.
func TestWeakSecretsBeyondTheLoopback(t *testing.T) {
	master, _ := build(t)
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers")
	require.NoError(t, os.WriteFile(servers, []byte("w1 s3cret\n"), 0o600))
	long := "WORKERSERVER_API_TOKEN=" + strings.Repeat("t", 16)
	for _, tc := range []struct {
		env  string
		says string
	}{
		{"WORKERSERVER_API_TOKEN=short", "$WORKERSERVER_API_TOKEN holds 5 characters"},
		{long, servers + ": the password of worker w1 holds 6 characters"},
	} {
		cmd := exec.Command(master, "-listen", "0.0.0.0:0", "-db", filepath.Join(dir, "jobs.db"), "-servers", servers)
		cmd.Env = append(os.Environ(), tc.env, "LABORO_STATE_DIR="+dir)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s", out)
		assert.Equal(t, 1, ee.ExitCode())
		assert.Contains(t, string(out), tc.says)
	}
	ok := e2e.Start(t, []string{"WORKERSERVER_API_TOKEN=short", "LABORO_STATE_DIR=" + dir}, master,
		"-listen", "127.0.0.1:0", "-db", filepath.Join(dir, "jobs.db"), "-servers", servers)
	ok.Await(t, regexp.MustCompile(`serving`), 20*time.Second)
}

// The user API needs the token the master made at its first start (the
// user commands read it from the state directory): without it, a command
// says what to do. No job sees the worker's password. A client that sends
// a body one byte at a time, or holds an idle connection, is cut off.
func TestAPITokenAndSecrets(t *testing.T) {
	s := newSystem(t)
	require.NoError(t, os.WriteFile(filepath.Join(s.codes, "env"), []byte("#!/bin/sh\nread p\nprintf '{\"env\": %s}' \"$(env | grep -c pw-secret)\"\n"), 0o755))
	s.startMaster()
	e2e.Token(t, "workerserver-api") // made at its first start, its user's alone
	s.startWorker("w1")
	masterBin, _ := build(t)
	url := "http://" + s.addr
	out, err := exec.Command(masterBin, "submit", "-url", url, "-worker", "env", "-id", "77", "-wait").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var rec workerserver.JobRecord
	for _, j := range s.jobs() {
		if j.ID == "77" {
			rec = j
		}
	}
	assert.Equal(t, workerserver.JobDone, rec.Status)
	assert.JSONEq(t, `{"env": 0}`, string(rec.Data), "a job saw the worker's password")

	other := exec.Command(masterBin, "status", "-url", url)
	other.Env = append(os.Environ(), "LABORO_STATE_DIR="+t.TempDir())
	out, err = other.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "the master wants its API token")
	wrong := exec.Command(masterBin, "status", "-url", url)
	wrong.Env = append(os.Environ(), "WORKERSERVER_API_TOKEN=nope")
	out, err = wrong.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "refused the API token")
	resp, err := http.Get(url + "/api/jobs")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// A master on a port of the system's choice says where it serves
// whatever -log says: the user API answers at the address it names.
func TestServingAddressIsSaidAtEveryLogLevel(t *testing.T) {
	s := newSystem(t)
	masterBin, _ := build(t)
	master := e2e.Start(t, nil, masterBin, "-listen", "127.0.0.1:0", "-db", filepath.Join(s.dir, "table.db"), "-servers",
		filepath.Join(s.dir, "servers"), "-log", "error")
	addr := master.Await(t, e2e.ServingAddr, 20*time.Second)
	resp, err := apiGet(t, "http://"+addr+"/api/jobs")
	require.NoError(t, err, master.Log())
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// With -tls-cert and -tls-key the master serves HTTPS: a worker trusting
// its CA (-ca) runs its jobs, the user commands trust it through
// SSL_CERT_FILE, and plain HTTP gets nothing.
func TestTLS(t *testing.T) {
	s := newSystem(t)
	pki := fuqtest.NewPKI(t)
	masterBin, workerBin := build(t)
	master := e2e.Start(t, nil, masterBin, "-listen", s.addr, "-db", filepath.Join(s.dir, "table.db"), "-servers",
		filepath.Join(s.dir, "servers"), "-tls-cert", filepath.Join(pki.Dir, "fuq.crt"), "-tls-key", filepath.Join(pki.Dir, "fuq.key"))
	require.Equal(t, s.addr, master.Await(t, e2e.ServingAddr, 20*time.Second))
	url := "https://" + s.addr
	e2e.Start(t, []string{"WORKERSERVER_PASSWORD=" + s.password}, workerBin, "-url", url, "-ca", filepath.Join(pki.Dir, "ca.crt"),
		"-id", "w1", "-codes", s.codes, "-cache", s.cache("w1"), "-c", "1", "-ping", "200ms")
	submit := exec.Command(masterBin, "submit", "-url", url, "-worker", "echo", "-params", `{"n": 5}`, "-wait")
	submit.Env = append(os.Environ(), "SSL_CERT_FILE="+filepath.Join(pki.Dir, "ca.crt"))
	out, err := submit.CombinedOutput()
	require.NoError(t, err, "%s\nmaster:\n%s", out, master.Log())
	assert.Contains(t, string(out), `"got"`)
	assert.NotContains(t, master.Log(), "in clear")

	// Go's HTTPS server answers plain HTTP with 400 and nothing else.
	resp, err := http.Get("http://" + s.addr + "/api/jobs")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP was served")
}

// A worker told to stop (SIGTERM) says so, lets its running job finish and
// send its end, and exits 0.
func TestWorkerInterruptedFinishesItsJob(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	gate, started := filepath.Join(s.dir, "gate"), t.TempDir()
	w := s.startWorker("w1", "GATE="+gate, "GATE_FROM=1", "STARTED="+started)
	s.submit("job-1", 1)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(started, "1"))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the job did not start\n%s", w.Log())
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	w.Await(t, regexp.MustCompile(`interrupted: the running jobs finish`), 10*time.Second)
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	assert.Equal(t, 0, w.Wait(t, 30*time.Second), w.Log())
	assert.Contains(t, w.Log(), "drained and stopped")
	checkJobs(t, s.jobs(), 1)
}

// A job that fails is shown with what it ran and how it ended (its exit
// status and the end of its standard error), by submit -wait and status;
// status -json gives the records to programs.
func TestFailedJobShowsWhy(t *testing.T) {
	s := newSystem(t)
	require.NoError(t, os.WriteFile(filepath.Join(s.codes, "fail"), []byte("#!/bin/sh\necho 'no such image' >&2\necho 'second line' >&2\nexit 3\n"), 0o755))
	s.startMaster()
	s.startWorker("w1")
	masterBin, _ := build(t)
	url := "http://" + s.addr
	sub := e2e.Start(t, nil, masterBin, "submit", "-url", url, "-worker", "fail", "-params", `{"n":1}`, "-id", "7", "-wait")
	require.Equal(t, 1, sub.Wait(t, time.Minute), sub.Log())
	why := "\t  command: fail {\"n\":1}\n\t  error: failed: exit status 3: no such image\n\t  | second line\n"
	assert.Contains(t, sub.Log(), why)

	out, err := exec.Command(masterBin, "status", "-url", url, "7").Output()
	require.NoError(t, err)
	assert.Equal(t, "7\tfail\tFailed\tw1\n"+why, string(out))

	out, err = exec.Command(masterBin, "status", "-json", "-url", url).Output()
	require.NoError(t, err)
	var recs []workerserver.JobRecord
	require.NoError(t, json.Unmarshal(out, &recs), "%s", out)
	require.Len(t, recs, 1)
	assert.Equal(t, workerserver.JobFailed, recs[0].Status)
	assert.Contains(t, string(recs[0].Data), "no such image")

	// The master logs the failed job with its exit status and the end of
	// its standard error, as the worker reported them.
	failed := regexp.MustCompile(`job failed.*"job": "7".*`).FindString(s.master.Log())
	assert.Contains(t, failed, `"exit": 3`, s.master.Log())
	assert.Contains(t, failed, `"stderr": "no such image\nsecond line`, s.master.Log())

	// Without -params, or with {}, the job's params are {}, as the worker
	// gets them.
	for _, params := range [][]string{nil, {"-params", "{}"}} {
		out, err := exec.Command(masterBin, append([]string{"submit", "-url", url, "-worker", "fail", "-wait"}, params...)...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s", out)
		assert.Contains(t, string(out), "\t  command: fail {}\n", "%v", params)
	}
}

// A missing -servers file is named with its flag; a user command finding
// no master at -url says where it looked and asks whether it runs.
func TestSaysWhatIsMissing(t *testing.T) {
	masterBin, _ := build(t)
	dir := t.TempDir()
	cmd := exec.Command(masterBin, "-listen", "127.0.0.1:0", "-db", filepath.Join(dir, "jobs.db"), "-servers", "nosuch")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 1, ee.ExitCode())
	assert.Equal(t, "workerserver-master: -servers nosuch: no such file or directory\n", string(out))
	// A file of passwords others may read, or naming a worker twice, is
	// refused.
	for content, says := range map[string]string{
		"w1 s3cret\n":           "-servers: secret: file is open to other users: open has mode -rw-r--r--; chmod 600 it",
		"w1 s3cret\nw1 other\n": "twice:2: worker w1 was on line 1 already",
	} {
		name := "open"
		if strings.Contains(content, "other") {
			name = "twice"
		}
		mode := os.FileMode(0o644)
		if name == "twice" {
			mode = 0o600
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), mode))
		require.NoError(t, os.Chmod(filepath.Join(dir, name), mode)) // whatever the umask
		cmd := exec.Command(masterBin, "-listen", "127.0.0.1:0", "-db", filepath.Join(dir, "jobs.db"), "-servers", name)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.ErrorAs(t, err, &ee, "%s", out)
		assert.Equal(t, 1, ee.ExitCode())
		assert.Contains(t, string(out), says)
	}

	url := "http://" + freeport.Addr(t) // nothing listens there
	for _, args := range [][]string{{"status"}, {"submit", "-worker", "echo"}, {"cancel", "1"}} {
		out, err = exec.Command(masterBin, append([]string{args[0], "-url", url}, args[1:]...)...).CombinedOutput()
		require.ErrorAs(t, err, &ee, "%s", out)
		assert.Equal(t, 1, ee.ExitCode(), "%v", args)
		assert.Contains(t, string(out), "workerserver-master "+args[0]+": no master answers at "+url+
			" (is workerserver-master running, at this -url?): ", "%v", args)
		assert.Contains(t, string(out), "connection refused", "%v", args)
	}

	// The worker's files, named by their flags.
	_, workerBin := build(t)
	for flag, want := range map[string]string{
		"-ca":            "workerserver-worker: -ca: open /nonexistent/ca.pem: no such file or directory\n",
		"-password-file": "workerserver-worker: -password-file: secret: open /nonexistent/ca.pem: no such file or directory\n",
	} {
		out, err = exec.Command(workerBin, flag, "/nonexistent/ca.pem", "-url", url, "-id", "w", "-codes", dir, "-cache", dir).CombinedOutput()
		require.ErrorAs(t, err, &ee, "%s", out)
		assert.Equal(t, want, string(out))
	}
}

// Started with no -db, the master keeps its job table in the state
// directory, not wherever it was started, and says where.
func TestDefaultTableInStateDir(t *testing.T) {
	masterBin, _ := build(t)
	state := t.TempDir()
	m := e2e.Start(t, []string{"LABORO_STATE_DIR=" + state}, masterBin, "-listen", "127.0.0.1:0")
	db := m.Await(t, regexp.MustCompile(`serving.*"db": "([^"]+)"`), 20*time.Second)
	assert.Equal(t, filepath.Join(state, "workerserver.db"), db)
	assert.FileExists(t, db)
}

// startWorkerWith starts worker id with the cache folder cache and the
// password password.
func (s *system) startWorkerWith(id, cache, password string) *e2e.Process {
	_, workerBin := build(s.t)
	return e2e.Start(s.t, []string{"WORKERSERVER_PASSWORD=" + password}, workerBin, "-url", "http://"+s.addr, "-id", id,
		"-codes", s.codes, "-cache", cache, "-c", "2", "-ping", "200ms", "-progress", "300ms", "-reconnect", "300ms")
}

// serverOnline waits until the master has worker id Online.
func (s *system) serverOnline(id string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		resp, err := apiGet(s.t, "http://"+s.addr+"/api/servers/"+id)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a struct{ Data workerserver.ServerRecord }
		return json.NewDecoder(resp.Body).Decode(&a) == nil && a.Data.Status == workerserver.ServerOnline
	}, 20*time.Second, 20*time.Millisecond)
}

// A worker started twice under one id: the second is refused while the
// first lives, says so, and exits 1 once it has been refused for the
// master's lease (it used to be taken for the first, whose jobs then ran
// twice); one started with the first one's cache folder exits 1 at once.
// The first runs on: its jobs run once, Done. Killed and started again
// with its cache folder, it is taken at once.
func TestWorkerStartedTwice(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	gate, started := filepath.Join(s.dir, "gate"), filepath.Join(s.dir, "started")
	require.NoError(t, os.Mkdir(started, 0o700))
	first := s.startWorker("w1", "GATE="+gate, "GATE_FROM=0", "STARTED="+started)
	s.serverOnline("w1")
	// Both its slots busy: it pings no more, and a held ping of it does
	// not make the second one wait for the end of the hold (20s).
	s.submit("job-1", 1)
	s.submit("job-2", 2)
	for _, n := range []string{"1", "2"} {
		require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(started, n)); return err == nil }, 20*time.Second, 20*time.Millisecond)
	}

	second := s.startWorkerWith("w1", filepath.Join(s.dir, "cache-second"), s.password)
	second.Await(t, regexp.MustCompile(`another worker already runs under this id`), 20*time.Second)
	assert.Equal(t, 1, second.Wait(t, 30*time.Second), "the second worker's exit status")
	assert.Regexp(t, `workerserver-worker: workerserver: another worker process already runs under this serverId: the master at http://\S+ has refused worker "w1" since .*in use by another worker process \(pid \d+ on host`, second.Log())
	assert.Contains(t, s.master.Log(), "worker process refused: another one holds its serverId and shows life")

	same := s.startWorkerWith("w1", s.cache("w1"), s.password)
	assert.Equal(t, 1, same.Wait(t, 20*time.Second))
	assert.Contains(t, same.Log(), "another worker process runs with this cache folder: "+s.cache("w1"))

	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	require.Eventually(t, func() bool { return s.done() == 2 }, 20*time.Second, 20*time.Millisecond, "%s", s.master.Log())
	jobs := s.jobs()
	checkJobs(t, jobs, 2)
	for _, j := range jobs {
		assert.NotContains(t, statuses(j.History)[1:], workerserver.JobQueued, "%s went back in line", j.ID)
	}

	// Killed, and started again with its cache folder: taken at once
	// (the lease is 3s; the test would see a refusal).
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Kill()
	again := s.startWorker("w1")
	again.Await(t, regexp.MustCompile(`transport: connected`), 20*time.Second)
	assert.NotContains(t, again.Log(), "another worker already runs under this id")
	s.submit("job-3", 3)
	require.Eventually(t, func() bool { return s.done() == 3 }, 20*time.Second, 20*time.Millisecond, "%s", again.Log())
}

// A worker whose password the master refuses exits 1 at once, naming
// itself and the master, and saying the password was refused (it used to
// try again for ever).
func TestWorkerWrongPassword(t *testing.T) {
	s := newSystem(t)
	s.startMaster()
	w := s.startWorkerWith("w1", s.cache("w1"), "not-the-password")
	assert.Equal(t, 1, w.Wait(t, 20*time.Second), w.Log())
	assert.Contains(t, w.Log(), fmt.Sprintf(`workerserver-worker: workerserver: password refused: the master at http://%s refused the password of worker "w1"`, s.addr))
	assert.Contains(t, w.Log(), "(check -id, and -password-file or $WORKERSERVER_PASSWORD)")
}

func statuses(evs []workerserver.StatusEvent) []string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Status)
	}
	return s
}
