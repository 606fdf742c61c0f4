// Package laborotest checks implementations of laboro's two extension
// points against their contracts, in the tests of whoever writes one: a
// Queue (an ordering policy: priorities, fairness) and a Runner (the
// process and func runners, and every protocol's manager side, which hands
// jobs to remote workers).
//
//	func TestMyQueue(t *testing.T) {
//		laborotest.Queue(t, func() laboro.Queue { return new(MyQueue) })
//	}
//
//	func TestMyRunner(t *testing.T) {
//		laborotest.Runner(t, laborotest.Harness{
//			Start: func(t *testing.T) laborotest.System { … a manager and two workers … },
//			Job:   func(id, script string) laboro.Job { return myproto.NewJob(id, script) },
//		})
//	}
//
// Queue checks the ordering contract on its own (with a model of what any
// ordering must keep) and then inside an Executor. Runner runs real jobs
// through an Executor over the Runner: many at once, each ending with
// exactly one Result; Close, Job.Timeout and Executor.Cancel of a running
// job, each ending it at once with its status and, where the Runner can
// reach the job's process, killing it; and, for remote Runners, a worker
// lost mid-job, whose job runs again and still ends once. Every check
// fails if a goroutine it started outlives it.
//
// The checks run real processes (/bin/sh) and take a few seconds.
package laborotest
