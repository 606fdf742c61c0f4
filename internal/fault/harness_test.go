//go:build fault

// The fault harness: each system runs a batch of jobs while its workers
// and its manager are killed with SIGKILL at random moments and started
// again, as an operator's supervisor (systemd, a shell loop) would; then
// it counts, per system, the jobs lost, run twice and stuck. RELIABILITY.md
// has the command and the last table.
package fault_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/laboro-go/laboro/internal/e2e"
)

var (
	jobsFlag    = flag.Int("jobs", 40, "jobs in each system's batch")
	workerKills = flag.Int("worker-kills", 3, "SIGKILLs of a worker during each batch")
	mgrKills    = flag.Int("manager-kills", 2, "SIGKILLs of the manager during each batch")
	seedFlag    = flag.Uint64("seed", 0, "seed of the fault schedule (0: from the clock)")
	tableFlag   = flag.String("table", "", "file to write the table to (markdown)")
	rounds      = flag.Int("rounds", 1, "batches per system")
)

func TestMain(m *testing.M) { e2e.Main(m) }

// A system is one of the remote systems, driven through its binaries.
type system struct {
	name string
	// start starts the manager and the workers (as roles of h) and
	// submits h.jobs jobs; each job runs h.script(id).
	start func(t *testing.T, h *harness)
	// done returns the jobs the system reports as succeeded, and whether
	// the whole batch is over (every job ended).
	done func(t *testing.T, h *harness) (map[string]bool, bool)
	// managerState says where the manager keeps its state, for the table.
	note string
}

// harness is one batch of one system.
type harness struct {
	t    *testing.T
	dir  string
	log  string // each job appends "start ID" and "end ID" here
	jobs []string
	env  []string
	rng  *rand.Rand

	mu      sync.Mutex
	manager *role
	workers []*role

	// what a system keeps between start and done
	url        string
	ids        map[string]string // the system's job id → ours
	fuqControl string
	fuqJob     string
}

func sleepBrief() { time.Sleep(100 * time.Millisecond) }

// job ids: j00 … jNN.
func (h *harness) init(n int) {
	for i := range n {
		h.jobs = append(h.jobs, fmt.Sprintf("j%02d", i))
	}
}

// script is the shell text of job id: it notes its start, works for a
// while, and notes its end.
func (h *harness) script(id string) string {
	ms := 200 + h.rng.IntN(800)
	return fmt.Sprintf("echo start %s >> %s; sleep %d.%03d; echo end %s >> %s", id, h.log, ms/1000, ms%1000, id, h.log)
}

// role is a process the harness keeps running: started again after it
// ends (by a kill or by itself) until the batch is over, as a supervisor
// would.
type role struct {
	name  string
	argv  []string
	env   []string
	out   *os.File
	final func(code int) bool // an exit that ends the role (the batch is over)

	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	ended   chan struct{} // closed when the role is over
	starts  int
}

// keep starts a role; final, if not nil, says which exit status ends it.
func (h *harness) keep(name string, env []string, final func(int) bool, argv ...string) *role {
	out, err := os.Create(filepath.Join(h.dir, name+".log"))
	if err != nil {
		h.t.Fatal(err)
	}
	r := &role{name: name, argv: argv, env: append(append(os.Environ(), h.env...), env...), out: out, final: final, ended: make(chan struct{})}
	go r.run(h.t)
	h.t.Cleanup(func() { r.stop(); out.Close() })
	return r
}

func (r *role) run(t *testing.T) {
	defer close(r.ended)
	for {
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			return
		}
		cmd := exec.Command(r.argv[0], r.argv[1:]...)
		cmd.Env, cmd.Stdout, cmd.Stderr = r.env, r.out, r.out
		fmt.Fprintf(r.out, "=== start %d: %s\n", r.starts, strings.Join(r.argv, " "))
		err := cmd.Start()
		r.cmd = cmd
		r.starts++
		r.mu.Unlock()
		if err != nil {
			t.Errorf("%s: %v", r.name, err)
			return
		}
		err = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		fmt.Fprintf(r.out, "=== ended: %v\n", err)
		if r.final != nil && r.final(code) {
			return
		}
		time.Sleep(200 * time.Millisecond) // a supervisor's restart delay
	}
}

// kill sends SIGKILL to the role's process; the role starts it again.
func (r *role) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil && r.cmd.Process != nil {
		fmt.Fprintf(r.out, "=== SIGKILL\n")
		r.cmd.Process.Kill()
	}
}

