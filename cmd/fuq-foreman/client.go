package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
	"go.uber.org/zap/zapio"
)

func submitCommand(c *cli.Command) func(context.Context, []string) error {
	control := controlFlag(c)
	var s fuq.Submission
	wait := c.Flags.Bool("wait", false, "wait for the job to end")
	stall := c.Flags.Duration("stall", time.Minute, "with -wait: after how long without an answer from the foreman submit says so on standard error "+
		"(it waits on, and says so again every five times as long)")
	c.Positive("stall")
	c.Flags.StringVar(&s.Name, "name", "", "job name (names the log files)")
	c.Flags.StringVar(&s.Command, "command", "", "program run as: COMMAND <task number>")
	c.Flags.IntVar(&s.Tasks, "tasks", 0, "number of tasks")
	c.Flags.StringVar(&s.WorkingDir, "wd", ".", "working directory of the tasks")
	c.Flags.StringVar(&s.LoggingDir, "logdir", ".", "directory of the tasks' logs")
	logFlag := c.LogFlag(zap.InfoLevel)
	return func(ctx context.Context, args []string) error {
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case s.Name == "":
			return cli.Usagef("-name is required")
		case strings.ContainsAny(s.Name, "/\x00"):
			return cli.Usagef("-name %q: it names the log files, <logdir>/<name>_<task>.log, and cannot hold a /", s.Name)
		case s.Command == "":
			return cli.Usagef("-command is required")
		case s.Tasks < 1:
			return cli.Usagef("-tasks %d: a job needs at least one task", s.Tasks)
		}
		// Paths are the submitter's: relative ones are made absolute (a
		// bare command name is looked up in the worker's PATH).
		paths := []*string{&s.WorkingDir, &s.LoggingDir}
		if strings.Contains(s.Command, "/") {
			paths = append(paths, &s.Command)
		}
		for _, p := range paths {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
		return submit(ctx, fuq.ControlClient{Socket: *control}, s, *wait, *stall, logFlag)
	}
}

// submit submits s and prints its id; with wait, it waits for the job,
// showing its progress and what keeps it waiting on standard error as
// logs says (log records with a JSON log), and prints how it ended.
func submit(ctx context.Context, cl fuq.ControlClient, s fuq.Submission, wait bool, stall time.Duration, logs *cli.Log) error {
	var out struct{ ID string }
	if err := cl.Do(ctx, "POST", "/jobs", s, &out); err != nil {
		return err
	}
	fmt.Println(out.ID)
	if !wait {
		return nil
	}
	var say io.Writer = os.Stderr
	if logs.Format() == "json" {
		// Each line said (the foreman went away, does not answer, is
		// back) is a record: standard error stays one object a line.
		w := &zapio.Writer{Log: logs.Records(), Level: zap.WarnLevel}
		defer w.Close()
		say = w
	}
	stop := showProgress(ctx, cl, out.ID, s.Tasks, logs.Progress(progressEvery))
	st, err := waitJob(ctx, cl, out.ID, stall, say)
	stop(st)
	if err != nil {
		return err
	}
	printStatus(st, false)
	if st.State == "succeeded" {
		return nil
	}
	printFailedTasks(st, true)
	return cli.Exit(cli.ExitFailed)
}

func statusCommand(c *cli.Command) func(context.Context, []string) error {
	control := controlFlag(c)
	tasks := c.Flags.Bool("tasks", false, "list every task")
	asJSON := c.Flags.Bool("json", false, "print the jobs as JSON, for programs")
	c.LogFlag(zap.InfoLevel) // -log-format: Main says the error as the format asks
	return func(ctx context.Context, args []string) error {
		cl := fuq.ControlClient{Socket: *control}
		var list []fuq.JobReport
		query := ""
		if *tasks {
			query = "?tasks=all"
		}
		switch len(args) {
		case 0:
			if err := cl.Do(ctx, "GET", "/jobs"+query, nil, &list); err != nil {
				return err
			}
		case 1:
			var st fuq.JobReport
			if err := cl.Do(ctx, "GET", "/jobs/"+url.PathEscape(args[0])+query, nil, &st); err != nil {
				return err
			}
			list = append(list, st)
		default:
			return cli.Usagef("one JOB at most")
		}
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(list)
		}
		for _, st := range list {
			printStatus(st, *tasks)
			printFailedTasks(st, false)
		}
		return nil
	}
}

