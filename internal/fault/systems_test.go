//go:build fault

package fault_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/laboro-go/laboro/internal/freeport"
)

var systems = []system{runexpSystem, pulseSystem, fuqSystem, workerserverSystem, jetstreamSystem}

func write(t *testing.T, path, text string, mode os.FileMode) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// over reports whether a role has ended for good.
func over(r *role) bool {
	select {
	case <-r.ended:
		return true
	default:
		return false
	}
}

// command runs a client command of a system and returns its standard
// output ("" and false when it failed: the manager may be down).
func command(h *harness, argv ...string) (string, bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), h.env...)
	out, err := cmd.Output()
	return string(out), err == nil
}

func exitedWith(codes ...int) func(int) bool {
	return func(code int) bool {
		for _, c := range codes {
			if code == c {
				return true
			}
		}
		return false
	}
}

// runexp: a folder of job files; the manager resumes from the results it
// wrote, the runners connect again when it is back.
var runexpSystem = system{
	name: "runexp",
	note: "the results folder",
	start: func(t *testing.T, h *harness) {
		mgr, runner := e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-manager"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/runexp-runner")
		base := filepath.Join(h.dir, "batch")
		for _, id := range h.jobs {
			write(t, filepath.Join(base, "runs", id+".sh"), h.script(id)+"\necho RES:ok\n", 0o644)
		}
		port := strconv.Itoa(freeport.Port(t))
		h.manager = h.keep("manager", nil, exitedWith(0, 1), mgr, "--listen", "127.0.0.1", "-p", port, "--sort", base)
		for i := range 2 {
			h.workers = append(h.workers, h.keep(fmt.Sprintf("runner%d", i), nil, nil, runner, "2", "-c", "127.0.0.1:"+port, "-h", fmt.Sprintf("w%d", i)))
		}
	},
	done: func(t *testing.T, h *harness) (map[string]bool, bool) {
		ok := map[string]bool{}
		for _, id := range h.jobs {
			b, err := os.ReadFile(filepath.Join(h.dir, "batch", "outputs", id+".res"))
			if err == nil && strings.HasPrefix(string(b), "runexp summary: success") {
				ok[id] = true
			}
		}
		return ok, over(h.manager)
	},
}

// pulse: a folder of task files, each a shell script run by the workers'
// sh; the results folder.
var pulseSystem = system{
	name: "pulse",
	start: func(t *testing.T, h *harness) {
		ctl, worker := e2e.Build(t, "github.com/laboro-go/laboro/cmd/pulse-controller"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/pulse-worker")
		for _, id := range h.jobs {
			write(t, filepath.Join(h.dir, "tasks", id), h.script(id)+"\necho ok "+id+"\n", 0o644)
		}
		sock, err := os.MkdirTemp("", "fault-pulse")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(sock) })
		os.Chmod(sock, 0o700)
		h.manager = h.keep("controller", nil, exitedWith(0, 1), ctl, "-dir", sock, "-in", filepath.Join(h.dir, "tasks"),
			"-out", filepath.Join(h.dir, "results"), "-attempts", "10")
		for i := range 2 {
			h.workers = append(h.workers, h.keep(fmt.Sprintf("worker%d", i), nil, nil, worker, "-dir", sock, "-pulse", "2s", "--", "sh"))
		}
	},
	done: func(t *testing.T, h *harness) (map[string]bool, bool) {
		ok := map[string]bool{}
		for _, id := range h.jobs {
			b, err := os.ReadFile(filepath.Join(h.dir, "results", id))
			if err == nil && strings.Contains(string(b), "ok "+id) {
				ok[id] = true
			}
		}
		return ok, over(h.manager)
	},
}

