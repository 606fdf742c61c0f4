package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/internal/freeport"
	"github.com/laboro-go/laboro/protocols/fuq"
	"github.com/laboro-go/laboro/protocols/fuq/fuqtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { e2e.Main(m) }

func build(t testing.TB) (foreman, worker string) {
	return e2e.Build(t, "github.com/laboro-go/laboro/cmd/fuq-foreman"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/fuq-worker")
}

// logs lists the task logs of job name in dir.
func logs(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	return names
}

// spooled lists the outcomes waiting in a worker's spool directory.
func spooled(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".update") {
			names = append(names, e.Name())
		}
	}
	return names
}

// A job of 500 tasks over 3 workers of 2 processors; one worker is killed
// with SIGKILL halfway, and another's connection is cut and restored.
// Every task ends with exactly one recorded outcome and one log file,
// but for a task that ended on the killed worker in the instant before
// its kill, its log kept and its UPDATE not yet sent: the foreman never
// heard of that run, and ran the task again (at least once), which left
// j_<task>-1.log beside it; at most one per processor of the killed
// worker. (An UPDATE whose OK was lost in the cut is sent again; the
// foreman records only the first.) The tasks of the worker whose connection is cut wait
// (for the file $HOLD) until the cut is made, so that two of them end
// while it lasts, however busy the machine.
func TestFiveHundredTasks(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs")
	require.NoError(t, os.Mkdir(logDir, 0o755))
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\necho task $1 in $(pwd)\n"+
		"if [ -n \"$HOLD\" ]; then touch \"$HOLD.$1\"; while [ ! -e \"$HOLD\" ]; do sleep 0.01; done; fi\nsleep 0.05\n"), 0o755))
	hold := filepath.Join(dir, "hold")
	control := filepath.Join(dir, "control.sock")

	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-grace", "5s",
		"-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, regexp.MustCompile(`serving.*"addr": "([^"]+)"`), 20*time.Second)
	flaky := e2e.NewRelay(t, addr)
	worker := func(name, via string, env ...string) *e2e.Process {
		return e2e.Start(t, env, workerBin, "-connect", via, "-np", "2", "-spool", filepath.Join(dir, "spool-"+name), "-reconnect", "200ms")
	}
	steady := worker("steady", addr)
	cut := worker("cut", flaky.Addr(), "HOLD="+hold)
	killed := worker("killed", addr)

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "j", "-command", task,
		"-tasks", "500", "-wd", dir, "-logdir", logDir)

	require.Eventually(t, func() bool { return len(logs(t, logDir)) >= 150 }, 60*time.Second, 10*time.Millisecond)
	require.NoError(t, killed.Cmd.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return len(logs(t, logDir)) >= 250 }, 60*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		held, err := filepath.Glob(hold + ".*")
		return err == nil && len(held) == 2
	}, 60*time.Second, 10*time.Millisecond, "the worker to be cut runs two tasks, held")
	flaky.Down.Store(true)
	flaky.Cut()
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	require.Eventually(t, func() bool { return len(spooled(t, filepath.Join(dir, "spool-cut"))) >= 2 }, 30*time.Second, 10*time.Millisecond,
		"tasks end while the connection is down, their outcomes kept on disk")
	flaky.Down.Store(false)

	require.Equal(t, 0, submit.Wait(t, 120*time.Second), "submit -wait: %s\nforeman:\n%s", submit.Stdout.String(), foreman.Log())
	assert.Regexp(t, `^job_1\njob_1\tj\tsucceeded\tdone 500/500\tfailed 0\trunning 0\tpending 0\tcancelled 0\n$`, submit.Stdout.String())

	var again []string // the logs of second runs
	for _, name := range logs(t, logDir) {
		var n, i int
		if _, err := fmt.Sscanf(name, "j_%d-%d.log", &n, &i); err == nil {
			again = append(again, name)
			b, err := os.ReadFile(filepath.Join(logDir, name))
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("task %d in %s\n", n, dir), string(b))
		}
	}
	assert.LessOrEqual(t, len(again), 2, "second runs: only tasks the killed worker ended unreported: %v", again)
	require.Len(t, logs(t, logDir), 500+len(again), "one log file per task, and the second runs'")
	for n := 1; n <= 500; n++ {
		b, err := os.ReadFile(filepath.Join(logDir, fmt.Sprintf("j_%d.log", n)))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("task %d in %s\n", n, dir), string(b))
	}
	status := exec.Command(foremanBin, "status", "-control", control, "-tasks", "job_1")
	out, err := status.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 501)
	for _, l := range lines[1:] {
		assert.Regexp(t, `^\t\d+\tdone\tworker-\d+\tdone$`, l)
	}
	log := foreman.Log()
	assert.Contains(t, log, "worker gone; its tasks wait for it")
	assert.Contains(t, log, "task given to another worker", "the killed worker's tasks ran elsewhere")
	assert.Equal(t, 4, strings.Count(log, "worker joined"), "the cut worker came back")

	for _, w := range []*e2e.Process{steady, cut} {
		assert.Contains(t, w.Log(), "connected")
	}
	assert.Regexp(t, `"updates to send": [1-9]`, cut.Log(), "outcomes kept while disconnected were delivered")
	out, err = exec.Command(foremanBin, "stop", "-control", control, "0").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, w := range []*e2e.Process{steady, cut} {
		assert.Equal(t, 0, w.Wait(t, 30*time.Second), w.Log())
	}
}

func TestUsage(t *testing.T) {
	foreman, worker := build(t)
	for _, args := range [][]string{{"frobnicate"}, {"submit", "-name", "x"}, {"submit", "-name", "../x", "-command", "true", "-tasks", "1"}, {"-bogus"}, {"status", "a", "b"}, {"-grace", "-1s"}, {"-grace", "0s"}} {
		err := exec.Command(foreman, append(args, "-control", "/nonexistent/sock")...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
	for _, args := range [][]string{{}, {"-np", "0", "-connect", "x:1"}, {"-np", "1000000", "-connect", "x:1"}, {"-connect", "x:1", "extra"}, {"-reconnect", "0s", "-connect", "x:1"}} {
		err := exec.Command(worker, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
}

// A foreman on a port of the system's choice says where it serves
// whatever -log says: a worker reaches it there, and a job runs.
func TestServingAddressIsSaidAtEveryLogLevel(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"),
		"-log", "error")
	addr := foreman.Await(t, regexp.MustCompile(`serving.*"addr": "([^"]+)"`), 20*time.Second)
	e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "1", "-spool", filepath.Join(dir, "spool"))
	out, err := exec.Command(foremanBin, "submit", "-control", control, "-wait", "-name", "s", "-command", "/bin/true",
		"-tasks", "1", "-wd", dir, "-logdir", dir).CombinedOutput()
	require.NoError(t, err, "%s\nforeman:\n%s", out, foreman.Log())
}

