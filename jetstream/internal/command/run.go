package command

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/internal/web"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// runDoc is run's help. Its exit statuses are those runJobs returns:
// printResult's for a single COMMAND, the Summary's for a batch, failed's
// on an error or an interrupt.
const runDoc = "Runs the jobs on this machine, -workers at a time, and waits for them: no server, " +
	"no set-up. A job is a shell command line: the COMMAND words joined by spaces, or each line of -f FILE " +
	"(- for standard input) that is not blank or a comment (#). " +
	"Each job's output goes to standard output, whole, as the job ends (a single COMMAND's as it is). " +
	"On standard error a batch shows its progress, then a summary line and the jobs that did not succeed, " +
	"in the order of the file, with the end of their standard error; the standard error of a job that " +
	"succeeded is not shown (-results keeps every job's); with -log-format json, the progress and the summary " +
	"are log records. Ctrl-C kills the running jobs and stops.\n\n" +
	"Exit status: for a single COMMAND, its own (1 when it did not exit by itself: timed out, killed, " +
	"not started); for a batch, 0 when every job succeeded, 1 when one did not; 1 when the jobs cannot be " +
	"run (a file that cannot be read); 2 for a usage error; 130 when interrupted."

// consolePool is the pool of a run with a console, whose concurrency level
// the user may raise while it runs.
const consolePool = 256

// runAhead is how many jobs a batch keeps in the Executor for each job it
// runs at once: the jobs its workers take while the ends of others wait to
// be told (cli.Ends; up to 10 ms while busy), for jobs that take a sixth
// of a millisecond or more.
const runAhead = 64

