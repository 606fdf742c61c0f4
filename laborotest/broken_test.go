package laborotest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The checks are worth what they catch: each broken implementation below
// is checked in a process of its own (this test binary, run again with
// brokenEnv set to its name), which must fail, in the check that names
// its defect and with the check's reason.

const brokenEnv = "LABOROTEST_BROKEN"

type brokenCase struct {
	name  string
	check func(t *testing.T)
	run   string   // the -test.run pattern below TestBroken: the one check to run
	want  []string // in the child's output
}

var brokenCases = []brokenCase{
	{
		name:  "queue that drops a job",
		check: func(t *testing.T) { laborotest.Queue(t, func() laboro.Queue { return &dropping{} }) },
		run:   "^snapshot_is_the_pop_order$",
		want:  []string{"--- FAIL: TestBroken/snapshot_is_the_pop_order", "Error:"},
	},
	{
		name:  "queue whose Snapshot is not the pop order",
		check: func(t *testing.T) { laborotest.Queue(t, func() laboro.Queue { return &reversedSnapshot{} }) },
		run:   "^snapshot_is_the_pop_order$",
		want:  []string{"--- FAIL: TestBroken/snapshot_is_the_pop_order", "Pop returns the jobs in Snapshot's order"},
	},
	{
		name:  "queue whose Remove reorders the others",
		check: func(t *testing.T) { laborotest.Queue(t, func() laboro.Queue { return &swapRemove{} }) },
		run:   "^remove$",
		want:  []string{"--- FAIL: TestBroken/remove", "Remove keeps the others' order"},
	},
	{
		name: "runner that calls every job a success",
		check: func(t *testing.T) {
			laborotest.Runner(t, harness(func(r laboro.Runner) laboro.Runner { return alwaysOK{r} }))
		},
		run:  "^each_job_ends_once$",
		want: []string{"--- FAIL: TestBroken/each_job_ends_once", "job many-4"},
	},
	{
		name: "runner that leaves a goroutine per job",
		check: func(t *testing.T) {
			laborotest.Runner(t, harness(func(r laboro.Runner) laboro.Runner { return leaky{r} }))
		},
		run:  "^each_job_ends_once$",
		want: []string{"--- FAIL: TestBroken/each_job_ends_once", "found unexpected goroutines", "laborotest_test.leaky.Run"},
	},
	{
		name: "runner that kills only the job's shell",
		check: func(t *testing.T) {
			laborotest.Runner(t, harness(func(laboro.Runner) laboro.Runner { return shellOnly{} }))
		},
		run:  "^close_kills$",
		want: []string{"--- FAIL: TestBroken/close_kills", "of the job still runs"},
	},
}

func TestChecksCatchBrokenImplementations(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("a child of this test")
	}
	for _, bc := range brokenCases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestBroken$/"+bc.run, "-test.v", "-test.count", "1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+bc.name)
			// Its own process group: a process that a broken runner left
			// behind goes with the group once the child has ended.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out, err := cmd.CombinedOutput()
			if cmd.Process != nil {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the check passed a %s: %v\n%s", bc.name, err, out)
			for _, w := range bc.want {
				assert.Contains(t, string(out), w)
			}
		})
	}
}

// TestBroken runs one broken case's check, in a child process of
// TestChecksCatchBrokenImplementations.
func TestBroken(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("run by TestChecksCatchBrokenImplementations")
	}
	i := slices.IndexFunc(brokenCases, func(bc brokenCase) bool { return bc.name == name })
	require.GreaterOrEqual(t, i, 0, "no broken case %q", name)
	brokenCases[i].check(t)
}

// harness checks the process runner, as wrap changes it.
func harness(wrap func(laboro.Runner) laboro.Runner) laborotest.Harness {
	return laborotest.Harness{
		Start: func(t *testing.T) laborotest.System {
			return laborotest.System{Runner: wrap(&laboro.ProcessRunner{Dir: t.TempDir()})}
		},
		Job: func(id, script string) laboro.Job { return laboro.Job{ID: id, Script: script} },
	}
}

// dropping loses the sixth job pushed.
type dropping struct {
	laboro.FIFO
	pushed int
}

func (q *dropping) Push(h *laboro.Handle) {
	if q.pushed++; q.pushed != 6 {
		q.FIFO.Push(h)
	}
}

// reversedSnapshot lists its jobs backwards.
type reversedSnapshot struct{ laboro.FIFO }

func (q *reversedSnapshot) Snapshot() []*laboro.Handle {
	s := q.FIFO.Snapshot()
	slices.Reverse(s)
	return s
}

// swapRemove fills a removed job's place with its last job.
type swapRemove struct{ hs []*laboro.Handle }

func (q *swapRemove) Push(h *laboro.Handle) { q.hs = append(q.hs, h) }
func (q *swapRemove) Len() int              { return len(q.hs) }
func (q *swapRemove) Snapshot() []*laboro.Handle {
	return slices.Clone(q.hs)
}

func (q *swapRemove) Pop() *laboro.Handle {
	if len(q.hs) == 0 {
		return nil
	}
	h := q.hs[0]
	q.hs = q.hs[1:]
	return h
}

func (q *swapRemove) Remove(id string) *laboro.Handle {
	i := slices.IndexFunc(q.hs, func(h *laboro.Handle) bool { return h.ID() == id })
	if i < 0 {
		return nil
	}
	h, last := q.hs[i], len(q.hs)-1
	q.hs[i] = q.hs[last]
	q.hs = q.hs[:last]
	return h
}

// alwaysOK reports every job as succeeded.
type alwaysOK struct{ laboro.Runner }

func (r alwaysOK) Run(ctx context.Context, job laboro.Job) laboro.Result {
	res := r.Runner.Run(ctx, job)
	res.Status, res.Err, res.ExitCode = laboro.StatusSucceeded, nil, 0
	return res
}

// leaky leaves a goroutine behind for every job it runs.
type leaky struct{ laboro.Runner }

var forever = make(chan struct{})

func (r leaky) Run(ctx context.Context, job laboro.Job) laboro.Result {
	go func() { <-forever }()
	return r.Runner.Run(ctx, job)
}

// shellOnly runs a job's script with sh, and on the end of its context
// kills that shell and nothing else: what the shell started lives on.
type shellOnly struct{}

func (shellOnly) Run(ctx context.Context, job laboro.Job) laboro.Result {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", job.Script)
	res := laboro.Result{ID: job.ID, Status: laboro.StatusSucceeded, ExitCode: -1}
	if res.Err = cmd.Run(); res.Err != nil {
		res.Status = laboro.StatusFailed
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	return res
}