// "fuq-foreman cancel" ends a running job: its task in line is dropped,
// its running tasks' processes are killed on the worker, and the job ends
// cancelled; the worker is free for the next job.
func TestCancel(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, fmt.Appendf(nil, "#!/bin/sh\necho $$ > %s/pid-$1\nexec sleep 300\n", dir), 0o755))
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, regexp.MustCompile(`serving.*"addr": "([^"]+)"`), 20*time.Second)
	worker := e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, "spool"))
	// A second foreman on the same journal would give out the same job
	// ids: it refuses to start.
	second := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", filepath.Join(dir, "second.sock"),
		"-journal", filepath.Join(dir, "journal"))
	assert.Equal(t, 1, second.Wait(t, 20*time.Second))
	assert.Contains(t, second.Log(), "the journal is in use by another foreman")

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "c", "-command", task,
		"-tasks", "3", "-wd", dir, "-logdir", dir)
	var pids []int
	for n := 1; n <= 2; n++ {
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pid-%d", n)))
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			pids = append(pids, pid)
			return true
		}, 30*time.Second, 10*time.Millisecond, "task %d did not start", n)
	}
	out, err := exec.Command(foremanBin, "cancel", "-control", control, "job_1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "job_1 cancelled\n", string(out))
	assert.Equal(t, 1, submit.Wait(t, 30*time.Second))
	assert.Regexp(t, `^job_1\njob_1\tc\tcancelled\tdone 0/3\tfailed 0\trunning 0\tpending 0\tcancelled 3\n`+
		`(\ttask [123] cancelled on (worker-1|no worker): laboro: job cancelled\n){3}$`, submit.Stdout.String(), "each task says why it did not succeed")
	for _, pid := range pids {
		require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil || zombie(pid) }, 10*time.Second, 10*time.Millisecond,
			"process %d of a cancelled task still runs", pid)
	}

	next := exec.Command(foremanBin, "submit", "-control", control, "-wait", "-name", "n", "-command", "/bin/true", "-tasks", "2", "-wd", dir, "-logdir", dir)
	out, err = next.Output()
	require.NoError(t, err, "%s\nforeman:\n%s", out, foreman.Log())
	assert.Contains(t, string(out), "succeeded\tdone 2/2")
	require.NoError(t, exec.Command(foremanBin, "stop", "-control", control, "0").Run())
	assert.Equal(t, 0, worker.Wait(t, 30*time.Second), worker.Log())
}

