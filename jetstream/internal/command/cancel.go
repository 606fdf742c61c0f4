package command

import (
	"context"
	"os"

	"github.com/laboro-go/laboro/jetstream"
)

// cancel has the service cancel jobs: a waiting one never runs, a running
// one is killed by its worker. It prints the jobs' states after the
// request, and returns exitFailed when a job is unknown or could not be
// cancelled.
func cancel(args []string) int {
	c := newCommon("cancel", "[flags] ID…",
		"Has the service cancel jobs: one waiting never runs, one running is killed by its worker, and both "+
			"end cancelled. It prints the jobs' states after the request.\n\n"+
			"Exit status: 0; 1 when a job is unknown or could not be cancelled, or NATS or the service cannot be "+
			"reached; 2 for a usage error; 130 when interrupted.")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.fs.NArg() == 0 {
		return c.usageError("name the jobs to cancel")
	}
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		reply, err := cl.Cancel(ctx, c.fs.Args()...)
		printJobs(os.Stdout, reply.Jobs, false)
		if err != nil {
			return c.failed(ctx, "cancel", err)
		}
		return c.unknownJobs(reply.Jobs)
	})
}
