package command

import (
	"context"
	"fmt"

	"github.com/laboro-go/laboro/jetstream"
)

// output prints the output of finished jobs, waiting for those still
// running; it refuses ids the service does not know, which would be
// waited for forever.
func output(args []string) int {
	c := newCommon("output", "[flags] ID…",
		"Prints the output of finished jobs, waiting for those still running; it refuses ids the service does "+
			"not know, which would be waited for forever.\n\n"+
			"Exit status: for one job, its own (1 when it did not exit by itself); for several, 0 when every one "+
			"succeeded, else 1; 1 for an unknown job, or when NATS or the service cannot be reached; 2 for a "+
			"usage error; 130 when interrupted.")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.fs.NArg() == 0 {
		return c.usageError("name the jobs whose output to print")
	}
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		commands := map[string]string{}
		if reply, err := cl.Status(ctx, jetstream.StatusRequest{IDs: c.fs.Args()}); err == nil {
			for _, j := range reply.Jobs {
				if j.State == jetstream.StateUnknown {
					c.sayError("no job " + j.ID)
					return exitFailed
				}
				commands[j.ID] = j.Command
			}
		}
		code := 0
		for i, id := range c.fs.Args() {
			res, err := cl.Result(ctx, id)
			if err != nil {
				return c.failed(ctx, "output", err)
			}
			if c.fs.NArg() > 1 { // a heading for each, as tail and head print
				if i > 0 {
					fmt.Println()
				}
				fmt.Printf("==> %s <==\n", id)
			}
			if got := c.printResult(res, c.fs.NArg() == 1, commands[id], 0); got != 0 {
				code = got // one job's own; for several, 1 (printResult's then)
			}
		}
		return code
	})
}
