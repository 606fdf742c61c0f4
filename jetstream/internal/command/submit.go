package command

import (
	"context"
	"fmt"
	"strings"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// submit stores jobs for the service and prints the job's id, or the
// batch's name; with -wait it follows them as run does.
func submit(args []string) int {
	c := newCommon("submit", "[flags] (-f FILE | COMMAND…)",
		"Stores jobs for the service (`laboro serve`) to run on its workers: a shell command line, the COMMAND "+
			"words joined by spaces, or each line of -f FILE (- for standard input) that is not blank or a "+
			"comment (#). It prints the job's id, or the batch's name, on standard output. With -wait it waits "+
			"for them: a single job's output and exit status, as run gives them; for a batch, its progress on "+
			"standard error, then on standard output its summary and the jobs that did not succeed (the "+
			"batch's outputs stay with the service: laboro output).\n\n"+
			"Exit status: 0 once the jobs are stored; with -wait, a single job's own (1 when it did not exit by "+
			"itself), or for a batch 0 when every job succeeded and 1 when one did not; 1 when NATS or the "+
			"service cannot be reached; 2 for a usage error; 130 when interrupted.")
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
	// Checked here, as the service would check them, before connecting.
	for _, f := range []struct{ name, value string }{{"batch", *batch}, {"id", *id}} {
		if f.value == "" {
			continue // the default, valid
		}
		if msg := checkName(f.name, f.value); msg != "" {
			return c.usageError("%s", msg)
		}
	}
	if code, ok := c.checkJobs(jf); !ok {
		return code
	}
	if *batch == "" {
		*batch = jetstream.NewBatch()
	}
	if *jf.file != "" {
		return c.submitFile(jf, *batch, *wait)
	}
	job := jf.job(strings.Join(c.fs.Args(), " "))
	job.ID = *id
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		if *id != "" {
			// An id submitted before keeps its first submission: say so,
			// rather than hand back an old job's output as this one's.
			if reply, err := cl.Status(ctx, jetstream.StatusRequest{IDs: []string{*id}}); err == nil &&
				len(reply.Jobs) == 1 && reply.Jobs[0].State != jetstream.StateUnknown {
				j := reply.Jobs[0]
				c.logs.Tell(zapcore.WarnLevel, "laboro submit",
					fmt.Sprintf("warning: job %s was submitted before (%s, %s): that submission stands, this one is not run",
						j.ID, oneLine(j.Command, 60), j.State))
			}
		}
		ids, err := cl.Submit(ctx, *batch, []laboro.Job{job})
		if err != nil {
			return c.failed(ctx, "submit", err)
		}
		c.log.Debug("submitted", zap.String("batch", *batch), zap.String("job", ids[0]))
		if !*wait {
			fmt.Println(ids[0])
			return 0
		}
		res, err := c.result(ctx, cl, ids[0])
		if err != nil {
			if ctx.Err() != nil {
				// The job is stored: it runs whether we wait or not.
				c.logs.Tell(zapcore.ErrorLevel, "laboro",
					fmt.Sprintf("interrupted; job %s runs on (laboro output %s waits for it, laboro cancel %s stops it)",
						ids[0], ids[0], ids[0]))
				return exitInterrupted
			}
			return c.failed(ctx, "submit", err)
		}
		return c.printResult(res, true, job.Script, job.Timeout)
	})
}

// submitFile submits the jobs of a file (-f) as batch, reading them as it
// goes: however many, they are not held in memory (see
// jetstream.Client.SubmitAll). It prints the batch's name, or, with wait,
// follows it as run does.
func (c *common) submitFile(jf jobFlags, batch string, wait bool) int {
	file, err := openJobFile(*jf.file)
	if err != nil {
		c.sayError(err.Error())
		return exitFailed
	}
	defer file.Close()
	if file.total == 0 {
		c.sayError("no jobs in " + *jf.file)
		return exitFailed
	}
	return c.withClient(func(ctx context.Context, cl *jetstream.Client) int {
		// Read ahead, so that Ctrl-C is not held up by a pipe's slow writer.
		n, err := cl.SubmitAll(ctx, batch, cli.ReadAhead(ctx, file.jobs(jf)))
		switch {
		case err != nil:
			return c.failed(ctx, "submit", err)
		case n == 0: // a pipe that brought none
			c.sayError("no jobs in " + *jf.file)
			return exitFailed
		}
		c.log.Debug("submitted", zap.String("batch", batch), zap.Int("jobs", n))
		if !wait {
			fmt.Println(batch)
			return 0
		}
		code := c.watch(ctx, cl, batch, n)
		if ctx.Err() != nil {
			c.logs.Tell(zapcore.InfoLevel, "laboro", fmt.Sprintf("batch %s runs on (laboro status -watch %s follows it)", batch, batch))
		}
		return code
	})
}
