package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The batch driver of run, submit -wait and status -watch: follow the
// jobs to their end, then report and give the exit status.

// watchInterval is how often the batch driver asks how far a batch is.
const watchInterval = 200 * time.Millisecond

// noWorkerNotice is how long a batch may wait with no job taken before the
// user is told that no worker took one.
const noWorkerNotice = 5 * time.Second

// noWorker says, once, that no worker has taken a job, when jobs have
// waited noWorkerNotice and none of them ended: they could wait for ever
// without a word. Its zero value is not ready: see newNoWorker.
type noWorker struct {
	start time.Time
	say   func(text string)
	said  bool
}

// newNoWorker returns a noWorker whose wait starts now, and that says its
// note with say.
func newNoWorker(say func(text string)) *noWorker {
	return &noWorker{start: time.Now(), say: say}
}

// due reports whether to ask the service if a worker has a job: the jobs
// waited noWorkerNotice, none of them ended, and nothing was said yet.
func (w *noWorker) due(ended bool) bool {
	return !w.said && !ended && time.Since(w.start) >= noWorkerNotice
}

// onWorkers is the service's count of the jobs on workers (of every
// batch): none, and the note is said.
func (w *noWorker) onWorkers(n int) {
	if n == 0 && !w.said {
		w.said = true
		w.say(fmt.Sprintf("laboro: no worker has taken a job for %v (is `laboro worker` running, or `laboro serve` with -workers?)",
			noWorkerNotice))
	}
}

// noService says at once, with say, when no service answers req: the
// jobs wait for one.
func noService(ctx context.Context, cl *jetstream.Client, req jetstream.StatusRequest, say func(text string)) {
	if _, err := cl.Status(ctx, req); errors.Is(err, jetstream.ErrNoService) {
		say("laboro: no service is running; the jobs wait for `laboro serve`")
	}
}

// note says text, a note on jobs that wait, on standard error: as a line,
// or with a JSON log as a warning whose message is text (as the progress
// of a batch says it: see cli.Progress.Note).
func (c *common) note(text string) { c.logs.Tell(zapcore.WarnLevel, "", text) }

// watch follows batch until n of its jobs (all, for n ≤ 0) ended, with
// its progress on standard error (see progress), then prints a summary and
// the jobs that did not succeed. It returns exitFailed if any did not.
func (c *common) watch(ctx context.Context, cl *jetstream.Client, batch string, n int) int {
	bar := progress{logs: c.logs}
	defer bar.close()
	idle := newNoWorker(bar.note)
	show := func(b jetstream.BatchStatus) {
		// Failed counts the cancelled jobs too: shown apart, as the
		// summary shows them.
		bar.show(cli.Counts{Total: max(n, b.Jobs+b.Unread), Queued: b.Waiting + b.Unread, Running: b.Dispatched,
			Succeeded: b.Succeeded, Failed: b.Failed, Cancelled: b.Cancelled})
		if !idle.due(b.Done() > 0) {
			return
		}
		if reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: []string{batch}}); err == nil {
			idle.onWorkers(reply.OnWorkers)
		}
	}
	noService(ctx, cl, jetstream.StatusRequest{Batches: []string{batch}}, bar.note)
	b, err := cl.Wait(ctx, batch, n, watchInterval, show)
	if err != nil {
		return c.failed(ctx, "wait", err)
	}
	fmt.Printf("batch %s: %s, %d succeeded, %s\n", b.Batch, plural(b.Jobs, "job"), b.Succeeded, batchSummary(b).FailedText())
	if b.Failed == 0 {
		return 0
	}
	reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: []string{batch}, Unsuccessful: true})
	if err != nil {
		return c.failed(ctx, "status", err)
	}
	printJobs(os.Stdout, reply.Jobs, reply.Truncated)
	return exitFailed
}

