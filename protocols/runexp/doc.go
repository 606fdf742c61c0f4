// Package runexp is protocol 1.3 of runexp: a manager hands job scripts to
// runners that ask for them, and each runner runs them in N parallel
// workers that share one connection, and sends the outputs back. Both
// sides interoperate with the reference peers (the manager queueexp and
// the runner runexp) byte for byte.
//
// Manager is the manager side, a laboro.Runner: jobs submitted to an
// Executor built on it go to runners as they ask, so the Executor's
// buffer, Stop, Cancel, Job.Timeout, Queued and concurrency apply to them.
// Its dispatch is the project's one transport.Dispatcher: the line of
// jobs waiting for a runner, the jobs out at each runner, the requeue of a
// lost runner's jobs at the front of the line, and the dropping of results
// that come too late. A job's name is its Job.ID and its type (JobType)
// travels in Job.Payload (see NewJob), or its FolderJob does, which names
// its file in log lines (Folder.Load); Job.Meta is the caller's. Folder is
// a job folder as the reference manager serves it (its job files, and a
// result file per job). Runner is the runner
// side; it runs each job through a local Executor as a process. The
// binaries cmd/runexp-manager and cmd/runexp-runner are thin wrappers.
//
//	m := &runexp.Manager{Policy: runexp.BanPolicy{}}
//	ex, _ := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(64), laboro.WithConcurrency(64))
//	go m.Serve(ctx, ln)
//	h, _ := ex.Submit(ctx, runexp.NewJob("sweep/run-17", ".sh", script))
//	res, _ := h.Wait(ctx) // res.Output holds what the runner sent back
//
// # The wire
//
// A session, message by message (→ runner to manager, ← manager to
// runner):
//
//	→ SALUTON; MI testhost        ← VERSIO 1.3
//	→ KOMPRENAS                   ← ALIGI __defaulte__
//	→ JES
//	→ PETO                        ← LABORO sub/okjob .sh 43
//	→ PRETA                       ← 43 bytes: the job file
//	→ REZULTO sub/okjob success 262
//	                              ← PRETA
//	→ 262 bytes: the output       ← RICEVIS
//	→ PETO                        ← FINO
//	→ FINO ANKAU
//
// Messages have no terminator: each is sent with one write and read with
// one read of at most MaxMessage (1024) bytes, as the reference peers do;
// they reject a message with a trailing newline, so we never send one. We
// accept one, for a person typing into a terminal. Payloads are read to
// their SIZE, which is checked against a limit (DefaultMaxSize unless
// configured) before anything is written; a message longer than
// MaxMessage is refused.
//
// # Two messages in a row
//
// The conversation is lock-step except where a message gets no answer:
// the runner's JES, which its first PETO follows; a PRETA before an empty
// payload (a runner's for a job of 0 bytes, then its next message; a
// manager's for an output of 0 bytes, then RICEVIS). A reference peer
// reads one message per recv, so if the second reaches it before it has
// read the first, it reads both at once and gives up (the reference
// manager then leaves the runner waiting forever). Nothing on the wire
// says when the peer has read a message, so both sides keep one rule:
//
//	A message written with no read since the previous message waits until
//	the peer's host has acknowledged every byte sent (the socket's send
//	queue is empty; Linux), then Pause (DefaultPause, 50 ms) more.
//
// The acknowledgement makes the gap hold at the peer whatever the network
// does; the pause is the time the peer's thread has to be scheduled, a
// few milliseconds even on a loaded machine. It costs 50 ms once per
// connection and per empty job or output. Against the reference manager
// it took our runner from 27 of 30 handshakes to 30 of 30 (and 100 of 100
// with two CPU hogs running). Still, a reader that is slower than that
// may see two messages, so both our sides split a read that holds a
// whole fixed word followed by another message's keyword ("JESPETO",
// "PRETAREZULTO ..."), reading up to two messages at once.
//
// Grammars, from the reference: host names [-_a-zA-Z0-9]+; VERSIO
// \d+(\.\d+)?, and a runner requires equality with 1.3; LABORO
// (.+) (\.[^ ]+) (\d+), the name being the job file's path under runs/
// without extension (it may hold '/' and spaces), the type its extension
// with the dot; REZULTO (.+) (success|failure) (\d+). The default group
// is the literal __defaulte__; a runner of another group leaves after
// ALIGI.
//
// # Where the code goes beyond the spec
//
//   - Waiting for work. The spec's manager has a fixed list and says FINO
//     once it is exhausted. A Manager serves an Executor whose jobs may
//     still be coming, and whose jobs come back when a runner dies. So a
//     PETO with no job pending waits up to IdleWait for one, and is then
//     answered ATENDI (the reference runner waits 10 s and asks again);
//     FINO is said only after Finish, once no job is pending and no other
//     runner has one out: a job that comes back from a runner that died
//     then still finds runners. A runner whose last jobs are out at itself
//     is told FINO and reports them from state 5, as the spec allows.
//     While a PETO waits, the runner's other workers cannot talk, so a
//     runner with jobs out waits 5 ms at most. A Runner's worker told
//     ATENDI asks again at once when the answer took a while (250 ms or
//     more: the manager waited for work, so an idle runner takes a new job
//     as it comes), else after HoldWait (a second at most while other
//     workers of the runner have jobs out: a job that comes next finds a
//     free worker soon), or as soon as another of its workers receives a
//     job or reports one: jobs flow again, or the manager's verdict may
//     have changed. (A runner whose workers were all held once its line
//     ran dry would otherwise run one job at a time, for up to HoldWait,
//     when jobs came again.)
//   - FINO on the runner side. The spec raises MASTERSTOP on ELIRI only;
//     our runner raises it on FINO too, since the reference manager
//     answers nothing but REZULTO and FINO ANKAU after FINO, and another
//     worker's PETO would break it. The last worker says FINO ANKAU, also
//     after ELIRI or when the runner is stopped, without a FINO to answer.
//   - State 5. A PETO there (a worker that finished a job after its
//     sibling got FINO) is answered as in state 2: a job, if one came
//     back, else FINO again.
//   - Lost runners. A runner that disconnects, breaks the protocol, or
//     sends a REZULTO for a job it was not sent (the spec: drop it) loses
//     its connection; its jobs go back to the front of the line at once
//     (a runner that reconnects starts a new session: it killed its jobs
//     when it lost the old one).
//   - No cancel. The protocol has no message to stop a job. A job whose
//     Run ends first (Executor.Cancel, Job.Timeout, Close) ends at once
//     on the manager, as the Dispatcher does for every protocol, and the
//     runner runs it to its end: its REZULTO is then read and dropped
//     (the output's file removed), and the runner keeps its connection. A
//     job submitted again under the same name is not sent to a runner
//     that still runs the old one, as its REZULTO could not tell them
//     apart. The Manager leaves Job.Timeout to the Executor.
//   - Lost managers. The spec's runner learns that its manager is gone
//     only when it next talks to it. Ours reads the connection while its
//     jobs run and no worker talks (the manager says nothing then), so a
//     manager that goes away is seen at once; a broken session, and
//     Runner.RunDrain's hard stop, kill the running jobs with their
//     process groups: no job runs on for nobody once the runner is done.
//   - ATENDI and the ban policy. BanPolicy is the reference's --ban: ELIRI
//     below 60% success after 10 jobs; ATENDI with more than 2 failures
//     among the last 10, but only while the runner has jobs out (with none
//     out, waiting could not change its record, and the reference would
//     hold it forever).
//   - Deadlines. Every handshake step and every exchange (an answer, a
//     payload's progress) has a deadline (DefaultTimeout); the wait for a
//     runner's next request has none, since a job may run for hours.
//
// # Who may connect
//
// The wire has no room for a secret, and the reference runner sends none,
// so a Manager cannot tell a runner from anyone else who connects: anyone
// can take jobs (and read their scripts) and report results. What it can
// check is where a connection comes from: Manager.Allow lists the
// addresses runners may connect from, and a connection from elsewhere is
// closed before a word is said. runexp-manager listens on the loopback by
// default and needs --allow to listen beyond it. Across a network that is
// not trusted, keep the manager on the loopback and let runners reach it
// through a tunnel (ssh -L), which authenticates them; TLS client
// certificates through a wrapper (stunnel) would do as well.
//
// # Results
//
// The runner's output starts with the reference's header, "runexp
// summary: success" (or failure) and a blank line, then the start and end
// times, the command, the exit status (and "signal: N (name)" when a
// signal ended the process), a blank line and the program's
// output (standard output and error together). As in the reference,
// success is decided from the output, not the exit status, unless the
// runner is told otherwise (Runner.UseExitStatus): see Runner.
//
// REZULTO says only success or failure. For a failed job the Manager reads
// the rest from the output it received: Result.ExitCode is the exit status
// the header gives (this package's "exit status: N", or the reference's
// "Program exited with status S", a wait status), -1 when it gives none or
// the process ended by a signal, which Result.Err then names ("killed by
// signal 9 (killed)"); Result.Stderr is the output's last 4 KiB
// after the header, where a runner of this package puts the job's standard
// error (the reference's runner leaves it on its own terminal).
package runexp