// zombie reports whether pid is a process that has ended and waits to be
// reaped.
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// fuq-foreman -web serves workers over HTTPS and a websocket beside its
// plain TCP listener: a worker joining with -foreman (the secret from a
// fuqsrv.conf-style file; the foreman's from the environment) and one with
// -connect share a job; a worker with a wrong secret stops with status 1;
// a half-given -web or a -foreman without a secret is a usage error.
func TestWeb(t *testing.T) {
	foremanBin, workerBin := build(t)
	pki := fuqtest.NewPKI(t)
	dir := t.TempDir()
	const secret = "JZ/ib5B35Ejb1JNnFWsWkaHxuwq8O0ts+NOOzycTAm8"
	conf := filepath.Join(dir, "fuqsrv.conf")
	require.NoError(t, os.WriteFile(conf, []byte("# as the reference writes it\nforeman localhost\nport 5429\nauth "+secret+"\n"), 0o600))
	wrong := filepath.Join(dir, "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte("not-the-secret\n"), 0o600))
	control := filepath.Join(dir, "control.sock")

	foreman := e2e.Start(t, []string{"FUQ_AUTH=" + secret}, foremanBin, "-listen", "127.0.0.1:0", "-journal", filepath.Join(dir, "journal"), "-web", "127.0.0.1:0",
		"-tls-cert", filepath.Join(pki.Dir, "fuq.crt"), "-tls-key", filepath.Join(pki.Dir, "fuq.key"), "-control", control)
	web := foreman.Await(t, regexp.MustCompile(`serving.*"web": "([^"]+)"`), 20*time.Second)
	addr := foreman.Await(t, regexp.MustCompile(`serving.*"addr": "([^"]+)"`), time.Second)
	ws := e2e.Start(t, nil, workerBin, "-foreman", web, "-ca", filepath.Join(pki.Dir, "ca.crt"), "-auth-file", conf,
		"-node", "webnode", "-np", "2", "-spool", filepath.Join(dir, "spool-web"))
	tcp := e2e.Start(t, []string{"FUQ_AUTH=" + secret}, workerBin, "-connect", addr, "-np", "1", "-spool", filepath.Join(dir, "spool-tcp"))
	foreman.Await(t, regexp.MustCompile(`worker joined.*"node": "(webnode:\d+:1)"`), 20*time.Second)

	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\necho task $1\nsleep 0.2\n"), 0o755))
	out, err := exec.Command(foremanBin, "submit", "-control", control, "-wait", "-name", "w", "-command", task,
		"-tasks", "9", "-wd", dir, "-logdir", dir).Output()
	require.NoError(t, err, "%s\nforeman:\n%s", out, foreman.Log())
	assert.Contains(t, string(out), "succeeded\tdone 9/9")
	assert.Len(t, logs(t, dir), 9)

	bad := e2e.Start(t, nil, workerBin, "-foreman", web, "-ca", filepath.Join(pki.Dir, "ca.crt"), "-auth-file", wrong,
		"-spool", filepath.Join(dir, "spool-bad"))
	assert.Equal(t, 1, bad.Wait(t, 30*time.Second), bad.Log())
	assert.Contains(t, bad.Log(), "the foreman refused the login")
	badTCP := e2e.Start(t, nil, workerBin, "-connect", addr, "-auth-file", wrong, "-spool", filepath.Join(dir, "spool-bad-tcp"))
	assert.Equal(t, 1, badTCP.Wait(t, 30*time.Second), badTCP.Log())
	assert.Contains(t, badTCP.Log(), "wrong shared secret")
	// The foreman logs the refusal as it closes the connection: the worker
	// may have exited first.
	foreman.Await(t, regexp.MustCompile(`did not prove it holds the shared secret`), 20*time.Second)
	assert.NotContains(t, foreman.Log(), secret)
	assert.NotContains(t, foreman.Log(), "not-the-secret")

	for _, args := range [][]string{
		{"-web", "127.0.0.1:0", "-control", filepath.Join(dir, "c2.sock")},
		{"-tls-cert", "x", "-control", filepath.Join(dir, "c3.sock")},
	} {
		err := exec.Command(foremanBin, args...).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", args)
		assert.Equal(t, 2, ee.ExitCode(), "%v", args)
	}
	noSecret := exec.Command(workerBin, "-foreman", web, "-spool", filepath.Join(dir, "spool-none"))
	noSecret.Env = append(os.Environ(), "FUQ_AUTH=", "LABORO_STATE_DIR="+t.TempDir())
	err = noSecret.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())

	// A secret anyone could guess guards the loopback only.
	for _, args := range [][]string{{"-listen", "0.0.0.0:0"}, {"-listen", "127.0.0.1:0", "-web", ":0", "-tls-cert", "x", "-tls-key", "y"}} {
		weak := exec.Command(foremanBin, append(args, "-control", filepath.Join(dir, "weak.sock"), "-journal", filepath.Join(dir, "weak"))...)
		weak.Env = append(os.Environ(), "FUQ_AUTH=x")
		out, err := weak.CombinedOutput()
		require.ErrorAs(t, err, &ee, "%v: %s", args, out)
		assert.Equal(t, 1, ee.ExitCode(), "%v", args)
		assert.Contains(t, string(out), "$FUQ_AUTH holds 1 character; a server listening on ", "%v", args)
	}

	require.NoError(t, exec.Command(foremanBin, "stop", "-control", control, "0").Run())
	for _, w := range []*e2e.Process{ws, tcp} {
		assert.Equal(t, 0, w.Wait(t, 30*time.Second), w.Log())
	}
}