// runJobs runs jobs on this machine, -workers at a time, through the core
// Executor: nothing to set up, nothing kept but what the user asks for
// (-results, -joblog). A single COMMAND prints its output and returns its
// exit status. A batch prints each job's output on standard output as the
// job ends, whole (never mixed with another job's), as GNU parallel does;
// on standard error it shows progress, then a summary and the jobs that
// did not succeed.
func runJobs(args []string) int {
	c := newCommon("run", "[flags] (-f FILE | COMMAND…)", runDoc)
	jf := c.jobFlags()
	workers := c.fs.Int("workers", runtime.NumCPU(), "jobs run at once")
	var o runOptions
	c.fs.StringVar(&o.results, "results", "", "keep each job's stdout, stderr, exit status and command in DIR/<seq>/")
	c.fs.StringVar(&o.joblog, "joblog", "", "append a line per job that ended to FILE, tab-separated as GNU parallel writes it: Seq Host Starttime JobRuntime Send Receive Exitval Signal Command (a job killed by a halt or an interrupt is left out: -resume runs it again)")
	c.fs.BoolVar(&o.resume, "resume", false, "with -joblog: skip the jobs the log lists, run the rest")
	c.fs.BoolVar(&o.resumeFailed, "resume-failed", false, "with -joblog: skip the jobs the log lists as succeeded, run the rest (the failed ones again)")
	c.fs.IntVar(&o.retries, "retries", 1, "run a job that fails up to N times in all")
	halt := c.fs.String("halt", "", "stop after failures: now,fail=N (kill the running jobs) or soon,fail=N (let them finish); the jobs not started are not run (-resume runs them)")
	httpAddr := c.fs.String("http", "", "serve a live web console and /metrics on this HOST:PORT, behind laboro.token (loopback unless -http-public)")
	httpPublic := c.fs.Bool("http-public", false, "let -http listen beyond this machine")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *httpAddr != "" {
		if err := web.CheckAddr(*httpAddr, *httpPublic); err != nil {
			return c.usageError("%v", err)
		}
	}
	var err error
	if o.halt, err = parseHalt(*halt); err != nil {
		return c.usageError("-halt %q: %v", *halt, err)
	}
	switch {
	case *workers <= 0 || *workers > cli.MaxAtOnce:
		return c.usageError("-workers %d: must be from 1 to %d", *workers, cli.MaxAtOnce)
	case o.retries < 1:
		return c.usageError("-retries %d: must be at least 1", o.retries)
	case (o.resume || o.resumeFailed) && o.joblog == "":
		return c.usageError("-resume and -resume-failed need -joblog FILE")
	case o.resume && o.resumeFailed:
		return c.usageError("-resume and -resume-failed do not go together")
	}
	if code, ok := c.checkJobs(jf); !ok {
		return code
	}
	// A batch's jobs are read as they are submitted: however many lines
	// come (a generator piped in), only those in the Executor are in
	// memory.
	var file *jobFile
	if *jf.file != "" {
		var err error
		if file, err = openJobFile(*jf.file); err != nil {
			c.sayError(err.Error())
			return exitFailed
		}
		defer file.Close()
		if file.total == 0 {
			return c.nothingToRun(*jf.file, false)
		}
	}
	var done map[string]bool // the jobs the job log lists, by sequence number
	if o.resume || o.resumeFailed {
		var err error
		if done, err = readJobLog(o.joblog, o.resumeFailed); err != nil {
			c.sayError(err.Error())
			return exitFailed
		}
	}
	total := -1
	if file != nil && file.total >= 0 {
		total = file.total - countDone(done, file.total)
		if total == 0 {
			return c.nothingToRun(*jf.file, true)
		}
	}
	// The user's token leaves the environment: no job sees it. The console
	// needs it (made at the first start if need be, as serve does).
	var console *web.Web
	var consoleLn net.Listener
	tokenFrom := "$LABORO_TOKEN"
	if *httpAddr != "" {
		tok, path, err := secret.Ensure("laboro", "LABORO_TOKEN")
		if err != nil {
			c.sayError("the console's token: " + err.Error())
			return exitFailed
		}
		if path != "" {
			tokenFrom = path
		}
		host, _, _ := net.SplitHostPort(*httpAddr) // checked by web.CheckAddr
		if err := secret.Guard(host, tok, tokenFrom); err != nil {
			c.sayError("the console: " + err.Error())
			return exitFailed
		}
		if consoleLn, err = web.Listen(*httpAddr); err != nil {
			c.sayError(err.Error())
			return exitFailed
		}
		defer consoleLn.Close()
		console = web.New(tok, nil)
	} else {
		secret.FromEnv("LABORO_TOKEN")
	}
	defer c.log.Sync()
	cli.SpareProcessor(*workers)
	ctx, stop := interruptible()
	defer stop()
	single := file == nil
	if single && done["1"] {
		return c.nothingToRun("", true)
	}
	outDir, err := os.MkdirTemp("", "laboro-run-")
	if err != nil {
		c.sayError(err.Error())
		return exitFailed
	}
	forget := laboro.RemoveAtExit(outDir) // however this process ends
	defer func() { os.RemoveAll(outDir); forget() }()
	pr := &laboro.ProcessRunner{Dir: outDir}
	if o.results != "" {
		pr.StderrTail = resultsStderr
	}
	// A batch learns of its jobs' ends in batches (cli.Ends), and keeps
	// runAhead jobs a worker in the buffer meanwhile.
	ends := &cli.Ends{}
	pool := *workers
	if console != nil {
		pool = max(*workers, consolePool) // the console may raise the concurrency level: room for it
	}
	// A halt counts the failures as their jobs end, in the Executor's
	// workers (the batch hears of ends a little later), so that no job
	// starts after the failure that halts.
	halted := &haltState{rule: o.halt, stop: make(chan struct{})}
	opts := []laboro.Option{laboro.WithRunner(retrying{pr, o.retries, halted.failed}), laboro.WithPoolSize(pool),
		laboro.WithConcurrency(*workers), laboro.WithBufferSize(runAhead * pool), laboro.WithObserver(ends.Observe),
		// Failed jobs are in the summary: the log keeps to errors.
		laboro.WithLogger(c.log.WithOptions(zap.IncreaseLevel(zap.ErrorLevel)))}
	if console != nil {
		opts = append(opts, laboro.WithHistory(web.History))
	}
	ex, err := laboro.New(opts...)
	if err != nil {
		c.sayError(err.Error())
		return exitFailed
	}
	defer ex.Close()
	halted.ex = ex // before a job runs
	ends.Ahead = func() int { return runAhead * ex.Parallelism() }
	if console != nil {
		consoleCtx, stopConsole := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() {
			defer close(served)
			if err := console.Serve(consoleCtx, consoleLn, ex, tokenFrom, c.log); err != nil {
				c.sayError("the console: " + err.Error())
			}
		}()
		defer func() { stopConsole(); <-served }()
		// Whatever -log says: the way to the console (with a JSON log, a
		// record as serve's).
		url := "http://" + consoleLn.Addr().String() + "/?token=…"
		c.logs.Tell(zapcore.InfoLevel, "laboro run", fmt.Sprintf("console at %s (the token of %s)", url, tokenFrom),
			zap.String("url", url), zap.String("token", tokenFrom))
	}
	rec, err := newRecorder(o)
	if err != nil {
		c.sayError(err.Error())
		return exitFailed
	}
	defer rec.close()

	if single {
		job := jf.job(strings.Join(c.fs.Args(), " "))
		job.ID = "1" // its sequence number, as in the job log
		h, err := ex.Submit(ctx, job)
		if err != nil {
			return c.failed(ctx, "run", err)
		}
		res, err := h.Wait(ctx)
		if err != nil {
			return c.failed(ctx, "run", err)
		}
		if err := rec.record(job, res); err != nil {
			c.sayError(err.Error())
		}
		return c.printResult(res, true, job.Script, job.Timeout)
	}
	seq, skipped := 0, 0
	jobs := func(yield func(laboro.Job, error) bool) {
		for job, err := range file.jobs(jf) {
			if err != nil {
				yield(job, err)
				return
			}
			seq++
			job.ID = strconv.Itoa(seq) // its sequence number, as in the job log
			if done[job.ID] {
				skipped++
				continue
			}
			if !yield(job, nil) {
				return
			}
		}
	}

	progress := c.logs.Progress(summaryEvery)
	batch := cli.Batch{
		Stop: halted.stop,
		Ends: ends,
		// After a halt, the jobs still queued were not run: GNU parallel
		// counts them so, and -resume runs them.
		TerminatedNotRun: true,
		Progress:         progress,
		OnResult: func(job laboro.Job, res laboro.Result) error {
			halted.reported(job)
			err := rec.record(job, res)
			if perr := printOutput(progress, res.Output); perr != nil {
				err = errors.Join(err, perr)
			}
			return err
		},
		Command: func(job laboro.Job) string { return job.Script },
	}
	sum, err := batch.Stream(ctx, ex, jobs, total)
	tidyFailures(&sum, *jf.timeout)
	if err != nil {
		if sum.Done() > 0 {
			c.sumUp(sum, "not done", "") // what ran before the error
		}
		return c.failed(ctx, "run", err)
	}
	if sum.Total == 0 && !sum.Unread { // a pipe that brought no job to run
		return c.nothingToRun(*jf.file, skipped > 0)
	}
	if err := rec.close(); err != nil {
		c.sayError(err.Error())
	}
	// The jobs' outputs went to standard output; the report goes beside
	// the progress.
	var why string
	if halted.done() {
		why = " (halted after " + plural(o.halt.fails, "failure")
		if file.total < 0 && sum.Unread {
			// A pipe's jobs are counted as they are read.
			why += "; the rest of the input was not read"
		}
		why += ")"
	}
	c.sumUp(sum, "not run", why)
	return sum.Code()
}

