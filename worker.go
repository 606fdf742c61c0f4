package laboro

import (
	"runtime/debug"

	"go.uber.org/zap"
)

// worker is one of the pool's goroutines. It waits until the buffer holds a
// job and fewer than min(concurrency, pool size) jobs run, runs the job,
// delivers its result, and repeats until the Executor drains.
func (e *Executor) worker() {
	e.mu.Lock()
	for {
		h := e.take()
		if h == nil {
			break
		}
		e.mu.Unlock()
		res := e.run(h)
		e.mu.Lock()
		e.running--
		e.retire(h, res)
		// Deliver without the lock: whoever waits may call us at once.
		e.mu.Unlock()
		h.complete(res)
		e.mu.Lock()
	}
	e.workers--
	last := e.workers == 0
	e.mu.Unlock()
	if last {
		e.finish()
	}
}

// take returns the next job this worker may start, waiting as long as
// needed, or nil when the Executor is draining and nothing is left to
// start. e.mu is held.
func (e *Executor) take() *Handle {
	for {
		if e.running < e.parallelism() && e.queue.Len() > 0 {
			h := e.queue.Pop()
			h.state = stateRunning
			e.running++
			e.admit()
			e.emit(Event{Kind: EventStarted, Job: h.job})
			if e.running < e.parallelism() && e.queue.Len() > 0 {
				e.work.Signal() // room for more: pass the wake-up on
			}
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

// run runs one job and completes its Result. A panicking Runner fails the
// job instead of the process.
func (e *Executor) run(h *Handle) (res Result) {
	defer func() {
		if v := recover(); v != nil {
			stack := debug.Stack()
			e.log.Error("runner panicked", zap.String("job", h.job.ID), zap.Any("panic", v), zap.ByteString("stack", stack))
			res = Result{Status: StatusFailed, ExitCode: -1, Err: &PanicError{Value: v, Stack: stack}}
		}
		res.ID = h.job.ID
		if res.Status == 0 {
			res.Status = StatusSucceeded
			if res.Err != nil {
				res.Status = StatusFailed
			}
		}
	}()
	return e.runner.Run(e.ctx, h.job)
}

// finish runs once, after the last worker returned: it lets the observer
// drain its events and then marks the Executor done.
func (e *Executor) finish() {
	e.kill(ErrClosed) // releases the context; no job is left to see it
	if e.events != nil {
		e.events.close()
		e.events.wait()
	}
	close(e.done)
}