// A foreman killed with SIGKILL mid-job, then stopped with Ctrl-C, and
// started again each time with the same flags resumes the job from its
// journal: every task ends once, done, none lost; the tasks that had ended
// do not run again; and submit -wait, started before the first crash,
// waits across both. (A stop is no cancel: the job is not recorded as
// cancelled by the Runs that the foreman's end ends.)
func TestForemanKilledResumes(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	logDir, runs := filepath.Join(dir, "logs"), filepath.Join(dir, "runs")
	require.NoError(t, os.Mkdir(logDir, 0o755))
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, fmt.Appendf(nil, "#!/bin/sh\necho $1 >> %s\nsleep 0.1\n", runs), 0o755))
	control := filepath.Join(dir, "control.sock")
	addr := freeport.Addr(t) // the same at every start; a retrying worker can never be given it as its own
	start := func() *e2e.Process {
		p := e2e.Start(t, nil, foremanBin, "-listen", addr, "-control", control, "-grace", "1s", "-journal", filepath.Join(dir, "journal"))
		require.Equal(t, addr, p.Await(t, e2e.ServingAddr, 20*time.Second))
		return p
	}
	ran := func() map[string]int {
		b, _ := os.ReadFile(runs)
		n := map[string]int{}
		for _, f := range strings.Fields(string(b)) {
			n[f]++
		}
		return n
	}
	foreman := start()
	for i := range 2 {
		e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, fmt.Sprint("spool", i)), "-reconnect", "100ms")
	}
	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "r", "-command", task,
		"-tasks", "40", "-wd", dir, "-logdir", logDir)
	for i, after := range []int{10, 25} {
		require.Eventually(t, func() bool { return len(ran()) >= after }, 60*time.Second, 10*time.Millisecond)
		require.NoError(t, foreman.Cmd.Process.Signal([]os.Signal{syscall.SIGKILL, os.Interrupt}[i]))
		foreman.Wait(t, 10*time.Second)
		foreman = start()
	}
	require.Equal(t, 0, submit.Wait(t, 120*time.Second), "submit -wait: %s\n%s\nforeman:\n%s", submit.Stdout.String(), submit.Log(), foreman.Log())
	assert.Contains(t, submit.Stdout.String(), "succeeded\tdone 40/40")
	assert.Contains(t, submit.Log(), "the foreman went away")
	assert.Contains(t, submit.Log(), "the foreman is back")
	n := ran()
	assert.Len(t, n, 40, "every task ran")
	again := 0
	for _, c := range n {
		again += c - 1
	}
	// Only the tasks running at a crash may run again: 4 processors, 2 crashes.
	assert.LessOrEqual(t, again, 8, "tasks run again: %v", n)
	out, err := exec.Command(foremanBin, "status", "-control", control, "-tasks", "job_1").Output()
	require.NoError(t, err)
	assert.Equal(t, 40, strings.Count(string(out), "\tdone\t"), "%s", out)
}

// A task that fails is shown with how it ended, its command line and the
// end of its log, by submit -wait and by status; status -json gives the
// same to programs.
func TestFailedTaskShowsWhy(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\n[ $1 = 2 ] || exit 0\necho \"no input for task $1\" >&2\nexit 3\n"), 0o755))
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, regexp.MustCompile(`serving.*"addr": "([^"]+)"`), 20*time.Second)
	e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, "spool"))

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "f", "-command", task,
		"-tasks", "3", "-wd", dir, "-logdir", dir)
	require.Equal(t, 1, submit.Wait(t, time.Minute), submit.Log())
	why := "\ttask 2 failed on worker-1: error encountered: exit status 3\n" +
		"\t  command: " + task + " 2\n" +
		"\t  its standard output and error, " + filepath.Join(dir, "f_2.log") + " (its end):\n" +
		"\t  | no input for task 2\n"
	assert.Equal(t, "job_1\njob_1\tf\tfailed\tdone 2/3\tfailed 1\trunning 0\tpending 0\tcancelled 0\n"+why, submit.Stdout.String())
	// The foreman's line says it too: the task, its command, where its
	// standard error is and its end.
	foreman.Await(t, regexp.MustCompile(`WARN\tjob failed\t.*"error": "fuq: 1 of 3 tasks of job 1 failed; the first, task 2 \(`+regexp.QuoteMeta(task)+
		` 2\): error encountered: exit status 3 \(its standard output and error: `+regexp.QuoteMeta(filepath.Join(dir, "f_2.log"))+
		`\)", "stderr": "no input for task 2"}`), 10*time.Second)

	// Cancelling a job that ended says so.
	cancel := exec.Command(foremanBin, "cancel", "-control", control, "job_1")
	var stderr strings.Builder
	cancel.Stderr = &stderr
	require.Error(t, cancel.Run())
	assert.Contains(t, stderr.String(), "job job_1 has ended (failed): nothing to cancel")

	out, err := exec.Command(foremanBin, "status", "-control", control).Output()
	require.NoError(t, err)
	assert.Equal(t, "job_1\tf\tfailed\tdone 2/3\tfailed 1\trunning 0\tpending 0\tcancelled 0\n"+why, string(out))

	out, err = exec.Command(foremanBin, "status", "-json", "-control", control, "job_1").Output()
	require.NoError(t, err)
	var jobs []fuq.JobReport
	require.NoError(t, json.Unmarshal(out, &jobs), "%s", out)
	require.Len(t, jobs, 1)
	assert.Equal(t, "failed", jobs[0].State)
	require.NotNil(t, jobs[0].Job)
	assert.Equal(t, 1, jobs[0].Job.Failed)

	// A log not readable here (on the worker's host only) is named.
	require.NoError(t, os.Remove(filepath.Join(dir, "f_2.log")))
	out, err = exec.Command(foremanBin, "status", "-control", control).Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "\t  its standard output and error, "+filepath.Join(dir, "f_2.log")+" on the worker's host (not readable here)\n")
}

