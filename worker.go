package laboro

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"
)

// worker is one of the pool's goroutines. It waits until the buffer holds a
// job and fewer than min(concurrency, pool size) jobs run, runs the job,
// delivers its result, and repeats until the Executor drains.
func (e *Executor) worker(i int) {
	jc := &e.contexts[i]
	defer jc.release()
	e.mu.Lock()
	h := e.take(i)
	e.mu.Unlock()
	var chained time.Time // the last job's end, when the next follows it at once
	for h != nil {
		res := e.run(jc, h, chained)
		var now time.Time // the next job's start, read before the lock
		if e.ownRunner && h.j.Func != nil && !res.Ended.IsZero() {
			// A function's end, read as it returned: a job taken next, in
			// the same critical section, starts now, to within the
			// bookkeeping between. One clock read per function job.
			now = res.Ended
		} else if e.events != nil {
			now = time.Now()
		}
		e.mu.Lock()
		e.current[i] = nil
		e.running--
		e.retire(h, &res)
		// While jobs wait, take the next one in the same critical section:
		// one lock per job instead of two.
		next := e.start(i, now)
		e.mu.Unlock()
		// Deliver without the lock: whoever waits may call us at once.
		h.complete()
		chained = now
		if next == nil {
			chained = time.Time{}
			e.mu.Lock()
			next = e.take(i)
			e.mu.Unlock()
		}
		h = next
	}
	e.mu.Lock()
	e.workers--
	last := e.workers == 0
	e.mu.Unlock()
	if last {
		e.finish()
	}
}

// take returns the next job worker i may start, waiting as long as
// needed, or nil when the Executor is draining and nothing is left to
// start. e.mu is held.
func (e *Executor) take(i int) *Handle {
	for {
		if h := e.start(i, time.Time{}); h != nil {
			return h
		}
		if e.state != stateOpen {
			// Draining began with emptying the buffer, and nothing
			// enters it afterwards: this worker is done.
			return nil
		}
		e.work.Wait()
	}
}

// start pops the next job and marks it running on worker i, with the
// worker's context, if one may start now, or returns nil. now, if set, is
// the time to report for its start (with an observer). e.mu is held.
func (e *Executor) start(i int, now time.Time) *Handle {
	if e.running >= e.parallelism() || e.queue.Len() == 0 {
		return nil
	}
	h := e.queue.Pop()
	h.state = stateRunning
	// From here on Cancel and Close (under e.mu) end the job through its
	// worker's context: it is ready before the job is seen running.
	e.contexts[i].next()
	e.current[i] = h
	e.running++
	e.started++
	e.changes++
	e.admit(now)
	if e.events != nil {
		// One clock read for the event and Running, if the caller did not
		// read it: without an observer the job costs none here (the clock
		// is slow on some machines).
		queued := e.epoch.Add(h.queued)
		if now.IsZero() {
			now = time.Now()
		} else if now.Before(queued) {
			now = queued // it came in after the caller's reading
		}
		h.run = &runInfo{started: now}
		e.events.push(eventRecord{kind: EventStarted, h: h, time: now, waited: now.Sub(queued)})
	}
	if e.running < e.parallelism() && e.queue.Len() > 0 {
		e.work.Signal() // room for more: pass the wake-up on
	}
	return h
}

// jobContext is the context a worker runs its jobs with. Jobs share it
// until one of them is interrupted (cancelled, timed out or killed), which
// cancels it; the next job then gets a new one. So a job costs no context
// of its own, and a Runner must not keep its context beyond Run's return.
type jobContext struct {
	ctx  context.Context
	stop context.CancelCauseFunc
	// The worker that runs the jobs, for ReportProcess: its job is
	// e.current[worker], under e.mu.
	e      *Executor
	worker int
}

// jobContextKey finds a job's jobContext from its context.
type jobContextKey struct{}

// next makes ready the context for the next job, new if the last one
// ended. It is called under the Executor's lock as the job starts, once
// the job before it is off the books: only the job it is for can end it
// from then on.
func (c *jobContext) next() {
	if c.ctx == nil || c.ctx.Err() != nil {
		c.release()
		c.ctx, c.stop = context.WithCancelCause(context.WithValue(context.Background(), jobContextKey{}, c))
	}
}

