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
)

// The batch driver of run, submit -wait and status -watch: follow the
// jobs to their end, then report and give the exit status.

// watchInterval is how often the batch driver asks how far a batch is.
const watchInterval = 200 * time.Millisecond

// noWorkerNotice is how long a batch may wait with no job taken before the
// user is told that no worker took one.
const noWorkerNotice = 5 * time.Second

// watch follows batch until n of its jobs (all, for n ≤ 0) ended, with a
// progress bar on a terminal, then prints a summary and the jobs that did
// not succeed. It returns exitFailed if any did not.
func watch(ctx context.Context, cl *jetstream.Client, batch string, n int) int {
	var bar progress
	defer bar.close()
	start, said := time.Now(), false
	show := func(b jetstream.BatchStatus) {
		bar.show(cli.Counts{Total: max(n, b.Jobs), Queued: b.Waiting, Running: b.Dispatched,
			Succeeded: b.Succeeded, Failed: b.Failed})
		if said || b.Done() > 0 || time.Since(start) < noWorkerNotice {
			return
		}
		// Nothing done for a while: say so if no worker took a job.
		if reply, err := cl.Status(ctx, jetstream.StatusRequest{}); err == nil && reply.OnWorkers == 0 {
			said = true
			bar.note(fmt.Sprintf("laboro: no worker has taken a job for %v (is `laboro worker` running, or `laboro serve` with -workers?)",
				noWorkerNotice))
		}
	}
	if _, err := cl.Status(ctx, jetstream.StatusRequest{Batches: []string{batch}}); errors.Is(err, jetstream.ErrNoService) {
		fmt.Fprintln(os.Stderr, "laboro: no service is running; the jobs wait for `laboro serve`")
	}
	b, err := cl.Wait(ctx, batch, n, watchInterval, show)
	if err != nil {
		return failed(ctx, "wait", err)
	}
	fmt.Printf("batch %s: %d jobs, %d succeeded, %d failed\n", b.Batch, b.Jobs, b.Succeeded, b.Failed)
	if b.Failed == 0 {
		return 0
	}
	reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: []string{batch}, Unsuccessful: true})
	if err != nil {
		return failed(ctx, "status", err)
	}
	printJobs(os.Stdout, reply.Jobs, reply.Truncated)
	return exitFailed
}

// printResult writes res's output to standard output and, when it did not
// succeed, a line to standard error. It returns the exit status for it:
// with exitCode, the job's own when it has one, else 0 or exitFailed.
func printResult(res laboro.Result, exitCode bool, command string) int {
	if res.Output != nil {
		_, err := res.Output.WriteTo(os.Stdout)
		res.Output.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "laboro:", err)
			return exitFailed
		}
	}
	if res.Status == laboro.StatusSucceeded {
		return 0
	}
	fmt.Fprintf(os.Stderr, "laboro: job %s %s: %v\n", res.ID, res.Status, res.Err)
	if command != "" {
		fmt.Fprintf(os.Stderr, "  command: %s\n", command)
	}
	if len(res.Stderr) > 0 {
		fmt.Fprintln(os.Stderr, "  standard error (its end):")
		printIndented(os.Stderr, string(res.Stderr))
	}
	if exitCode && res.ExitCode > 0 {
		return res.ExitCode
	}
	return exitFailed
}