// fuq: one job of N tasks; task k runs tasks/k.sh.
var fuqSystem = system{
	name: "fuq",
	start: func(t *testing.T, h *harness) {
		foreman, worker := e2e.Build(t, "github.com/laboro-go/laboro/cmd/fuq-foreman"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/fuq-worker")
		h.jobs = h.jobs[:0]
		for i := 1; i <= *jobsFlag; i++ {
			id := strconv.Itoa(i)
			h.jobs = append(h.jobs, id)
			write(t, filepath.Join(h.dir, "tasks", id+".sh"), h.script(id)+"\n", 0o644)
		}
		write(t, filepath.Join(h.dir, "task"), "#!/bin/sh\nexec sh "+filepath.Join(h.dir, "tasks")+"/$1.sh\n", 0o755)
		port := strconv.Itoa(freeport.Port(t))
		sock := filepath.Join(h.dir, "control.sock")
		h.manager = h.keep("foreman", nil, nil, foreman, "serve", "-listen", "127.0.0.1:"+port, "-control", sock)
		for i := range 2 {
			h.workers = append(h.workers, h.keep(fmt.Sprintf("worker%d", i), nil, nil, worker, "-connect", "127.0.0.1:"+port, "-np", "2",
				"-spool", filepath.Join(h.dir, fmt.Sprintf("spool%d", i))))
		}
		h.fuqControl = sock
		for range 100 {
			out, ok := command(h, foreman, "submit", "-control", sock, "-name", "fault", "-command", filepath.Join(h.dir, "task"),
				"-tasks", strconv.Itoa(*jobsFlag), "-wd", h.dir, "-logdir", filepath.Join(h.dir))
			if ok {
				h.fuqJob = strings.TrimSpace(out)
				return
			}
			sleepBrief()
		}
		t.Fatal("fuq-foreman submit failed")
	},
	done: func(t *testing.T, h *harness) (map[string]bool, bool) {
		foreman := e2e.Build(t, "github.com/laboro-go/laboro/cmd/fuq-foreman")
		out, ok := command(h, foreman, "status", "-control", h.fuqControl, "-tasks", h.fuqJob)
		if !ok {
			return nil, false
		}
		// A line a task: its number, its state.
		return states(h, out, "done", []string{"failed", "cancelled"}, func(f []string) (string, string, bool) {
			if len(f) < 2 || f[0] == h.fuqJob {
				return "", "", false
			}
			return f[0], f[1], true
		})
	},
}

// workerserver: a worker code "sh" that runs tasks/<id>.sh for the id in
// its params.
var workerserverSystem = system{
	name: "workerserver",
	note: "bbolt",
	start: func(t *testing.T, h *harness) {
		master, worker := e2e.Build(t, "github.com/laboro-go/laboro/cmd/workerserver-master"), e2e.Build(t, "github.com/laboro-go/laboro/cmd/workerserver-worker")
		for _, id := range h.jobs {
			write(t, filepath.Join(h.dir, "tasks", id+".sh"), h.script(id)+"\n", 0o644)
		}
		write(t, filepath.Join(h.dir, "codes", "sh"), "#!/bin/sh\nid=$(sed 's/.*\"id\":\"\\([^\"]*\\)\".*/\\1/')\nsh "+
			filepath.Join(h.dir, "tasks")+"/$id.sh >&2\necho '{\"ok\":true}'\n", 0o755)
		write(t, filepath.Join(h.dir, "servers"), "w0 pw0\nw1 pw1\n", 0o600)
		port := strconv.Itoa(freeport.Port(t))
		h.url = "http://127.0.0.1:" + port
		h.manager = h.keep("master", nil, nil, master, "serve", "-listen", "127.0.0.1:"+port, "-db", filepath.Join(h.dir, "jobs.db"),
			"-servers", filepath.Join(h.dir, "servers"), "-lease", "3s")
		for i := range 2 {
			h.workers = append(h.workers, h.keep(fmt.Sprintf("worker%d", i), []string{fmt.Sprintf("WORKERSERVER_PASSWORD=pw%d", i)}, nil,
				worker, "-url", h.url, "-id", fmt.Sprintf("w%d", i), "-codes", filepath.Join(h.dir, "codes"),
				"-cache", filepath.Join(h.dir, fmt.Sprintf("cache%d", i)), "-c", "2", "-ping", "1s", "-reconnect", "300ms"))
		}
		h.ids = map[string]string{}
		for _, id := range h.jobs {
			var out string
			var ok bool
			for range 100 {
				if out, ok = command(h, master, "submit", "-url", h.url, "-worker", "sh", "-params", `{"id":"`+id+`"}`); ok {
					break
				}
				sleepBrief()
			}
			if !ok {
				t.Fatal("workerserver-master submit failed")
			}
			h.ids[strings.TrimSpace(out)] = id
		}
	},
	done: func(t *testing.T, h *harness) (map[string]bool, bool) {
		master := e2e.Build(t, "github.com/laboro-go/laboro/cmd/workerserver-master")
		out, ok := command(h, master, "status", "-url", h.url)
		if !ok {
			return nil, false
		}
		// A line a job: the master's id, the code, the status.
		return states(h, out, "Done", []string{"Failed", "Cancelled"}, func(f []string) (string, string, bool) {
			if len(f) < 3 || h.ids[f[0]] == "" {
				return "", "", false
			}
			return h.ids[f[0]], f[2], true
		})
	},
}

// jetstream: laboro serve with no workers of its own, two laboro workers.
var jetstreamSystem = system{
	name: "jetstream",
	note: "JetStream",
	start: func(t *testing.T, h *harness) {
		laboro := buildLaboro(t)
		var lines strings.Builder
		for _, id := range h.jobs {
			write(t, filepath.Join(h.dir, "tasks", id+".sh"), h.script(id)+"\n", 0o644)
			fmt.Fprintf(&lines, "sh %s\n", filepath.Join(h.dir, "tasks", id+".sh"))
		}
		write(t, filepath.Join(h.dir, "jobs.txt"), lines.String(), 0o644)
		port := strconv.Itoa(freeport.Port(t))
		h.url = "nats://127.0.0.1:" + port
		h.manager = h.keep("serve", nil, nil, laboro, "serve", "-data", filepath.Join(h.dir, "data"), "-listen", "127.0.0.1:"+port, "-workers", "0")
		for i := range 2 {
			out := filepath.Join(h.dir, fmt.Sprintf("out%d", i))
			if err := os.MkdirAll(out, 0o700); err != nil {
				t.Fatal(err)
			}
			h.workers = append(h.workers, h.keep(fmt.Sprintf("worker%d", i), nil, nil, laboro, "worker", "-nats", h.url, "-c", "2", "-dir", out))
		}
		for range 100 {
			if _, ok := command(h, laboro, "submit", "-nats", h.url, "-batch", "fault", "-f", filepath.Join(h.dir, "jobs.txt")); ok {
				return
			}
			sleepBrief()
		}
		t.Fatal("laboro submit failed")
	},
	done: func(t *testing.T, h *harness) (map[string]bool, bool) {
		laboro := buildLaboro(t)
		args := []string{laboro, "status", "-nats", h.url}
		for i := range h.jobs {
			args = append(args, fmt.Sprintf("fault-%d", i+1))
		}
		out, ok := command(h, args...)
		if !ok {
			return nil, false
		}
		// A line a job: fault-N, its state.
		return states(h, out, "succeeded", []string{"failed", "cancelled", "timedout"}, func(f []string) (string, string, bool) {
			if len(f) < 2 || !strings.HasPrefix(f[0], "fault-") {
				return "", "", false
			}
			n, _ := strconv.Atoi(strings.TrimPrefix(f[0], "fault-"))
			if n < 1 || n > len(h.jobs) {
				return "", "", false
			}
			return h.jobs[n-1], f[1], true
		})
	},
}

var laboroBin struct {
	once sync.Once
	path string
	err  error
}

// buildLaboro builds the laboro command (jetstream/cmd/laboro), once.
func buildLaboro(t *testing.T) string {
	laboroBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "fault-laboro")
		if err != nil {
			laboroBin.err = err
			return
		}
		laboroBin.path = filepath.Join(dir, "laboro")
		cmd := exec.Command("go", "build", "-o", laboroBin.path, "./cmd/laboro")
		cmd.Dir = filepath.Join("..", "..", "jetstream")
		if out, err := cmd.CombinedOutput(); err != nil {
			laboroBin.err = fmt.Errorf("%w: %s", err, out)
		}
	})
	if laboroBin.err != nil {
		t.Fatal(laboroBin.err)
	}
	return laboroBin.path
}

// states reads a status command's output, a line a job: job reads a
// line's fields into our id of the job and its state (ok false for a line
// of something else). It returns the jobs that succeeded (their state is
// done), and whether every job has ended (done or one of failed).
func states(h *harness, out, done string, failed []string, job func(fields []string) (id, state string, ok bool)) (map[string]bool, bool) {
	succeeded, ended := map[string]bool{}, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		id, state, ok := job(strings.Fields(sc.Text()))
		switch {
		case !ok:
		case state == done:
			succeeded[id] = true
			ended++
		case slices.Contains(failed, state):
			ended++
		}
	}
	return succeeded, ended == len(h.jobs)
}