// sumUp writes the report of a batch on standard error, as
// writeSummary does; with a JSON log, as records of the logger "summary"
// (standard error stays one object a line): the line of counts at info,
// with the counts as fields, then a warning for each job that did not
// succeed, with its id, command, status, exit code, error and the end of
// its standard error.
func (c *common) sumUp(sum cli.Summary, left, why string) {
	if c.logs.Format() != "json" {
		writeSummary(os.Stderr, sum, left, why)
		return
	}
	log := c.logs.Records().Named("summary")
	var line strings.Builder
	writeCounts(&line, sum, left, why)
	log.Info(strings.TrimSuffix(line.String(), "\n"), zap.Int("total", sum.Total), zap.Int("succeeded", sum.Succeeded),
		zap.Int("failed", sum.Failed-sum.Cancelled), zap.Int("cancelled", sum.Cancelled),
		zap.Int(strings.ReplaceAll(left, " ", "_"), sum.Total-sum.Succeeded-sum.Failed))
	for _, f := range sum.Failures {
		fields := []zap.Field{zap.String("id", f.ID), zap.String("command", f.Command), zap.String("status", f.Status)}
		if f.ExitCode >= 0 {
			fields = append(fields, zap.Int("exit", f.ExitCode))
		}
		if f.Err != "" {
			fields = append(fields, zap.String("error", f.Err))
		}
		if len(f.Stderr) > 0 {
			fields = append(fields, zap.ByteString("stderr", f.Stderr))
		}
		log.Warn("job "+f.ID+" "+f.Status, fields...)
	}
	if sum.Unlisted > 0 {
		log.Warn(fmt.Sprintf("%d more jobs did not succeed, not listed (the first %d are)", sum.Unlisted, cli.MaxFailures))
	}
}

// writeSummary writes the report of a batch: a line of counts ("12 jobs:
// 11 succeeded, 1 failed", then how many are left, as left says: "not
// run"), with why it stopped early if it did, then the jobs that did not
// succeed.
func writeSummary(out io.Writer, sum cli.Summary, left, why string) {
	w := bufio.NewWriter(out)
	writeCounts(w, sum, left, why)
	sum.WriteFailures(w)
	w.Flush()
}

// writeCounts writes writeSummary's line of counts.
func writeCounts(w io.Writer, sum cli.Summary, left, why string) {
	fmt.Fprintf(w, "%s: %d succeeded, %s", plural(sum.Total, "job"), sum.Succeeded, sum.FailedText())
	if n := sum.Total - sum.Succeeded - sum.Failed; n > 0 {
		fmt.Fprintf(w, ", %d %s", n, left)
	}
	fmt.Fprintln(w, why)
}

