package command

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/laboro-go/laboro/jetstream"
)

// status prints every batch, or the batches and jobs named; -watch follows
// one batch until it is done, -failed lists the jobs that did not succeed.
// It returns exitFailed when a job named is unknown.
func status(args []string) int {
	c := newCommon("status", "[flags] [BATCH|ID…]")
	follow := c.fs.Bool("watch", false, "follow one batch until it is done, with progress on a terminal")
	unsuccessful := c.fs.Bool("failed", false, "list the jobs that did not succeed")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *follow && c.fs.NArg() != 1 {
		return c.usageError("-watch follows one batch: name it")
	}
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		if *follow {
			return watch(ctx, cl, c.fs.Arg(0), 0)
		}
		reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: c.fs.Args(), Unsuccessful: *unsuccessful})
		if err != nil {
			return failed(ctx, "status", err)
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
				return failed(ctx, "status", err)
			}
			reply.Jobs = append(jobs.Jobs, reply.Jobs...)
		}
		if len(reply.Batches) > 0 || c.fs.NArg() == 0 {
			printBatches(os.Stdout, reply.Batches)
			if c.fs.NArg() == 0 {
				fmt.Printf("in the stream: %d, on workers: %d\n", reply.InStream, reply.OnWorkers)
			}
		}
		printJobs(os.Stdout, reply.Jobs, reply.Truncated)
		for _, p := range reply.Problems {
			fmt.Fprintln(os.Stderr, "laboro status: problem:", p)
		}
		return unknownJobs(reply.Jobs)
	})
}

// unknownJobs returns exitFailed if one of jobs is unknown to the
// service, else 0.
func unknownJobs(jobs []jetstream.JobStatus) int {
	for _, j := range jobs {
		if j.State == jetstream.StateUnknown {
			return exitFailed
		}
	}
	return 0
}