// A foreman remembers the last -keep-jobs jobs that ended: status lists
// those, says so of an older one, and a restart rewrites the journal
// without it.
func TestForemanForgetsOldJobs(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	control, journal := filepath.Join(dir, "control.sock"), filepath.Join(dir, "journal")
	addr := freeport.Addr(t) // the same at every start; a retrying worker can never be given it as its own
	start := func() *e2e.Process {
		p := e2e.Start(t, nil, foremanBin, "-listen", addr, "-control", control, "-journal", journal, "-keep-jobs", "2")
		require.Equal(t, addr, p.Await(t, e2e.ServingAddr, 20*time.Second))
		return p
	}
	foreman := start()
	e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, "spool"), "-reconnect", "100ms")
	for _, name := range []string{"a", "b", "c"} {
		submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", name, "-command", "/bin/true",
			"-tasks", "3", "-wd", dir, "-logdir", dir)
		require.Equal(t, 0, submit.Wait(t, 60*time.Second), "%s", submit.Log())
	}
	status := func() string {
		out, err := exec.Command(foremanBin, "status", "-control", control).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	// The third job's end is recorded as its submit -wait returns.
	require.Eventually(t, func() bool { return !strings.Contains(status(), "job_1\t") }, 10*time.Second, 10*time.Millisecond)
	assert.Regexp(t, `^job_2\tb\tsucceeded\tdone 3/3.*\njob_3\tc\tsucceeded\tdone 3/3.*\n$`, status())
	out, err := exec.Command(foremanBin, "status", "-control", control, "job_1").CombinedOutput()
	assert.Error(t, err)
	assert.Contains(t, string(out), "no job job_1")

	before, err := os.ReadFile(journal)
	require.NoError(t, err)
	assert.Contains(t, string(before), `"ref":"job_1"`)
	require.NoError(t, foreman.Cmd.Process.Signal(syscall.SIGTERM))
	foreman.Wait(t, 10*time.Second)
	start()
	assert.Regexp(t, `^job_2\tb\tsucceeded\tdone 3/3.*\njob_3\tc\tsucceeded\tdone 3/3.*\n$`, status())
	after, err := os.ReadFile(journal)
	require.NoError(t, err)
	assert.NotContains(t, string(after), `"ref":"job_1"`, "the journal forgot job_1")
	assert.Contains(t, string(after), `"ref":"job_3"`)
}

// A report lists at most 100 tasks that did not succeed, and says how many
// more there are; status -tasks lists every task.
func TestStatusBoundsTheTasksListed(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, regexp.MustCompile(`serving.*"addr": "([^"]+)"`), 20*time.Second)
	e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, "spool"))

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "f", "-command", "/bin/false",
		"-tasks", "130", "-wd", dir, "-logdir", dir)
	require.Equal(t, 1, submit.Wait(t, 2*time.Minute), submit.Log())
	assert.Equal(t, 100, strings.Count(submit.Stdout.String(), "\t  command: /bin/false "), "the first 100 failed tasks")
	assert.Contains(t, submit.Stdout.String(), "\t30 more tasks did not succeed (status -tasks job_1 lists every task)\n")

	report := func(args ...string) fuq.JobReport {
		out, err := exec.Command(foremanBin, append([]string{"status", "-json", "-control", control}, args...)...).Output()
		require.NoError(t, err)
		var jobs []fuq.JobReport
		require.NoError(t, json.Unmarshal(out, &jobs), "%s", out)
		require.Len(t, jobs, 1)
		require.NotNil(t, jobs[0].Job)
		return jobs[0]
	}
	st := report("job_1")
	assert.Equal(t, 130, st.Job.Failed)
	assert.Len(t, st.Job.Tasks, 100)
	assert.Equal(t, 30, st.Job.Omitted)
	st = report("-tasks", "job_1")
	assert.Len(t, st.Job.Tasks, 130)
	assert.Zero(t, st.Job.Omitted)

	// The same from the journal, after a restart.
	require.NoError(t, foreman.Cmd.Process.Signal(syscall.SIGTERM))
	foreman.Wait(t, 10*time.Second)
	e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal")).
		Await(t, regexp.MustCompile(`serving`), 20*time.Second)
	st = report("job_1")
	assert.Equal(t, 130, st.Job.Failed)
	assert.Len(t, st.Job.Tasks, 100)
	assert.Equal(t, 30, st.Job.Omitted)
	assert.Len(t, report("-tasks", "job_1").Job.Tasks, 130)
}