// ReportProcess tells the Executor that runs the job of ctx (the context
// its Runner was given) which process runs it and where its output is
// being written, so that Executor.Running shows them, for example to
// follow a running job's output. ProcessRunner reports its processes; a
// Runner of one's own may report its own, before its Run returns. Outside
// an Executor's job it does nothing.
func ReportProcess(ctx context.Context, pid int, output string) {
	c, ok := ctx.Value(jobContextKey{}).(*jobContext)
	if !ok {
		return
	}
	p := &reported{pid: pid, output: output, at: time.Now()}
	r := &runInfo{proc: p} // made before the lock, in case the job has none
	c.e.mu.Lock()
	if h := c.e.current[c.worker]; h != nil {
		if h.run != nil {
			h.run.proc = p
		} else {
			h.run = r
		}
	}
	c.e.mu.Unlock()
}

func (c *jobContext) release() {
	if c.stop != nil {
		c.stop(nil)
	}
}

// run runs one job and completes its Result. The job's context ends with
// the cause of Cancel or Close, and after Job.Timeout with ErrTimeout. A
// job whose context ended and that did not succeed ends as the cause says
// (Interruption), whatever the runner made of it. A panicking Runner fails
// the job instead of the process.
//
// A function job on the default runner whose start is known (started: the
// end of the job before it on this worker, which it follows at once) costs
// one clock read, at its end.
func (e *Executor) run(jc *jobContext, h *Handle, started time.Time) (res Result) {
	ctx := jc.ctx // made ready by start; ended by Cancel or Close since, if they came
	if h.j.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, h.j.Timeout, ErrTimeout)
		defer cancel()
	}
	defer func() {
		if v := recover(); v != nil {
			stack := debug.Stack()
			e.log.Error("runner panicked", zap.String("job", h.j.ID), zap.Any("panic", v), zap.ByteString("stack", stack))
			res = Result{Status: StatusFailed, ExitCode: -1, Err: &PanicError{Value: v, Stack: stack}}
		}
		res.ID = h.j.ID
		if res.Status == 0 {
			res.Status = StatusSucceeded
			if res.Err != nil {
				res.Status = StatusFailed
			}
		}
		if res.Status != StatusSucceeded {
			if st, cause := Interruption(ctx); st != 0 {
				res.Status, res.Err = st, cause
			}
		}
		killed := res.Status == StatusKilled && res.PID != 0
		if res.Status == StatusFailed || res.Status == StatusTimedOut || killed {
			// Once per job, with why: what an operator reads in the log.
			// A process killed as its program stopped hard (Close):
			// which, and how far it got, is as much the operator's to
			// know. (A job of a remote Runner still waiting for a
			// worker, with no process, is no news.)
			msg := "job failed"
			if killed {
				msg = "job killed"
			}
			e.log.Warn(msg, zap.String("job", res.ID), zap.String("command", logLine(h.j.job())),
				zap.Stringer("status", res.Status), zap.Int("exit", res.ExitCode), zap.Error(res.Err),
				zap.ByteString("stderr", stderrEnd(res.Stderr)))
		}
	}()
	if e.ownRunner && h.j.Func != nil {
		return e.fn.run(ctx, h.j.Func, h.j.ID, started)
	}
	return e.runner.Run(ctx, h.j.job())
}

// logLine is a job as a log line shows it: its String, or for a script
// the String of its Payload when it has one (a protocol's job made from a
// file: the file), else the script's text; at most 256 bytes of it.
func logLine(j Job) string {
	s := j.String()
	if j.Func == nil && j.Script != "" {
		s = j.Script
		if p, ok := j.Payload.(fmt.Stringer); ok {
			s = p.String()
		}
	}
	if len(s) > 256 {
		s = strings.ToValidUTF8(s[:256], "") + "…"
	}
	return s
}

// stderrEnd is the end of a job's standard error for a log line: its
// last 512 bytes at most.
func stderrEnd(b []byte) []byte {
	const n = 512
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// finish runs once, after the last worker returned: it lets the observer
// drain its events and then marks the Executor done.
func (e *Executor) finish() {
	if e.runDir != nil {
		e.runDir.finish()
	}
	if e.events != nil {
		e.events.close()
		e.events.wait()
	}
	close(e.done)
}
