package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"
	"golang.org/x/term"
)

// Counts are how a batch of jobs stands.
type Counts struct {
	Total     int // jobs in the batch
	Queued    int // waiting to run
	Running   int // running
	Succeeded int
	Failed    int // ended otherwise: failed, killed, timed out, cancelled, …
	// Cancelled is how many of Failed were cancelled: the progress shows
	// them apart from those that failed, as the summaries do.
	Cancelled int
	Workers   int // workers serving the batch, when the command knows; 0 otherwise
}

// Done is how many jobs have ended.
func (c Counts) Done() int { return c.Succeeded + c.Failed }

// Progress shows how a batch goes, on standard error: a bar with the
// counts and the time left on a terminal, or, when standard error is not a
// terminal, a line of counts every Every (none when Every is 0); or, made
// by NewLogProgress, log records instead of either. It is safe for
// concurrent use.
type Progress struct {
	w     io.Writer
	log   *zap.Logger // records rather than lines, when not nil
	every time.Duration
	tty   bool

	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	last  time.Time
	start time.Time
	ended bool
	// With log: the last counts given, and whether they were recorded.
	counts   Counts
	recorded bool
}

// NewProgress returns a Progress on w (usually os.Stderr). every is the
// period of the plain lines written when w is not a terminal.
func NewProgress(w io.Writer, every time.Duration) *Progress {
	f, ok := w.(*os.File)
	now := time.Now() // the first line of counts comes after every
	return &Progress{w: w, every: every, tty: ok && term.IsTerminal(int(f.Fd())), start: now, last: now}
}

// NewLogProgress returns a Progress that makes log records on log where
// NewProgress writes lines, for a command whose log is JSON (a bar or a
// plain line would break its one object a line): every every (none when
// it is 0), an info record whose message is the line of counts and whose
// fields are the counts (done, total, running, queued, failed, cancelled,
// workers when known, eta_seconds when known); once more as it is closed,
// with the last counts, unless they were recorded already; and a warning
// for each Note. It never draws a bar, on a terminal or not.
func NewLogProgress(log *zap.Logger, every time.Duration) *Progress {
	now := time.Now()
	return &Progress{log: log, w: io.Discard, every: every, start: now, last: now}
}

// Terminal reports whether the progress goes to a terminal (as a bar).
func (p *Progress) Terminal() bool { return p.tty }

// Update shows c.
func (p *Progress) Update(c Counts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	if p.tty {
		if p.bar == nil && c.Total > 0 {
			p.bar = progressbar.NewOptions(c.Total, progressbar.OptionSetWriter(p.w),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }))
		}
		// A finished bar (its line ended) is not drawn again: the summary
		// that follows would land on its line.
		if p.bar != nil && !p.bar.IsFinished() {
			p.bar.ChangeMax(max(c.Total, c.Done()))
			p.bar.Describe(describe(c))
			p.bar.Set(c.Done())
		}
		return
	}
	if p.log != nil && c != p.counts {
		p.counts, p.recorded = c, false
	}
	if p.every <= 0 || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	if p.log != nil {
		p.record()
		return
	}
	fmt.Fprintln(p.w, p.line(c))
}

// describe is the bar's description of c: the counts beside the bar.
func describe(c Counts) string {
	desc := fmt.Sprintf("running %d, queued %d, failed %d", c.Running, c.Queued, c.Failed-c.Cancelled)
	if c.Cancelled > 0 {
		desc += fmt.Sprintf(", cancelled %d", c.Cancelled)
	}
	if c.Workers > 0 {
		desc += fmt.Sprintf(", workers %d", c.Workers)
	}
	return desc
}

// line is the plain line of c: "3 of 10 done (running 2, …), about 1m0s
// left".
func (p *Progress) line(c Counts) string {
	line := fmt.Sprintf("%d of %d done (%s)", c.Done(), c.Total, describe(c))
	if eta, ok := p.eta(c); ok {
		line += ", about " + eta.Round(time.Second).String() + " left"
	}
	return line
}

// record logs the last counts; p.mu is held.
func (p *Progress) record() {
	c := p.counts
	fields := []zap.Field{zap.Int("done", c.Done()), zap.Int("total", c.Total), zap.Int("running", c.Running),
		zap.Int("queued", c.Queued), zap.Int("failed", c.Failed-c.Cancelled), zap.Int("cancelled", c.Cancelled)}
	if c.Workers > 0 {
		fields = append(fields, zap.Int("workers", c.Workers))
	}
	if eta, ok := p.eta(c); ok {
		fields = append(fields, zap.Int64("eta_seconds", int64(eta.Round(time.Second)/time.Second)))
	}
	p.log.Info(p.line(c), fields...)
	p.recorded = true
}