// Without $XDG_RUNTIME_DIR the control socket lives in a directory of the
// user's own in the temporary one: the foreman makes it (0700) and serves
// there, and refuses one that others may enter; its clients find it.
func TestDefaultControlSocketIsPrivate(t *testing.T) {
	foremanBin, _ := build(t)
	tmp := t.TempDir()
	env := []string{"TMPDIR=" + tmp, "XDG_RUNTIME_DIR="}
	dir := filepath.Join(tmp, fmt.Sprintf("fuq-foreman-%d", os.Getuid()))

	foreman := e2e.Start(t, env, foremanBin, "-listen", "127.0.0.1:0", "-journal", filepath.Join(tmp, "journal"))
	foreman.Await(t, e2e.ServingAddr, 30*time.Second)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	status := exec.Command(foremanBin, "status")
	status.Env = append(os.Environ(), env...)
	out, err := status.CombinedOutput()
	require.NoError(t, err, "status finds the foreman at the default socket: %s", out)
	foreman.Kill()

	require.NoError(t, os.Chmod(dir, 0o755))
	again := e2e.Start(t, env, foremanBin, "-listen", "127.0.0.1:0", "-journal", filepath.Join(tmp, "journal"))
	assert.Equal(t, 1, again.Wait(t, 30*time.Second))
	assert.Contains(t, again.Log(), "is open to other users (mode 0755)")
}

// A job submitted with -wait to a foreman no worker is connected to says
// so after a while, and status shows it; once a worker comes, it runs.
func TestSubmitWaitSaysNoWorker(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, e2e.ServingAddr, 20*time.Second)

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "w", "-command", "/bin/true",
		"-tasks", "2", "-wd", dir, "-logdir", dir)
	submit.Await(t, regexp.MustCompile(`no worker is connected to the foreman: the job waits for one \(start fuq-worker -connect HOST:PORT\)`),
		2*time.Minute)
	out, err := exec.Command(foremanBin, "status", "-control", control).Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "pending 2\tcancelled 0\t(no worker connected)\n")

	worker := e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "1", "-spool", filepath.Join(dir, "spool"))
	assert.Equal(t, 0, submit.Wait(t, time.Minute), submit.Log())
	assert.Contains(t, submit.Stdout.String(), "succeeded\tdone 2/2")
	assert.NotContains(t, submit.Stdout.String(), "no worker connected", "the ended job's line")
	require.NoError(t, exec.Command(foremanBin, "stop", "-control", control, "0").Run())
	assert.Equal(t, 0, worker.Wait(t, 30*time.Second), worker.Log())
}

// A job of more tasks than -max-tasks is refused, in words that give the
// limit and the flag that sets it, not the library's field.
func TestSubmitOverMaxTasks(t *testing.T) {
	foremanBin, _ := build(t)
	dir := t.TempDir()
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"),
		"-max-tasks", "5")
	foreman.Await(t, e2e.ServingAddr, 20*time.Second)

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-name", "big", "-command", "/bin/true", "-tasks", "6")
	assert.Equal(t, 1, submit.Wait(t, time.Minute))
	assert.Empty(t, submit.Stdout.String(), "no job id")
	assert.Contains(t, submit.Log(), "a job of 6 tasks is over the foreman's limit of 5 tasks a job (fuq-foreman serve -max-tasks)\n")
	assert.NotContains(t, submit.Log(), "MaxTasks")
}

// submit -wait waits for a foreman that stops answering (SIGSTOP) for as
// long as it is stopped: it says so once it has not answered for -stall,
// again five times as long later, and when it answers again; then it
// waits on for the job's end.
func TestSubmitWaitOutlastsAStoppedForeman(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	hold := filepath.Join(dir, "hold")
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\nwhile [ ! -e "+hold+" ]; do sleep 0.01; done\n"), 0o755))
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, e2e.ServingAddr, 20*time.Second)
	e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "1", "-spool", filepath.Join(dir, "spool"))

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-stall", "1s", "-name", "s", "-command", task,
		"-tasks", "1", "-wd", dir, "-logdir", dir)
	foreman.Await(t, regexp.MustCompile(`job queued`), 20*time.Second)
	require.NoError(t, foreman.Cmd.Process.Signal(syscall.SIGSTOP))
	submit.Await(t, regexp.MustCompile(`the foreman has not answered since \d\d:\d\d:\d\d \(\d+s\); waiting for it`), time.Minute)
	submit.Await(t, regexp.MustCompile(`the foreman has still not answered since`), time.Minute)
	require.NoError(t, foreman.Cmd.Process.Signal(syscall.SIGCONT))
	submit.Await(t, regexp.MustCompile(`the foreman answers again, after \d+s of silence`), time.Minute)
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	require.Equal(t, 0, submit.Wait(t, time.Minute), submit.Log())
	assert.Equal(t, "job_1\njob_1\ts\tsucceeded\tdone 1/1\tfailed 0\trunning 0\tpending 0\tcancelled 0\n", submit.Stdout.String())
	assert.Equal(t, 1, submit.Logged("the foreman has not answered since"), "said once:\n%s", submit.Log())
	assert.Equal(t, 1, submit.Logged("the foreman has still not answered since"), "then five times as long later:\n%s", submit.Log())
	assert.Equal(t, 1, submit.Logged("the foreman answers again"))
}