func cancelCommand(c *cli.Command) func(context.Context, []string) error {
	control := controlFlag(c)
	c.LogFlag(zap.InfoLevel) // -log-format: Main says the error as the format asks
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return cli.Usagef("one JOB to cancel")
		}
		var got struct{ ID, State string }
		if err := (fuq.ControlClient{Socket: *control}).Do(ctx, "POST", "/jobs/"+url.PathEscape(args[0])+"/cancel", nil, &got); err != nil {
			return err
		}
		fmt.Printf("%s %s\n", got.ID, got.State)
		return nil
	}
}

func stopCommand(c *cli.Command) func(context.Context, []string) error {
	control := controlFlag(c)
	c.LogFlag(zap.InfoLevel) // -log-format: Main says the error as the format asks
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return cli.Usagef("N (processors to give up, 0 for all) or now")
		}
		if n, err := strconv.Atoi(args[0]); args[0] != "now" && (err != nil || n < 0) {
			return cli.Usagef("%q: give N, a number of processors (0 for all), or now", args[0])
		}
		return fuq.ControlClient{Socket: *control}.Do(ctx, "POST", "/workers/stop?n="+url.QueryEscape(args[0]), nil, nil)
	}
}

// printStatus prints a job's line: id, name, state and task counts.
func printStatus(st fuq.JobReport, tasks bool) {
	if st.Job == nil {
		fmt.Printf("%s\t%s\n", st.ID, st.State)
		return
	}
	j := st.Job
	fmt.Printf("%s\t%s\t%s\tdone %d/%d\tfailed %d\trunning %d\tpending %d\tcancelled %d",
		st.ID, j.Name, st.State, j.Done, j.NumTasks, j.Failed, j.Running, j.Pending, j.Cancelled)
	if waitsForWorkers(st) {
		fmt.Print("\t(no worker connected)")
	}
	fmt.Println()
	if tasks {
		for _, t := range j.Tasks {
			fmt.Printf("\t%d\t%s\t%s\t%s\n", t.Task, t.State, t.Worker, t.Status)
		}
	}
}

