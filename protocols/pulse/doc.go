// Package pulse is the controller–worker protocol over Unix sockets:
// workers register with a controller and prove they are alive with
// pulses; the controller gives each free worker a task over the worker's
// own socket, fetches results, and reassigns the tasks of workers that
// fail or fall silent.
//
// Controller is the controller side, a laboro.Runner whose jobs are tasks
// (NewTask, NewTaskFile: the task travels in Job.Payload), so the core's
// queue, Stop, Cancel, timeouts and drain apply to them. It hands them to
// its workers through a transport.Dispatcher, the one every remote manager
// of laboro shares: each live worker takes the task at the front of the
// line when it is free. Worker is the worker side, which solves each task
// with a command run through a local Executor. The binaries
// cmd/pulse-controller and cmd/pulse-worker are thin wrappers.
//
//	c := &pulse.Controller{Dir: "/tmp/ctl"}
//	ex, _ := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(64), laboro.WithConcurrency(64))
//	go c.Serve(ctx)
//	h, _ := ex.Submit(ctx, pulse.NewTaskFile("input.bin"))
//	res, _ := h.Wait(ctx) // res.Output: what the worker's command printed
//
// # The wire
//
// The controller listens on <dir>/main.sock (/run/controller by default;
// the file appears once it accepts connections), each worker on
// <dir>/<worker_id>.sock. Each connection carries one
// request and one response, then closes. Every protobuf message is
// preceded by its length as a u64, little-endian; a ControlMsg or a
// WorkerResponse is followed by exactly extra_size raw bytes. Lengths are
// checked against Codec.Limits before anything is allocated, every read
// and write has a deadline (Timeout), and so has each exchange as a whole
// (a pulse: Timeout; a control message and its answer, extra bytes
// included: ExchangeTimeout, 6 × Timeout by default), so that a peer that
// sends or reads a byte now and then is cut (ErrTooSlow, logged at most
// once a second) and only its connection closes; the controller closes
// main.sock's connections as it stops, silent ones too. Each socket
// serves at most MaxConns
// connections at once (DefaultMaxConns), and a Controller keeps at most
// MaxWorkers workers registered (DefaultMaxWorkers). The messages are those of the spec
// (pulsepb, generated from pulse.proto). Numbering selects the enum
// numbers on the wire: the spec's (PULSE_REGISTER = 0, …) by default, or
// the reference's later renumbering, where 0 is INVALID everywhere and
// optional fields are gone; the Go values are the spec's either way.
//
// # Where the spec leaves room
//
//   - A worker is given tasks only once it has pulsed OK after REGISTER
//     (its socket exists by then; the reference worker pulses at once).
//   - A pulse's task_id is checked against the task given to the worker;
//     0 and the task it finished last are accepted, since a pulse may
//     cross a SET_TASK or a FETCH. A disagreement is confirmed with
//     GET_STATUS before the worker gets RESTART and is removed.
//   - BUSY: the task goes to another worker, and the busy one is asked
//     with GET_STATUS what it runs (RESTART if it is not ours); it is
//     offered no task before its next pulse. The hand-out counts as an
//     attempt (see TASK_FAILED): the reference worker of the spec's
//     numbering (commit d6e222d) never leaves PROCESSING after its first
//     task and answers BUSY forever, and a task must not wait for it
//     forever. A task whose last attempt was answered BUSY fails with an
//     error that matches ErrBusy ("the workers stayed busy") and
//     transport.ErrAttempts.
//   - TASK_FAILED: the task goes back to the front of the line, for the
//     next free worker (which may be the same one); once it has been
//     given out Controller.Attempts times (a worker lost, or BUSY, counts
//     too), the job fails with an error that matches ErrTaskFailed and
//     transport.ErrAttempts and starts with the last worker's words; when
//     they are our Worker's ("exit status 3: <stderr's tail>"), they give
//     the job's Result its exit status and standard error's tail too.
//   - A worker is dead when no pulse arrives within its next_pulse (60 s
//     when it announces 0); its task goes to another once the worker has
//     not come back within Controller.Grace (10 s). A worker removed so
//     (or after an exchange that failed) that was only out of touch, as
//     when the controller itself stalled, learns it from the UNKNOWN_ID
//     its next pulse gets, registers again, and names its task in its
//     next pulse: the task is taken back for it (transport.Worker.Reclaim),
//     even from another worker given it meanwhile (which gets RESTART),
//     and the outcome it offers is fetched, unless the task has ended: a
//     task has one result, the first fetched, and does not run again.
//     Only the process that held the task may take it back.
//   - RESTART is how the controller stops a task: when a job ends while a
//     worker runs its task (Executor.Cancel, Job.Timeout, Executor.Close),
//     that worker gets RESTART and is removed. Our Worker then kills the
//     task's process group and registers again, free; the reference
//     worker ends its session.
//   - A result that no job waits for any more (the task had ended on the
//     worker when its job ended, or another worker's result came first) is
//     still fetched, so that the worker is free, and thrown away.
//   - When Serve ends, the workers are forgotten, not told: the spec has
//     no message for it. They pulse on, and register again with the next
//     controller on the directory.
//
// # Two numberings that do not understand each other
//
// The spec's numbering and the reference's later one share their numbers
// with other meanings, so a peer that speaks the other numbering is
// mostly misread rather than refused: the later REGISTER (2) is the
// spec's FETCH_ME, read as a FETCH_ME from worker 0 and answered
// UNKNOWN_ID (2), which the later worker reads as UNKNOWN_TYPE; the
// spec's REGISTER (0) is INVALID in the later numbering, answered
// UNKNOWN_TYPE (2), which the spec's worker reads as UNKNOWN_ID. Neither
// reference says why. The Controller logs a pulse that makes sense only in
// the other numbering (a pulse from worker 0, which no worker is given; a
// REGISTER naming a worker and a task; a type only the other numbering
// has) once per peer process (its pid, from SO_PEERCRED), and a pulse
// from a worker id it never gave once per id, each with a hint. The
// Worker logs, once until it registers, an answer that makes sense only
// in the other numbering (UNKNOWN_TYPE to a pulse of a type both have,
// UNKNOWN_ID to a REGISTER, an error number its numbering lacks). The
// answers themselves are those of the spec.
//
// # Serving
//
// Controller.Listen makes the directory and binds main.sock, and fails
// at once when it cannot (ErrInUse when a controller answers there);
// ServeListener serves on it; Serve is the two together.
package pulse