// stop ends the role: SIGTERM, then SIGKILL after 5 s.
func (r *role) stop() {
	r.mu.Lock()
	r.stopped = true
	cmd := r.cmd
	r.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.ended:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-r.ended
		}
	}
}

// runs reads the job log: how many times each job started and ended.
func (h *harness) runs() (starts, ends map[string]int) {
	starts, ends = map[string]int{}, map[string]int{}
	f, err := os.Open(h.log)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		what, id, _ := strings.Cut(sc.Text(), " ")
		switch what {
		case "start":
			starts[id]++
		case "end":
			ends[id]++
		}
	}
	return
}

// row is a system's line of the table.
type row struct {
	system                                        string
	jobs, workerKills, managerKills               int
	lost, failed, startedAgain, endedTwice, stuck int
	seconds                                       float64
	note                                          string
}

func TestFaults(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	var rows []row
	for _, s := range systems {
		for round := range *rounds {
			t.Run(fmt.Sprintf("%s/%d", s.name, round), func(t *testing.T) {
				rows = append(rows, runBatch(t, s, seed+uint64(round)))
			})
		}
	}
	table := formatTable(rows, seed)
	t.Log("\n" + table)
	if *tableFlag != "" {
		if err := os.WriteFile(*tableFlag, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runBatch(t *testing.T, s system, seed uint64) row {
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, log: filepath.Join(dir, "runs.log"), rng: rand.New(rand.NewPCG(seed, 1)),
		env: []string{"LABORO_STATE_DIR=" + filepath.Join(dir, "state")}}
	h.init(*jobsFlag)
	began := time.Now()
	s.start(t, h)

	// The faults, at random moments of the batch: each once a random
	// number of jobs (up to three quarters of them) have run to their end,
	// and a random delay of up to 300 ms later.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var faults sync.WaitGroup
	var wk, mk int
	var kmu sync.Mutex
	schedule := func(n int, kill func(), count *int) {
		for range n {
			after := 1 + h.rng.IntN(max(1, len(h.jobs)*3/4))
			delay := time.Duration(h.rng.IntN(300)) * time.Millisecond
			faults.Go(func() {
				for {
					_, ends := h.runs()
					total := 0
					for _, n := range ends {
						total += n
					}
					if total >= after {
						break
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
				time.Sleep(delay)
				kill()
				kmu.Lock()
				*count++
				kmu.Unlock()
			})
		}
	}
	schedule(*workerKills, func() {
		h.mu.Lock()
		w := h.workers[rand.IntN(len(h.workers))]
		h.mu.Unlock()
		w.kill()
	}, &wk)
	if h.manager != nil {
		schedule(*mgrKills, h.manager.kill, &mk)
	}

	// Wait until the system says the batch is over, or it is stuck.
	deadline := time.Now().Add(120 * time.Second)
	var succeeded map[string]bool
	var over bool
	for {
		succeeded, over = s.done(t, h)
		if over || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	cancel()
	faults.Wait()
	elapsed := time.Since(began)

	// Let the processes of killed workers' jobs, if any survived, finish
	// and show themselves in the log before it is read.
	time.Sleep(1500 * time.Millisecond)
	starts, ends := h.runs()
	r := row{system: s.name, jobs: len(h.jobs), workerKills: wk, managerKills: mk, seconds: elapsed.Seconds(), note: s.note}
	for _, id := range h.jobs {
		switch {
		case succeeded[id] && ends[id] == 0:
			r.lost++ // reported done, never ran to its end
			t.Errorf("%s: reported done but never ran to its end", id)
		case !succeeded[id] && !over:
			r.stuck++
			t.Errorf("%s: not done after 120 s (started %d times, ended %d)", id, starts[id], ends[id])
		case !succeeded[id]:
			r.failed++
			t.Logf("%s: the batch ended with it failed (started %d times, ended %d)", id, starts[id], ends[id])
		}
		if starts[id] > 1 {
			r.startedAgain++
		}
		if ends[id] > 1 {
			r.endedTwice++
		}
	}
	return r
}

func formatTable(rows []row, seed uint64) string {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].system < rows[j].system })
	var b strings.Builder
	fmt.Fprintf(&b, "| system | jobs | workers killed | manager killed | lost | stuck | failed | started again | ran to the end twice | seconds |\n")
	fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %.1f |\n", r.system, r.jobs, r.workerKills,
			r.managerKills, r.lost, r.stuck, r.failed, r.startedAgain, r.endedTwice, r.seconds)
	}
	fmt.Fprintf(&b, "\nseed %d\n", seed)
	return b.String()
}