// printFailedTasks says why each task of a job that failed did not
// succeed (with all, each task that did not, cancelled ones too): how it
// ended in the worker's words, and for a failed one its command line,
// where its standard output and error are, and their end when that log
// is readable from here (fuq.TaskLog: MaxLogTail bytes at most).
func printFailedTasks(st fuq.JobReport, all bool) {
	if st.Job == nil {
		return
	}
	for _, t := range st.Job.Tasks {
		if t.State != fuq.TaskFailed && (!all || t.State == fuq.TaskDone) {
			continue
		}
		fmt.Printf("\ttask %d %s on %s: %s\n", t.Task, t.State, or(t.Worker, "no worker"), or(t.Status, "no word from the worker"))
		if t.State != fuq.TaskFailed {
			continue
		}
		fmt.Printf("\t  command: %s %d\n", st.Job.Command, t.Task)
		log, tail := fuq.TaskLog(st.Job.JobDescription, t.Task)
		if log == "" {
			fmt.Printf("\t  its standard output and error, %s on the worker's host (not readable here)\n",
				filepath.Join(st.Job.LoggingDir, fmt.Sprintf("%s_%d.log", st.Job.Name, t.Task)))
			continue
		}
		fmt.Printf("\t  its standard output and error, %s (its end):\n", log)
		for _, l := range strings.Split(string(tail), "\n") {
			fmt.Printf("\t  | %s\n", l)
		}
	}
	if st.Job.Omitted > 0 {
		fmt.Printf("\t%d more tasks did not succeed (status -tasks %s lists every task)\n", st.Job.Omitted, st.ID)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// waitJob waits for a job to end. A foreman that goes away meanwhile (a
// crash, a restart) is waited for, up to waitForeman: started again, it
// resumes its jobs from its journal, and the wait goes on. A foreman that
// is there but does not answer (stopped, swapping, stuck on a disk) is
// waited for as long as it takes: once it has left a request unanswered
// for stall, that is said on out, then again every stallRepeat times
// stall, and when it answers again. waitJob returns once the job has
// ended, when ctx ends, or with the error of a foreman that refuses (an
// unknown job).
func waitJob(ctx context.Context, cl fuq.ControlClient, id string, stall time.Duration, out io.Writer) (fuq.JobReport, error) {
	away := cli.NewAway("the foreman", waitForeman, out)
	quiet := silence{out: out, repeat: stallRepeat * stall, since: time.Now()}
	// The foreman answers a wait within a quarter of stall, whether the
	// job has ended or not: a request it leaves unanswered for stall is
	// one it is not answering.
	cl.Timeout = stall
	path := "/jobs/" + url.PathEscape(id) + "?wait=" + (stall / 4).String()
	for {
		var st fuq.JobReport
		err := cl.Do(ctx, "GET", path, nil, &st)
		if err == nil {
			away.Back()
			quiet.answered()
			if st.Ended() {
				return st, nil
			}
			continue // the foreman's wait is bounded: ask again
		}
		var ne net.Error
		switch {
		case ctx.Err() != nil:
			return st, err
		case errors.As(err, &ne) && ne.Timeout():
			quiet.unanswered()
			continue // at once: the request itself waited stall
		case !fuq.Unreachable(err):
			return st, err
		}
		if err := away.Lost(ctx, err); err != nil {
			return st, err
		}
	}
}

// stallRepeat is how many times submit's -stall passes between two
// reminders that the foreman still does not answer.
const stallRepeat = 5

// silence says on out how long a foreman that is there has not answered.
type silence struct {
	out    io.Writer
	repeat time.Duration
	since  time.Time // its last answer
	said   time.Time // when it was last said; zero while it answers
}

// unanswered is called after a request that the foreman left unanswered.
func (s *silence) unanswered() {
	now := time.Now()
	switch {
	case s.said.IsZero():
		fmt.Fprintf(s.out, "the foreman has not answered since %s (%v); waiting for it (is it stopped, or its machine overloaded?)\n",
			s.since.Format(time.TimeOnly), now.Sub(s.since).Round(time.Second))
	case now.Sub(s.said) >= s.repeat:
		fmt.Fprintf(s.out, "the foreman has still not answered since %s (%v); waiting for it\n",
			s.since.Format(time.TimeOnly), now.Sub(s.since).Round(time.Second))
	default:
		return
	}
	s.said = now
}

// answered is called after each answer of the foreman.
func (s *silence) answered() {
	now := time.Now()
	if !s.said.IsZero() {
		fmt.Fprintf(s.out, "the foreman answers again, after %v of silence\n", now.Sub(s.since).Round(time.Second))
		s.said = time.Time{}
	}
	s.since = now
}

// waitsForWorkers reports whether a job that has not ended has tasks to
// run and no worker to run them.
func waitsForWorkers(st fuq.JobReport) bool {
	return !st.Ended() && st.Workers == 0 && st.Job != nil && st.Job.Pending > 0
}

// progressEvery is the period of submit -wait's lines of counts off a
// terminal (and of its progress records, with a JSON log).
const progressEvery = 10 * time.Second

// counts are a job's task counts as a progress shows them: cancelled
// tasks among those that did not succeed, and apart, as printStatus
// shows them.
func counts(j *fuq.JobInfo, tasks int) cli.Counts {
	return cli.Counts{Total: tasks, Succeeded: j.Done, Failed: j.Failed + j.Cancelled, Cancelled: j.Cancelled,
		Running: j.Running, Queued: j.Pending}
}

// showProgress shows how job id goes on progress (made by cli.Log.Progress:
// a bar on a terminal, lines of counts, or log records) until the
// returned function is called with the job's last report, which it shows
// before it closes progress; and, once, that no worker is connected when
// the job has waited cli.NoWorkerAfter for one.
func showProgress(ctx context.Context, cl fuq.ControlClient, id string, tasks int, progress *cli.Progress) (stop func(last fuq.JobReport)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var idle cli.NoWorkerWatch
		for {
			var st fuq.JobReport
			if err := cl.Do(ctx, "GET", "/jobs/"+url.PathEscape(id), nil, &st); err == nil && st.Job != nil {
				progress.Update(counts(st.Job, tasks))
				if idle.Due(waitsForWorkers(st)) {
					progress.Note("fuq-foreman: no worker is connected to the foreman: the job waits for one " +
						"(start fuq-worker -connect HOST:PORT)")
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func(last fuq.JobReport) {
		cancel()
		<-done
		// The last poll may be older than the job's end: the progress
		// ends with the counts the summary gives.
		if last.Job != nil {
			progress.Update(counts(last.Job, tasks))
		}
		progress.Close()
	}
}

// waitForeman is how long submit -wait waits for a foreman that went away.
const waitForeman = 5 * time.Minute