// A worker killed with SIGKILL while its tasks run leaves nothing in the
// logging directory: their outputs were in a directory of its own there,
// which its reaper removes. The tasks run again on another worker, and
// the directory ends with their logs alone.
func TestKilledWorkerLeavesNoOutputs(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	logDir := filepath.Join(dir, "logs")
	hold := filepath.Join(dir, "hold")
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\necho task $1\ntouch "+hold+".$1\n"+
		"while [ ! -e "+hold+" ]; do sleep 0.01; done\n"), 0o755))
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"),
		"-grace", "100ms")
	addr := foreman.Await(t, e2e.ServingAddr, 20*time.Second)
	killed := e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, "spool-killed"))
	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-name", "k", "-command", task,
		"-tasks", "2", "-wd", dir, "-logdir", logDir)
	require.Eventually(t, func() bool {
		started, err := filepath.Glob(hold + ".*")
		return err == nil && len(started) == 2
	}, time.Minute, 10*time.Millisecond, "both tasks run on the worker to be killed")
	require.NoError(t, killed.Cmd.Process.Signal(syscall.SIGKILL))
	killed.Wait(t, 10*time.Second)
	entries := func() []string {
		des, err := os.ReadDir(logDir)
		require.NoError(t, err)
		var names []string
		for _, e := range des {
			names = append(names, e.Name())
		}
		return names
	}
	if !assert.Eventually(t, func() bool { return len(entries()) == 0 }, 20*time.Second, 10*time.Millisecond) {
		t.Fatalf("the killed worker's outputs are left in the logging directory: %v", entries())
	}

	other := e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "2", "-spool", filepath.Join(dir, "spool-other"))
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	require.Equal(t, 0, submit.Wait(t, time.Minute), submit.Log())
	require.NoError(t, exec.Command(foremanBin, "stop", "-control", control, "0").Run())
	require.Equal(t, 0, other.Wait(t, 30*time.Second), other.Log())
	assert.ElementsMatch(t, []string{"k_1.log", "k_2.log"}, entries(), "the other worker's directory went with it")
}

// jobNamed returns the report of the job named name, as status -json gives
// it, or nil if the foreman has none.
func jobNamed(t *testing.T, foremanBin, control, name string) *fuq.JobReport {
	t.Helper()
	out, err := exec.Command(foremanBin, "status", "-json", "-control", control).Output()
	require.NoError(t, err)
	var jobs []fuq.JobReport
	require.NoError(t, json.Unmarshal(out, &jobs), "%s", out)
	for _, j := range jobs {
		if j.Job != nil && j.Job.Name == name {
			return &j
		}
	}
	return nil
}

// submit -wait shows a job's cancelled tasks apart from its failed ones,
// as its summary does: with -log-format json, in the last record of the
// logger "progress", on a terminal as on a pipe, where standard error
// holds nothing but JSON objects; on a terminal without it, in the bar.
// Of the job's three tasks one succeeds, one fails, and one is cancelled
// while it runs.
func TestSubmitWaitCountsCancelledApart(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\ncase $1 in 1) exit 0;; 2) exit 3;; esac\nexec sleep 300\n"), 0o755))
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, e2e.ServingAddr, 20*time.Second)
	worker := e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "3", "-spool", filepath.Join(dir, "spool"))

	// run submits a job of the three tasks named name, cancels it once
	// its first two tasks have ended and the third runs, and returns
	// submit -wait once it has ended, with its job's id.
	run := func(t *testing.T, name string, start func(t testing.TB, stdin io.Reader, env []string, bin string, args ...string) *e2e.Process,
		flags ...string) (*e2e.Process, string) {
		args := append([]string{"submit", "-control", control, "-wait", "-name", name, "-command", task, "-tasks", "3",
			"-wd", dir, "-logdir", dir}, flags...)
		submit := start(t, nil, nil, foremanBin, args...)
		var id string
		require.Eventually(t, func() bool {
			st := jobNamed(t, foremanBin, control, name)
			if st == nil || st.Job.Done != 1 || st.Job.Failed != 1 || st.Job.Running != 1 {
				return false
			}
			id = st.ID
			return true
		}, time.Minute, 10*time.Millisecond, "tasks 1 and 2 end, task 3 runs:\n%s", submit.Log())
		out, err := exec.Command(foremanBin, "cancel", "-control", control, id).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, 1, submit.Wait(t, time.Minute), submit.Log())
		assert.True(t, strings.HasPrefix(submit.Stdout.String(),
			id+"\n"+id+"\t"+name+"\tcancelled\tdone 1/3\tfailed 1\trunning 0\tpending 0\tcancelled 1\n"), "the summary:\n%s", submit.Stdout.String())
		return submit, id
	}

	for i, s := range e2e.Starters {
		t.Run("json on a "+s.Where, func(t *testing.T) {
			submit, _ := run(t, fmt.Sprintf("json%d", i), s.Start, "-log-format", "json")
			progress := e2e.LastRecord(t, submit.Log(), "progress")
			for field, n := range map[string]float64{"done": 3, "total": 3, "failed": 1, "cancelled": 1, "running": 0, "queued": 0} {
				assert.Equal(t, n, progress[field], "%s in %v", field, progress)
			}
			assert.Equal(t, "3 of 3 done (running 0, queued 0, failed 1, cancelled 1)", progress["msg"])
		})
	}
	t.Run("bar on a terminal", func(t *testing.T) {
		submit, _ := run(t, "bar", e2e.StartOnTerminal)
		assert.Contains(t, submit.Log(), "running 0, queued 0, failed 1, cancelled 1", "the bar as the job ends")
	})

	require.NoError(t, exec.Command(foremanBin, "stop", "-control", control, "0").Run())
	assert.Equal(t, 0, worker.Wait(t, 30*time.Second), worker.Log())
}