// eta guesses the time left from the pace so far.
func (p *Progress) eta(c Counts) (time.Duration, bool) {
	if c.Done() == 0 || c.Total <= c.Done() {
		return 0, false
	}
	per := time.Since(p.start) / time.Duration(c.Done())
	return per * time.Duration(c.Total-c.Done()), true
}

// Note writes a line of text above the bar (or among the lines of
// counts); with NewLogProgress, it is a warning record.
func (p *Progress) Note(text string) {
	if p.log != nil {
		p.log.Warn(text)
		return
	}
	p.Above(func() { fmt.Fprintln(p.w, text) })
}

// Above calls write, which writes to the terminal (a job's output on
// standard output, say), with the bar cleared first and drawn again
// after, so that what it writes is not mixed with the bar. Off a terminal
// it just calls write.
func (p *Progress) Above(write func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !p.ended {
		p.bar.Clear()
	}
	write()
	if p.bar != nil && !p.ended {
		p.bar.RenderBlank()
	}
}

// Close ends the display. With NewLogProgress, it records the last counts
// given, unless they were already: the log tells how the batch ended,
// not how it stood up to every before.
func (p *Progress) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !p.ended {
		p.bar.Finish()
	}
	if p.log != nil && !p.ended && !p.recorded && p.counts != (Counts{}) {
		p.record()
	}
	p.ended = true
}

// Failure is a job that did not succeed, as every command reports it: its
// id, its command, how it ended, and the tail of its standard error.
type Failure struct {
	ID       string
	Command  string
	Status   string // "failed", "timed out", …
	ExitCode int    // -1 when it did not exit normally
	Err      string // why, when the status alone does not say
	Stderr   []byte // the tail of its standard error
}

// FailureOf describes a job's result that was not a success.
func FailureOf(job laboro.Job, res laboro.Result) Failure {
	f := Failure{ID: res.ID, Command: job.String(), Status: res.Status.String(), ExitCode: res.ExitCode, Stderr: res.Stderr}
	if res.Err != nil {
		f.Err = res.Err.Error()
	}
	return f
}

// WriteFailures writes each failure: a line with the id, how it ended and
// the command, then the error and the last lines of standard error,
// indented. Nothing for none.
func WriteFailures(w io.Writer, fs []Failure) {
	for _, f := range fs {
		how := f.Status
		if f.ExitCode >= 0 {
			how += fmt.Sprintf(", exit status %d", f.ExitCode)
		}
		fmt.Fprintf(w, "%s %s: %s\n", f.ID, how, oneLine(f.Command))
		if f.Err != "" && !strings.HasPrefix(f.Err, "exit status") {
			fmt.Fprintf(w, "    %s\n", oneLine(f.Err))
		}
		for _, l := range tailLines(f.Stderr, 5) {
			fmt.Fprintf(w, "    | %s\n", l)
		}
	}
}

// oneLine folds s onto one line, shortened to 200 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// tailLines returns the last n non-empty lines of b.
func tailLines(b []byte, n int) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if l = strings.TrimRight(l, "\r "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines[max(0, len(lines)-n):]
}

// MaxFailures bounds the failures a Summary lists: a batch of a million
// jobs that all fail keeps the first MaxFailures in memory, and counts the
// others.
const MaxFailures = 1000

// Summary is how a batch ended.
type Summary struct {
	Counts
	Failures []Failure // the first MaxFailures
	Unlisted int       // the failures beyond them
	// Unread: Stream stopped reading its jobs before their end (Stop
	// closed, its context ended, or an error).
	Unread bool
	ended  map[string]int // the jobs that did not succeed, by status
}

