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
// The messages travel over either of two transports, the same codec and
// Seq over both (conn.go, web.go): the spec's plain TCP stream
// (Foreman.Serve, Worker.Addr), or the reference's HTTPS and websocket
// (Foreman.ServeWeb, Worker.Web), over which our foreman serves the
// reference's workers and our worker joins the reference's foreman.
//
//	f := &fuq.Foreman{Secret: secret}
//	ex, _ := laboro.New(laboro.WithRunner(f), laboro.WithPoolSize(16), laboro.WithConcurrency(16))
//	go f.Serve(ctx, ln)                       // workers connect here
//	go f.ServeWeb(ctx, wln, fuq.WebConfig{Auth: secret, TLS: tlsConfig}) // and the reference's here
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
// Over TCP, when the Foreman has a Secret, a worker and the foreman each
// prove they hold it before the first message, without sending it: the
// foreman sends "FUQAUTH2" and 32 random bytes, the worker answers with 32
// of its own and their HMAC-SHA256 keyed with the secret, and the foreman
// answers 'K' and its own HMAC of both or, refusing, 'N' and closes
// (Worker.Run then ends with ErrAuth; with ErrForemanUnproven when the
// foreman's proof is wrong, so that a program holding the foreman's
// address while it is down hands the worker no command). This step is
// ours: the reference has no TCP transport. Over TCP, messages follow one another on
// the stream. Waiting for the
// next message has no deadline (the spec has nothing to keep a quiet
// connection alive; TCP keepalive finds a dead peer); once a message has
// begun, the whole of it must arrive within Timeout, so a peer that
// stalls, or trickles, inside a message fails. A body is allocated as its
// bytes arrive, not as announced, and a Foreman serves at most MaxConns
// connections (DefaultMaxConns): what slow peers can make it hold is
// bounded by MaxConns × MaxBody. Of those, one address holds at most
// MaxUnproven (DefaultMaxUnproven) before proving the secret, so that a
// host opening connections that say nothing cannot keep workers out.
//
// # The reference's transport: HTTPS and a websocket
//
// The reference speaks only this (its workers with fuqsrv -dispatch); it
// is not in the spec, and follows the reference's code:
//
//   - A worker logs in with POST /hello, JSON {"auth", "node", "pid",
//     "session", "nproc"} (the reference also knows "unique_name" and
//     "tags"): auth is the shared secret of the reference's config (auth
//     line of fuqsrv.conf), compared in constant time; a session other
//     than "" must be the foreman's. The answer is {"Name", "Session",
//     "Cookie"} (Go field names, a json.Encoder's line), Name being
//     node:pid:n, and a cookie fuq_foreman_auth (Path /, HttpOnly, 14
//     days). A wrong secret gets 403 "403 access forbidden", another
//     foreman's session 401, a malformed body 400. Our worker stops with
//     ErrAuth on 401 or 403.
//   - Then GET /node/persistent with the cookie becomes the websocket (no
//     cookie or one over 128 bytes: 401; one the foreman does not know:
//     403; any other method: 405). Our worker logs in again once when
//     its cookie is refused; the reference's never logs in again, and so
//     our cookie is not a random key kept in a database, as the
//     reference's, but signed (HMAC-SHA-256, with a key drawn from the
//     secret) over the worker's name and the cookie's expiry: a foreman
//     started again with the same secret takes it, and the reference's
//     workers come back to it.
//   - Each fuq message is one binary websocket message (a text message,
//     or bytes after the message, end the connection). A websocket
//     message longer than the header and MaxBody is refused, as a body
//     is. HTTP/1.1 only, as a websocket needs.
//   - Each end pings the other every 60 s (the reference's heartbeat: a
//     fifth of its 5-minute timeout; it closes the connection after two
//     pings unanswered) and answers pings at once. A peer from which
//     nothing came for PingInterval plus Timeout is dead; once a message
//     has begun, it must come whole within Timeout.
//   - The reference's worker keeps its sequence numbers across the
//     connections it makes (its first HELLO after a reconnect may be
//     numbered 64), and may send the UPDATE of a task before its HELLO on
//     the new connection; our foreman records the UPDATE and answers it
//     OK(0xFFFF|0xFFFF), as the reference foreman does, which makes the
//     worker send its HELLO.
//   - A JOB over the websocket carries one task. The reference's worker
//     takes a JOB's tasks one by one while it has a processor, runs the
//     ones it took, and answers ERROR(no procs, nproc|nrun) at the first
//     it has none for, without saying which it took; and it frees the
//     processor of a task only once it has handled the OK to that task's
//     UPDATE, so the JOB that follows that OK is often refused. A JOB of
//     one task is taken whole or refused whole. Over TCP a JOB carries as
//     many tasks as the worker has free processors.
//
// # Where the code follows the reference rather than the spec
//
//   - Sequence numbers are checked as loosely as the reference checks
//     them (its proto.Conn checks neither parity nor order): a message of
//     a request's type is a request whatever its number, unless it bears
//     the number of our request awaiting its reply; an OK that answers
//     nothing is dropped; a STOP(immediate) is honoured whatever its
//     number. Our own numbers follow the spec: each request's is the
//     smallest of our parity above every number sent or received, so
//     they move past the reference's, which skips (after HELLO 0, its
//     JOB is numbered 3). An ERROR that answers nothing, a request before
//     the worker's HELLO (at the foreman, other than UPDATE; at the
//     worker, any), or a RESET out of turn end the connection.
//   - The OK to a HELLO repeats the worker's counts, OK(NumProcs|number
//     of Running), as the reference foreman's does: the reference worker
//     quits on any other answer.
//   - The reference worker answers a CANCEL with OK(ncancelled|0); the
//     foreman takes no processor count from the OK to a CANCEL.
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
//     file while the task runs and becomes the log when it ends, so a task
//     killed with its worker, or cancelled, leaves no log, and its rerun
//     elsewhere writes the only one. That file is in a directory of the
//     worker's own in LoggingDir, .fuq-running-<random>, which goes with
//     the worker however it ends: removed by the worker, or by its reaper
//     when it is killed, or else by the next worker that uses LoggingDir,
//     on any host, once no live worker holds its lock (outputdir.go).
//   - UPDATE says Success true with Status "done", or Success false with
//     "error encountered: …"; it carries no standard error (no field of
//     the reference's holds it, and we add none): the foreman's line on a
//     failed job and submit -wait name the task's command and log, and
//     show the log's end (TaskLog) when it is readable on their host. A CANCEL names {JobId, Task} pairs; a
//     negative Task means every task of the job (the reference foreman
//     sends only that). The worker kills each named task's process group
//     and reports it with an UPDATE (Success false), as the reference
//     does: the reference foreman frees a processor only on UPDATE. Our
//     foreman drops the UPDATE of a task it cancelled.
//   - STOP(immediate) is not answered: the worker ends at once, killing its
//     tasks, as the reference exits (after answering OK).
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
