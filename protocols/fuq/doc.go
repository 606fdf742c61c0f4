// Package fuq is the foreman–worker protocol of fuq: a foreman pushes the
// tasks of its jobs to workers with free processors, and workers run them
// and report each one's end. Every request and its reply are paired by a
// sequence number.
//
// Foreman is the foreman side, a laboro.Runner whose jobs are fuq jobs of
// NumTasks tasks (NewJob: the JobDescription travels in Job.Payload). Each
// task is a ticket of a transport.Dispatcher, keyed by its {JobId, Task}
// pair; each worker's connection takes from it as many tasks as the worker
// has free processors and pushes them in a JOB. Worker is the worker side,
// which runs tasks through a local Executor. Control is the user's API to
// a running foreman (submit, status, cancel, stop), which cmd/fuq-foreman
// serves on a Unix socket. The codec (codec.go, bodies.go) and the
// sequence-number state machine (Seq, seq.go) start no goroutines and do
// no I/O.
//
//	f := &fuq.Foreman{}
//	ex, _ := laboro.New(laboro.WithRunner(f), laboro.WithPoolSize(16), laboro.WithConcurrency(16))
//	go f.Serve(ctx, ln)                       // workers connect here
//	h, _ := ex.Submit(ctx, fuq.NewJob("sweep", "/opt/bin/sim", 500, "/data", "/data/logs"))
//	res, _ := h.Wait(ctx)                     // once all 500 tasks have ended
//
// # The wire
//
// Every message starts with a 16-byte little-endian header: magic 0xC047
// (bytes 47 c0), type, error code (the spec's "subtype"), sequence number
// (u32), 4 bytes of padding, arg0 (u32). HELLO, JOB, UPDATE and CANCEL
// carry a msgpack body whose length is arg0, checked against a limit
// (DefaultMaxBody) before anything is allocated. Bodies are maps keyed by
// the reference's Go field names: a JOB is a list of Task {Task,
// JobDescription {JobId, Name, NumTasks, WorkingDir, LoggingDir, Command,
// Status}}; an UPDATE a StatusUpdate {JobId, Task, Success, Status,
// NewJob}; a CANCEL a list of {JobId, Task}; a HELLO {NumProcs, Running}.
// Our bytes equal the reference encoder's for every message of the
// project's wire vectors.
//
// OK's arg0 packs nproc<<16 | nrun: free processors in the high half, tasks
// running in the low half (the opposite of the order the spec's prose
// suggests; the reference is what interoperates). STOP's arg0 is the
// number of processors to give up, 0 for all, 0xFFFFFFFF to stop at once.
//
// # Where the code follows the reference rather than the spec
//
//   - The worker speaks first: HELLO {NumProcs: free processors, Running:
//     the tasks it still runs}, answered OK(nproc|nrun). The spec's table
//     has the foreman send OK(0) first; the reference worker does not wait
//     for it.
//   - UPDATE's arg0 is its body's length, as for every message with a
//     body; the processor counts travel in the OK replies.
//   - A task takes one processor. A JOB of more tasks than the worker has
//     free processors is answered ERROR(no procs), and its tasks go back
//     to the front of the foreman's line. That worker is offered no more
//     until it reports a task's end (UPDATE), or after a wait that
//     doubles from 20 ms to 10 s, so that a worker never stays without
//     work whatever it said. (The reference foreman drops the connection.)
//   - A worker runs a task as "Command <task number>" in WorkingDir, with
//     standard output and error in LoggingDir/<Name>_<Task>.log
//     (<Name>_<Task>-<i>.log when that exists), of mode 0666 less the
//     umask, as the reference's. The output is written to a <pid>.output
//     file in LoggingDir while the task runs and becomes the log when it
//     ends, so a task killed with its worker, or cancelled, leaves no log,
//     and its rerun elsewhere writes the only one.
//   - UPDATE says Success true with Status "done", or Success false with
//     "error encountered: …". A CANCEL names {JobId, Task} pairs; a
//     negative Task means every task of the job (the reference foreman
//     sends only that). The worker kills each named task's process group
//     and reports it with an UPDATE (Success false), as the reference
//     does: the reference foreman frees a processor only on UPDATE. Our
//     foreman drops the UPDATE of a task it cancelled.
//   - STOP(immediate) is not answered: the worker ends at once, killing its
//     tasks, as the reference exits.
//
// # Losing nothing
//
// When a worker's connection drops, its tasks run on; the UPDATEs it
// cannot deliver (and those sent but not acknowledged) go to its spool
// directory (write, sync, rename). It connects again (with backoff), names
// its running tasks in HELLO, and then sends what the spool holds,
// removing each once the foreman's OK has come; a worker restarted on the
// same spool sends what is left. While connected, UPDATEs go from memory,
// since a sync per task would halve the rate. The foreman holds a vanished
// worker's tasks for Foreman.Grace (10 s): named in a HELLO in that time,
// they are taken back; otherwise they go to other workers. A task may thus
// run twice when a worker is gone longer than the grace period; only its
// first outcome is recorded, and the other run is cancelled: a HELLO that
// names a task that has ended gets a CANCEL for it, and one that names a
// task another worker took meanwhile takes it back, and that other worker
// gets the CANCEL.
//
// # Cancelling
//
// When a job's Run ends early (Executor.Cancel, the Job.Timeout that the
// Executor applies, Close) or Foreman.Cancel is called, its tasks waiting
// for a worker leave the line and its running ones get a CANCEL on their
// workers, which kill their process groups; Run returns at once, with the
// status laboro.Interruption gives (StatusKilled with ErrJobCancelled for
// Foreman.Cancel). The UPDATE a worker then sends for a cancelled task is
// dropped.
package fuq