// tidyFailures puts sum's failures in job order (the Batch lists them as
// they ended: 3, 2, 5, …, which is hard to read against the file), and
// says how long a job that timed out had: timeout, every job's.
func tidyFailures(sum *cli.Summary, timeout time.Duration) {
	// A job's id is its sequence number.
	seq := func(f cli.Failure) int { n, _ := strconv.Atoi(f.ID); return n }
	slices.SortStableFunc(sum.Failures, func(a, b cli.Failure) int { return cmp.Compare(seq(a), seq(b)) })
	for i, f := range sum.Failures {
		if f.Status == laboro.StatusTimedOut.String() && timeout > 0 {
			sum.Failures[i].Status = timedOut(timeout)
			if f.Err == laboro.ErrTimeout.Error() {
				sum.Failures[i].Err = "" // the status says it all
			}
		}
	}
}

// timedOut is the status of a job killed after timeout, its limit.
func timedOut(timeout time.Duration) string {
	return fmt.Sprintf("%s after %v", laboro.StatusTimedOut, timeout)
}

// printOutput writes a batch job's output to standard output, whole, with
// the progress bar out of its way.
func printOutput(progress *cli.Progress, out *laboro.Output) error {
	if out == nil || out.Size() == 0 {
		return nil
	}
	var err error
	progress.Above(func() {
		if _, err = out.WriteTo(os.Stdout); err != nil {
			err = fmt.Errorf("its output to standard output: %w", err)
		}
	})
	return err
}

// nothingToRun says why a run has no job to run, and returns its exit
// status: every job is in the job log (logged), or file holds none.
func (c *common) nothingToRun(file string, logged bool) int {
	if logged {
		c.logs.Tell(zapcore.InfoLevel, "laboro run", "every job is in the job log already")
		return 0
	}
	c.sayError("no jobs in " + file)
	return exitFailed
}

// runOptions are run's flags about keeping results and about failures.
type runOptions struct {
	results, joblog      string
	resume, resumeFailed bool
	retries              int
	halt                 haltRule
}

// resultsStderr is how much of each job's standard error -results keeps.
const resultsStderr = 1 << 20

// retrying runs a job that fails again, up to attempts times in all, as
// long as its context lasts, and calls failed, if not nil, when it did
// not succeed in the end.
type retrying struct {
	laboro.Runner
	attempts int
	failed   func(job laboro.Job)
}

func (r retrying) Run(ctx context.Context, job laboro.Job) laboro.Result {
	for i := 1; ; i++ {
		res := r.Runner.Run(ctx, job)
		if res.Status != laboro.StatusFailed || i >= r.attempts || ctx.Err() != nil {
			if res.Status != laboro.StatusSucceeded && r.failed != nil {
				r.failed(job)
			}
			return res
		}
		res.Output.Close()
	}
}

// haltRule is -halt: after fails failures, stop (now: kill the running
// jobs too). fails 0 means never.
type haltRule struct {
	now   bool
	fails int
}

// haltState counts failures and halts the Executor once, by the rule.
type haltState struct {
	rule     haltRule
	ex       *laboro.Executor
	mu       sync.Mutex
	count    int
	halted   bool
	haltedBy string        // the id of the job whose failure halted
	stop     chan struct{} // closed on the halt: no more jobs are read
}

// failed counts a job that did not succeed, as it ends in its worker, and
// halts on the rule's count: no job starts after it (Shutdown), and with
// now, the running jobs are killed once it is reported.
func (h *haltState) failed(job laboro.Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count++
	if h.rule.fails == 0 || h.count < h.rule.fails || h.halted {
		return
	}
	h.halted, h.haltedBy = true, job.ID
	close(h.stop)
	// Shutdown, given a context already ended, begins the drain and
	// returns: the worker that ran job takes no other.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.ex.Shutdown(ended) // ended's error: the drain goes on
}

// reported is told of each job reported. Once the job that halted is, and
// so has ended in the Executor with its own status, a halt now kills the
// jobs still running (Close); killed before, it would be counted killed.
func (h *haltState) reported(job laboro.Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.halted && h.rule.now && job.ID == h.haltedBy {
		go h.ex.Close() // the batch sees the killed jobs end
	}
}

func (h *haltState) done() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.halted
}

// parseHalt parses -halt: "", now,fail=N or soon,fail=N.
func parseHalt(s string) (haltRule, error) {
	if s == "" {
		return haltRule{}, nil
	}
	when, fails, ok := strings.Cut(s, ",fail=")
	n, err := strconv.Atoi(fails)
	switch {
	case !ok || (when != "now" && when != "soon"):
		return haltRule{}, errors.New("must be now,fail=N or soon,fail=N")
	case err != nil || n < 1:
		return haltRule{}, errors.New("fail=N: N must be a number of failures, at least 1")
	}
	return haltRule{now: when == "now", fails: n}, nil
}

// plural returns n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
