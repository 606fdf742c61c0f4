package command

import (
	"context"
	"fmt"
	"os"

	"github.com/laboro-go/laboro/jetstream"
	"go.uber.org/zap"
)

// submit stores jobs for the service and prints the job's id, or the
// batch's name; with -wait it follows them as run does.
func submit(args []string) int {
	c := newCommon("submit", "[flags] (-f FILE | COMMAND…)")
	jf := c.jobFlags()
	batch := c.fs.String("batch", "", "batch name (default: a new one)")
	id := c.fs.String("id", "", "id of the job (COMMAND only; default: BATCH-N)")
	wait := c.fs.Bool("wait", false, "wait for the jobs; print a single job's output")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *id != "" && *jf.file != "" {
		return c.usageError("-id names one job: it cannot go with -f")
	}
	jobs, code, ok := c.jobs(jf)
	if !ok {
		return code
	}
	jobs[0].ID = *id
	if *batch == "" {
		*batch = jetstream.NewBatch()
	}
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		if *id != "" {
			// An id submitted before keeps its first submission: say so,
			// rather than hand back an old job's output as this one's.
			if reply, err := cl.Status(ctx, jetstream.StatusRequest{IDs: []string{*id}}); err == nil &&
				len(reply.Jobs) == 1 && reply.Jobs[0].State != jetstream.StateUnknown {
				j := reply.Jobs[0]
				fmt.Fprintf(os.Stderr, "laboro submit: warning: job %s was submitted before (%s, %s): that submission stands, this one is not run\n",
					j.ID, oneLine(j.Command, 60), j.State)
			}
		}
		ids, err := cl.Submit(ctx, *batch, jobs)
		if err != nil {
			return failed(ctx, "submit", err)
		}
		single := *jf.file == ""
		c.log.Debug("submitted", zap.String("batch", *batch), zap.Int("jobs", len(ids)))
		if !*wait {
			if single {
				fmt.Println(ids[0])
			} else {
				fmt.Println(*batch)
			}
			return 0
		}
		if single {
			res, err := cl.Result(ctx, ids[0])
			if err != nil {
				return failed(ctx, "submit", err)
			}
			return printResult(res, true, jobs[0].Script)
		}
		// A batch is followed by its counts: its jobs may go.
		n := len(ids)
		jobs, ids = nil, nil
		return watch(ctx, cl, *batch, n)
	})
}
