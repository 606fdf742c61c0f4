package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/runexp"
	"go.uber.org/zap"
)

// serve serves every job of the folder not yet done, writes each result,
// and returns once every job has a result and every runner has said FINO
// ANKAU (or left).
// The jobs with the Manager at once, and those queued before them: the
// runners of a manager seldom have more workers than maxOut between them.
const (
	maxOut    = 256
	maxQueued = 1024
)

// The serving record goes to serving, which writes it whatever -log says:
// with a port of the system's choice, it is how the user learns the port.
func serve(ctx context.Context, m *runexp.Manager, folder runexp.Folder, addr string, sorted bool, goodbye time.Duration, progress *cli.Progress, serving *zap.Logger) error {
	log := m.Logger
	unlock, err := folder.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	todo, _, skipped, err := folder.Jobs()
	if err != nil {
		return err
	}
	for _, err := range skipped {
		log.Warn("skipped", zap.Error(err))
	}
	if !sorted { // as the reference manager does
		rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	}
	// Each job file is read as its job is submitted (Batch.Prepare): a
	// batch's scripts are in memory only while their jobs are.
	jobs := make([]laboro.Job, len(todo))
	files := make(map[string]runexp.FolderJob, len(todo)) // by job name
	for i, j := range todo {
		jobs[i] = laboro.Job{ID: j.Name}
		files[j.Name] = j
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	serving.Info("serving", zap.String("addr", ln.Addr().String()), zap.String("runs", folder.Runs))
	// Up to maxOut jobs are with the Manager at once (handed to runners,
	// or in line for the next PETO), each a goroutine's wait; up to
	// maxQueued more wait in the Executor's buffer, and the batch driver
	// submits the rest as room is made.
	n := max(1, len(jobs))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithBufferSize(min(n, maxQueued)), laboro.WithPoolSize(min(n, maxOut)),
		laboro.WithConcurrency(min(n, maxOut)), laboro.WithLogger(log))
	if err != nil {
		ln.Close()
		return err
	}
	defer ex.Close()
	serveCtx, stopServing := context.WithCancelCause(ctx)
	served := make(chan error, 1)
	go func() { served <- m.Serve(serveCtx, ln) }()
	defer func() { stopServing(nil); <-served }()

	ended := make(map[string]bool, len(jobs)) // OnResult's, one at a time
	batch := cli.Batch{
		Progress: progress,
		OnResult: func(job laboro.Job, res laboro.Result) error {
			ended[job.ID] = true
			return folder.Save(job.ID, res.Output)
		},
		Submitted: func() { m.Finish(ex) },
		Workers:   func() int { return m.Stats().Runners },
		NoWorker:  "no runner is connected: the jobs wait for one (start runexp-runner N -c " + ln.Addr().String() + ")",
		Out:       func() (int, int) { st := m.Stats(); return st.Out, st.Pending },
		Command: func(job laboro.Job) string {
			return files[job.ID].Path + " (report in " + folder.ResultPath(job.ID) + ")"
		},
		Prepare: func(job laboro.Job) (laboro.Job, error) { return folder.Load(files[job.ID]) },
	}
	sum, err := batch.Run(ctx, ex, jobs)
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted: what was done, and what a restart resumes.
			sum.Write(os.Stdout)
			writeLeft(os.Stdout, jobs, ended)
		}
		return err
	}
	// Every runner must then say FINO ANKAU, or leave. One with nothing
	// left to run asks (PETO) within its hold after ATENDI (10 s) and is
	// told FINO; one silent past -goodbye is let go: nothing of it is
	// awaited, and it must not keep the manager from exiting.
	bye := time.NewTimer(goodbye)
	defer bye.Stop()
	select {
	case <-m.Idle():
	case <-bye.C:
		log.Warn("runners silent since the last job let go (-goodbye)", zap.Int("runners", m.Stats().Runners), zap.Duration("goodbye", goodbye))
		stopServing(errSilent)
	case <-ctx.Done():
		sum.Write(os.Stdout) // every job ended: interrupted while runners said goodbye
		return ctx.Err()
	}
	sum.Write(os.Stdout)
	return sum.Err()
}

// errSilent is why a runner silent after the last job was let go.
var errSilent = errors.New("every job has ended, and the runner did not say goodbye (FINO ANKAU) within -goodbye")

// maxLeftListed bounds the jobs not done an interrupted manager names.
const maxLeftListed = 100

// writeLeft names the jobs that have not ended, which a manager started
// again on the folder runs: the first maxLeftListed, in the order served.
func writeLeft(w io.Writer, jobs []laboro.Job, ended map[string]bool) {
	var left []string
	n := 0
	for _, j := range jobs {
		if !ended[j.ID] {
			if n++; n <= maxLeftListed {
				left = append(left, j.ID)
			}
		}
	}
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "not done, run by a manager started again on the folder: %s", strings.Join(left, ", "))
	if n > maxLeftListed {
		fmt.Fprintf(w, " ... and %d more (--print-jobs lists them all)", n-maxLeftListed)
	}
	fmt.Fprintln(w)
}

// list prints the jobs not yet done, one name per line.
func list(folder runexp.Folder) error {
	todo, _, skipped, err := folder.Jobs()
	for _, e := range skipped {
		fmt.Fprintln(os.Stderr, e)
	}
	if err != nil {
		return err
	}
	for _, j := range todo {
		fmt.Println(j.Name + string(j.Type))
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