// FailedText says how many jobs did not succeed, by how they ended: "2
// failed", or "2 failed, 1 killed, 1 cancelled" when not every one failed.
func (s Summary) FailedText() string {
	if len(s.ended) == 0 || (len(s.ended) == 1 && s.ended[laboro.StatusFailed.String()] > 0) {
		return fmt.Sprintf("%d failed", s.Failed)
	}
	order := []string{laboro.StatusFailed.String(), laboro.StatusTimedOut.String(), laboro.StatusKilled.String(),
		laboro.StatusCancelled.String()}
	for st := range s.ended {
		if !slices.Contains(order, st) {
			order = append(order, st)
		}
	}
	slices.Sort(order[4:])
	var parts []string
	for _, st := range order {
		if n := s.ended[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// Write writes the summary line ("12 jobs: 11 succeeded, 1 failed") and
// the failures, as WriteFailures does.
func (s Summary) Write(w io.Writer) {
	jobs := "jobs"
	if s.Total == 1 {
		jobs = "job"
	}
	fmt.Fprintf(w, "%d %s: %d succeeded, %s", s.Total, jobs, s.Succeeded, s.FailedText())
	if n := s.Total - s.Done(); n > 0 {
		fmt.Fprintf(w, ", %d not done", n)
	}
	fmt.Fprintln(w)
	s.WriteFailures(w)
}

// WriteFailures writes the failures, as WriteFailures does, and how many
// more there were.
func (s Summary) WriteFailures(w io.Writer) {
	WriteFailures(w, s.Failures)
	if s.Unlisted > 0 {
		fmt.Fprintf(w, "... and %d more jobs that did not succeed, not listed (the first %d are)\n", s.Unlisted, MaxFailures)
	}
}

// CountFailed counts n more jobs that did not succeed, ended with status
// (a laboro.Status in words: "failed", "cancelled", …), without listing
// them: for a batch whose jobs another program ran and counted (a
// service), so that FailedText and Write say how they ended.
func (s *Summary) CountFailed(status string, n int) {
	if n <= 0 {
		return
	}
	s.Failed += n
	if status == laboro.StatusCancelled.String() {
		s.Cancelled += n
	}
	if s.ended == nil {
		s.ended = map[string]int{}
	}
	s.ended[status] += n
}

// fail counts f, listing it if there is room.
func (s *Summary) fail(f Failure) {
	s.Failed++
	if f.Status == laboro.StatusCancelled.String() {
		s.Cancelled++
	}
	if s.ended == nil {
		s.ended = map[string]int{}
	}
	s.ended[f.Status]++
	if len(s.Failures) < MaxFailures {
		s.Failures = append(s.Failures, f)
	} else {
		s.Unlisted++
	}
}

// Code is the batch's exit status: ExitOK when every job succeeded, else
// ExitFailed.
func (s Summary) Code() int {
	if s.Failed > 0 || s.Succeeded < s.Total {
		return ExitFailed
	}
	return ExitOK
}

// Err returns nil when every job succeeded, else an *ExitError of
// ExitFailed (the failures were written already).
func (s Summary) Err() error {
	if c := s.Code(); c != ExitOK {
		return Exit(c)
	}
	return nil
}

// Batch is the batch driver of the commands that run a list of jobs
// through an Executor: it submits them (waiting for room in the buffer),
// shows progress, hands each result to OnResult, and sums up.
type Batch struct {
	// Progress, if not nil, is updated as jobs end.
	Progress *Progress
	// OnResult, if not nil, is called with each job's result, one at a
	// time and in the order the jobs ended, before its output is closed
	// (to save it); its error fails the job in the summary.
	OnResult func(job laboro.Job, res laboro.Result) error
	// Submitted, if not nil, is called once every job is in the Executor
	// (for a Runner that wants to know no more will come).
	Submitted func()
	// Workers, if not nil, tells Progress how many workers serve the batch.
	Workers func() int
	// NoWorker, with Workers, is said once above the progress when jobs
	// have waited NoWorkerAfter with no worker to run them: why nothing
	// moves, and how to start one ("no runner is connected: …").
	NoWorker string
	// Out, if not nil, tells Progress, for a Runner that hands jobs to
	// remote workers, how many of the jobs the Executor runs are out at a
	// worker (running) and how many wait for one (queued): the Executor
	// counts both as running.
	Out func() (running, waiting int)
	// Command, if not nil, says what a failed job ran, for the summary;
	// by default Job.String.
	Command func(job laboro.Job) string
	// Prepare, if not nil, is called with each job just before it is
	// submitted and returns the job to submit: a batch whose jobs are
	// files reads each one then, so that only the jobs in the Executor
	// are in memory, not the whole batch. A job it returns an error for
	// is not run, and fails in the summary ("not loaded").
	Prepare func(job laboro.Job) (laboro.Job, error)
	// Stop, if not nil, stops Stream's reading when closed (a halt after
	// failures): it reads no more jobs, not even the one it is waiting
	// for, and ends as the jobs submitted end. Closed before the halt
	// stops the Executor, it makes a job the Executor then refuses
	// (ErrClosed) one not run, rather than Stream's error.
	Stop <-chan struct{}
	// Ends, if not nil, is how the batch learns of its jobs' ends: in
	// batches, from the Executor's observer (see Ends). Without it, a
	// goroutine waits for each job.
	Ends *Ends
	// TerminatedNotRun counts the jobs that Shutdown or Close took from
	// the buffer before they ran (StatusTerminated, after a halt) as not
	// run rather than as failed: OnResult is not called for them, and the
	// summary leaves them out of both counts.
	TerminatedNotRun bool
}

// NoWorkerAfter is how long jobs wait with no worker to run them before
// a command says so (Batch.NoWorker, NoWorkerWatch). (A var for the
// tests' sake.)
var NoWorkerAfter = 5 * time.Second

// NoWorkerWatch tells, once, when jobs have waited NoWorkerAfter with no
// worker to run them. Its zero value is ready.
type NoWorkerWatch struct {
	since time.Time // since when jobs have waited with no worker; zero while not
	said  bool
}

// Due takes whether, now, jobs wait with no worker, and reports true the
// first time they have for NoWorkerAfter.
func (w *NoWorkerWatch) Due(alone bool) bool {
	switch {
	case w.said:
	case !alone:
		w.since = time.Time{}
	case w.since.IsZero():
		w.since = time.Now()
	case time.Since(w.since) >= NoWorkerAfter:
		w.said = true
		return true
	}
	return false
}

// command is what job ran, for the summary (see Batch.Command).
func (b *Batch) command(job laboro.Job) string {
	if b.Command != nil {
		return b.Command(job)
	}
	return job.String()
}

// Run submits jobs to ex and waits for them all. It returns early with
// ctx's error if ctx ends (the jobs already submitted go on, in ex).
func (b *Batch) Run(ctx context.Context, ex *laboro.Executor, jobs []laboro.Job) (Summary, error) {
	return b.Stream(ctx, ex, func(yield func(laboro.Job, error) bool) {
		for _, job := range jobs {
			if !yield(job, nil) {
				return
			}
		}
	}, len(jobs))
}

// Stream is Run for jobs that come one at a time, read as they are
// submitted (a file of command lines, a pipe): the batch holds in memory
// only the jobs in ex and those it waits for, however many come. total is
// how many will come, for the progress; negative if not known, and then
// the progress counts those read so far. An error from jobs stops the
// batch: no more is read, the jobs submitted end, and Stream returns the
// summary with that error.
//
// jobs is read one job ahead in a goroutine of its own, so that ctx's end
// and Stop take effect while it waits for a job (a pipe whose writer is
// slow): Stream then returns without waiting for that read, and the
// goroutine ends once jobs yields again or ends.
//
// With b.Ends, Stream keeps Ends.Ahead jobs in ex and hears of their ends
// from ex's observer; without it, a goroutine waits for each job, and the
// buffer's room sets how many are in ex.
func (b *Batch) Stream(ctx context.Context, ex *laboro.Executor, jobs iter.Seq2[laboro.Job, error], total int) (Summary, error) {
	var (
		mu       sync.Mutex
		sum      = Summary{Counts: Counts{Total: max(total, 0)}}
		read     int // jobs that came
		ended    int // of those, the ones reported
		progress = make(chan struct{}, 1)
		waits    sync.WaitGroup
		order    endOrder // the jobs submitted and not reported (mu)
	)
	var (
		drained     bool  // every job of jobs came
		srcErr      error // the error jobs gave
		interrupted bool  // a job's wait ended with ctx, not with its result (mu)
	)
	// end waits for the goroutines (which return once ctx ends) before the
	// summary is read.
	end := func(err error) (Summary, error) {
		if b.Ends != nil {
			b.Ends.follow(nil)
		}
		waits.Wait()
		sum.Unread = !drained
		if b.Progress != nil {
			b.Progress.Close()
		}
		return sum, err
	}
	// settled counts a job as ended, and wakes the loop below.
	settled := func() {
		mu.Lock()
		ended++
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	// report hands a result to OnResult and counts it; mu is held.
	report := func(h *laboro.Handle, res laboro.Result) {
		defer res.Output.Close()
		if b.TerminatedNotRun && res.Status == laboro.StatusTerminated {
			return
		}
		job := h.Job()
		var err error
		if b.OnResult != nil {
			err = b.OnResult(job, res)
		}
		if res.Status == laboro.StatusSucceeded && err == nil {
			sum.Succeeded++
			return
		}
		f := FailureOf(job, res)
		f.Command = b.command(job)
		if err != nil && res.Status == laboro.StatusSucceeded {
			f.Status, f.Err = "not saved", err.Error()
		}
		sum.fail(f)
	}
	var idle NoWorkerWatch
	update := func() {
		if b.Progress == nil {
			return
		}
		st := ex.Stats()
		mu.Lock()
		c := sum.Counts
		mu.Unlock()
		c.Running, c.Queued = st.Running, st.Queued+st.Blocked
		if b.Out != nil {
			running, waiting := b.Out()
			c.Running, c.Queued = running, c.Queued+waiting
		}
		if b.Workers != nil {
			c.Workers = b.Workers()
			if b.NoWorker != "" && idle.Due(c.Workers == 0 && c.Queued > 0) {
				b.Progress.Note(b.NoWorker)
			}
		}
		b.Progress.Update(c)
	}
	tick := time.NewTicker(200 * time.Millisecond) // progress moves with no result too
	defer tick.Stop()
	// With Ends, the jobs submitted and not reported (mu), and how many
	// the batch keeps in the Executor.
	var pending endsPending
	ahead := 0
	if b.Ends != nil {
		b.Ends.follow(func(ev laboro.Event) {
			mu.Lock()
			h := pending.ended(ev.Job.ID)
			if h == nil {
				mu.Unlock()
				return // a job another caller submitted
			}
			report(h, ev.Result)
			mu.Unlock()
			settled()
		})
	}
	r := readAhead(jobs)
	defer r.close()
reading:
	for {
		// With Ends, once Ahead jobs are in the Executor, wait for a batch
		// of them to end rather than for each place in the buffer.
		for b.Ends != nil {
			mu.Lock()
			in := read - ended
			mu.Unlock()
			if in < ahead {
				break
			}
			if ahead = b.Ends.Ahead(); in < ahead {
				break
			}
			update()
			select {
			case <-progress:
			case <-tick.C:
			case <-ctx.Done():
				return end(ctx.Err())
			case <-b.Stop:
				break reading
			}
		}
		job, state, err := r.next(ctx, b.Stop)
		switch state {
		case ctxEnded:
			return end(err)
		case stopFirst:
			break reading
		case seqEnded:
			drained = true
			break reading
		}
		if err != nil {
			srcErr = err
			break
		}
		mu.Lock()
		read++
		if total < 0 {
			sum.Total = read
		}
		mu.Unlock()
		if b.Prepare != nil {
			prepared, err := b.Prepare(job)
			if err != nil {
				mu.Lock()
				sum.fail(Failure{ID: job.ID, Command: b.command(job), Status: "not loaded", ExitCode: -1, Err: err.Error()})
				mu.Unlock()
				settled()
				continue
			}
			job = prepared
		}
		var h *laboro.Handle
		if b.Ends != nil {
			// The lock is held across Submit: the job's end, which may be
			// told before Submit returns, waits until the job is pending.
			mu.Lock()
			h, err = ex.Submit(ctx, job)
			if err == nil {
				pending.add(h)
			}
			mu.Unlock()
		} else {
			h, err = ex.Submit(ctx, job)
		}
		if errors.Is(err, laboro.ErrClosed) && closed(b.Stop) {
			// The halt came between this job's read and its submission:
			// it is not run, and the jobs in the Executor end as told.
			settled()
			break
		}
		if err != nil {
			return end(fmt.Errorf("submit %s: %w", job.String(), err))
		}
		if b.Ends != nil {
			continue
		}
		mu.Lock()
		place := order.add(h)
		mu.Unlock()
		waits.Go(func() {
			_, err := h.Wait(ctx)
			mu.Lock()
			if err == nil {
				order.ended(place, report)
			} else {
				interrupted = true
			}
			mu.Unlock()
			settled()
		})
		update()
	}
	if drained {
		mu.Lock()
		sum.Total = read // every job came: however many total said
		mu.Unlock()
		if b.Submitted != nil {
			b.Submitted()
		}
	}
	for {
		mu.Lock()
		left, cut := read-ended, interrupted
		mu.Unlock()
		if cut {
			// The last waits may have ended with ctx before this loop saw
			// it: the batch is interrupted all the same.
			return end(ctx.Err())
		}
		if left == 0 {
			break
		}
		select {
		case <-progress:
			update()
		case <-tick.C:
			update()
		case <-ctx.Done():
			return end(ctx.Err())
		}
	}
	update() // the counts as they end
	return end(srcErr)
}

// closed reports whether c is closed; a nil c never is.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// WriteTable writes rows as aligned columns, the first row being the
// header.
func WriteTable(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}