// With -log-format json, what submit -wait says of a foreman that does not
// answer (stopped with SIGSTOP), and answers again, are records: standard
// error holds nothing but JSON objects.
func TestSubmitWaitJSONSaysStallsAsRecords(t *testing.T) {
	foremanBin, workerBin := build(t)
	dir := t.TempDir()
	hold := filepath.Join(dir, "hold")
	task := filepath.Join(dir, "task.sh")
	require.NoError(t, os.WriteFile(task, []byte("#!/bin/sh\nwhile [ ! -e "+hold+" ]; do sleep 0.01; done\n"), 0o755))
	control := filepath.Join(dir, "control.sock")
	foreman := e2e.Start(t, nil, foremanBin, "-listen", "127.0.0.1:0", "-control", control, "-journal", filepath.Join(dir, "journal"))
	addr := foreman.Await(t, e2e.ServingAddr, 20*time.Second)
	e2e.Start(t, nil, workerBin, "-connect", addr, "-np", "1", "-spool", filepath.Join(dir, "spool"))

	submit := e2e.Start(t, nil, foremanBin, "submit", "-control", control, "-wait", "-stall", "1s", "-log-format", "json",
		"-name", "s", "-command", task, "-tasks", "1", "-wd", dir, "-logdir", dir)
	foreman.Await(t, regexp.MustCompile(`job queued`), 20*time.Second)
	require.NoError(t, foreman.Cmd.Process.Signal(syscall.SIGSTOP))
	submit.Await(t, regexp.MustCompile(`"level":"warn",.*"msg":"the foreman has not answered since \d\d:\d\d:\d\d \(\d+s\); waiting for it`), time.Minute)
	require.NoError(t, foreman.Cmd.Process.Signal(syscall.SIGCONT))
	submit.Await(t, regexp.MustCompile(`"msg":"the foreman answers again, after \d+s of silence"`), time.Minute)
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	require.Equal(t, 0, submit.Wait(t, time.Minute), submit.Log())
	assert.Equal(t, "job_1\njob_1\ts\tsucceeded\tdone 1/1\tfailed 0\trunning 0\tpending 0\tcancelled 0\n", submit.Stdout.String())
	e2e.JSONRecords(t, submit.Log())
	progress := e2e.LastRecord(t, submit.Log(), "progress")
	assert.Equal(t, float64(1), progress["done"], "%v", progress)
}

// With -log-format json, the error submit ends with is a record, on a
// terminal as on a pipe: here, that no foreman answers on its control
// socket.
func TestSubmitJSONErrorIsARecord(t *testing.T) {
	foremanBin, _ := build(t)
	control := filepath.Join(t.TempDir(), "none.sock")
	for _, s := range e2e.Starters {
		t.Run(s.Where, func(t *testing.T) {
			submit := s.Start(t, nil, nil, foremanBin, "submit", "-control", control, "-wait", "-log-format", "json",
				"-name", "e", "-command", "/bin/true", "-tasks", "1")
			require.Equal(t, 1, submit.Wait(t, time.Minute), submit.Log())
			records := e2e.JSONRecords(t, submit.Log())
			require.Len(t, records, 1, submit.Log())
			assert.Equal(t, "error", records[0]["level"])
			assert.Contains(t, records[0]["msg"], "no foreman answers on "+control)
			assert.Empty(t, submit.Stdout.String())
		})
	}
}

// With -log-format json, the error status, cancel and stop end with is a
// record: here, that no foreman answers on their control socket. What
// they print goes to standard output, as ever.
func TestClientJSONErrorIsARecord(t *testing.T) {
	foremanBin, _ := build(t)
	control := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"status", "job_1"}, {"cancel", "job_1"}, {"stop", "0"}} {
		t.Run(args[0], func(t *testing.T) {
			p := e2e.Start(t, nil, foremanBin, append([]string{args[0], "-control", control, "-log-format", "json"}, args[1:]...)...)
			require.Equal(t, 1, p.Wait(t, time.Minute), p.Log())
			records := e2e.JSONRecords(t, p.Log())
			require.Len(t, records, 1, p.Log())
			assert.Equal(t, "error", records[0]["level"])
			assert.Contains(t, records[0]["msg"], "no foreman answers on "+control)
			assert.Empty(t, p.Stdout.String())
		})
	}
}