// result waits for job id's result (see jetstream.Client.Result), saying
// meanwhile on standard error what watch says of a batch: that no service
// runs, or that no worker has taken the job.
func (c *common) result(ctx context.Context, cl *jetstream.Client, id string) (laboro.Result, error) {
	req := jetstream.StatusRequest{IDs: []string{id}}
	noService(ctx, cl, req, c.note)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		idle := newNoWorker(c.note)
		tick := time.NewTicker(watchInterval)
		defer tick.Stop()
		for !idle.said {
			select {
			case <-ctx.Done(): // the result came, or the user gave up
				return
			case <-tick.C:
			}
			if !idle.due(false) {
				continue // too soon to ask
			}
			reply, err := cl.Status(ctx, req)
			if err != nil || len(reply.Jobs) != 1 {
				continue
			}
			// Waiting, or dispatched to the workers' stream: not ended.
			state := reply.Jobs[0].State
			if state == jetstream.StateWaiting || state == jetstream.StateDispatched {
				idle.onWorkers(reply.OnWorkers)
			}
		}
	}()
	res, err := cl.Result(ctx, id)
	stop()
	<-asked // no note after the result
	return res, err
}

// printResult writes res's output to standard output and, when it did not
// succeed, a line to standard error: how it ended (after timeout, its
// limit, when it timed out and timeout is known), its command, the end of
// its standard error; with a JSON log, a warning of the logger "summary"
// instead, with the fields of run's summary for a job that failed (id,
// command, status, exit, error, stderr). It returns the exit status for
// it: with exitCode, the job's own when it has one, else 0 or exitFailed.
func (c *common) printResult(res laboro.Result, exitCode bool, command string, timeout time.Duration) int {
	if res.Output != nil {
		_, err := res.Output.WriteTo(os.Stdout)
		res.Output.Close()
		if err != nil {
			c.logs.Tell(zapcore.ErrorLevel, "laboro", err.Error())
			return exitFailed
		}
	}
	if res.Status == laboro.StatusSucceeded {
		return 0
	}
	code := exitFailed
	if exitCode && res.ExitCode > 0 {
		code = res.ExitCode
	}
	if c.logs.Format() == "json" {
		c.recordResult(res, command, timeout)
		return code
	}
	if res.Status == laboro.StatusTimedOut && timeout > 0 {
		fmt.Fprintf(os.Stderr, "laboro: job %s %s\n", res.ID, timedOut(timeout))
	} else {
		fmt.Fprintf(os.Stderr, "laboro: job %s %s: %v\n", res.ID, res.Status, res.Err)
	}
	if command != "" {
		fmt.Fprintf(os.Stderr, "  command: %s\n", command)
	}
	if len(res.Stderr) > 0 {
		fmt.Fprintln(os.Stderr, "  standard error (its end):")
		printIndented(os.Stderr, string(res.Stderr))
	}
	return code
}

// recordResult is printResult's report of a job that did not succeed with
// a JSON log: one record, standard error staying one object a line.
func (c *common) recordResult(res laboro.Result, command string, timeout time.Duration) {
	status := res.Status.String()
	if res.Status == laboro.StatusTimedOut && timeout > 0 {
		status = timedOut(timeout)
	}
	msg := "job " + res.ID + " " + status
	fields := []zap.Field{zap.String("id", res.ID), zap.String("status", status)}
	if command != "" {
		fields = append(fields, zap.String("command", command))
	}
	if res.ExitCode >= 0 {
		fields = append(fields, zap.Int("exit", res.ExitCode))
	}
	// A time-out says it all: its error would say it again.
	if res.Err != nil && !(res.Status == laboro.StatusTimedOut && timeout > 0) {
		msg += ": " + res.Err.Error()
		fields = append(fields, zap.String("error", res.Err.Error()))
	}
	if len(res.Stderr) > 0 {
		fields = append(fields, zap.ByteString("stderr", res.Stderr))
	}
	c.logs.Records().Named("summary").Warn(msg, fields...)
}
