package command

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/laboro-go/laboro/jetstream"
	"go.uber.org/zap/zapcore"
)

// status prints every batch, or the batches and jobs named, and the first
// jobs of them that failed, each with its command, exit status and
// standard error; -watch follows one batch until it is done, -failed lists
// every job that did not succeed. It returns exitFailed when a job named is
// unknown.
func status(args []string) int {
	c := newCommon("status", "[flags] [BATCH|ID…]",
		"Prints every batch, or the batches and jobs named, then the first jobs of those batches that failed, "+
			"each with its command, exit status and the end of its standard error. A batch's FAILED jobs are "+
			"those that failed, timed out or were killed; CANCELLED ones were cancelled. -watch follows one "+
			"batch until it is done; -failed lists every job that did not succeed.\n\n"+
			"Exit status: 0; 1 when a job named is unknown (with -watch: when a job of the batch did not "+
			"succeed, or the batch is unknown), or NATS or the service cannot be reached; 2 for a usage error; "+
			"130 when interrupted.")
	follow := c.fs.Bool("watch", false, "follow one batch until it is done, with progress on a terminal")
	unsuccessful := c.fs.Bool("failed", false, "list the jobs that did not succeed")
	asJSON := c.fs.Bool("json", false, "print the service's answer as JSON (batches, jobs, problems), for programs")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *follow && *asJSON {
		return c.usageError("-watch and -json do not go together")
	}
	if *follow && c.fs.NArg() != 1 {
		return c.usageError("-watch follows one batch: name it")
	}
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		if *follow {
			// A batch the service does not know would be waited for
			// forever; one it knows is followed to its end.
			reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: c.fs.Args()})
			if err != nil {
				return c.failed(ctx, "status", err)
			}
			if len(reply.Batches) == 0 {
				c.sayError("no batch " + c.fs.Arg(0) + " (laboro status lists them)")
				return exitFailed
			}
			return c.watch(ctx, cl, c.fs.Arg(0), 0)
		}
		req := jetstream.StatusRequest{Batches: c.fs.Args(), Unsuccessful: *unsuccessful}
		if !*unsuccessful && !*asJSON {
			// Why jobs failed, without knowing the flag; the answer for
			// programs (-json) stays as it was.
			req.Failures = shownFailures
		}
		reply, err := cl.Status(ctx, req)
		if err != nil {
			return c.failed(ctx, "status", err)
		}
		// The jobs listed are the failures of the batches, unless -failed:
		// they are shown apart, printFailures counting those not listed.
		var failures []jetstream.JobStatus
		if req.Failures > 0 {
			failures, reply.Jobs, reply.Truncated = reply.Jobs, nil, false
		}
		// The names that are no batch are job ids.
		var ids []string
		for _, a := range c.fs.Args() {
			if !slices.ContainsFunc(reply.Batches, func(b jetstream.BatchStatus) bool { return b.Batch == a }) {
				ids = append(ids, a)
			}
		}
		if len(ids) > 0 {
			jobs, err := cl.Status(ctx, jetstream.StatusRequest{IDs: ids})
			if err != nil {
				return c.failed(ctx, "status", err)
			}
			reply.Jobs = append(jobs.Jobs, reply.Jobs...)
		}
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(reply); err != nil {
				return c.failed(ctx, "status", err)
			}
			return c.unknownJobs(reply.Jobs)
		}
		if len(reply.Batches) > 0 || c.fs.NArg() == 0 {
			printBatches(os.Stdout, reply.Batches)
			if c.fs.NArg() == 0 {
				fmt.Printf("submitted, not yet read: %d; in the stream: %d, on workers: %d\n",
					reply.Unread, reply.InStream, reply.OnWorkers)
			}
		}
		printJobs(os.Stdout, reply.Jobs, reply.Truncated)
		printFailures(os.Stdout, reply.Batches, failures, c.fs.NArg() == 0)
		for _, p := range reply.Problems {
			c.logs.Tell(zapcore.WarnLevel, "laboro status", "problem: "+p)
		}
		return c.unknownJobs(reply.Jobs)
	})
}

// unknownJobs returns exitFailed if one of jobs is unknown to the
// service, else 0, saying on standard error which are (the table on
// standard output shows them as unknown too).
func (c *common) unknownJobs(jobs []jetstream.JobStatus) int {
	code := 0
	for _, j := range jobs {
		if j.State == jetstream.StateUnknown {
			c.logs.Tell(zapcore.ErrorLevel, "laboro", "no job "+j.ID+" (never submitted, or forgotten: serve keeps -keep jobs)")
			code = exitFailed
		}
	}
	return code
}
