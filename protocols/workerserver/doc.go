// Package workerserver is the HTTP system of the project's worker–master
// scheduling model: workers ask a master for jobs, run them, and report
// their progress and ends; the master keeps its job table on disk.
//
// Master serves the workers' three routes and a small user API, keeps
// its jobs, statuses and histories in a bbolt file (a restarted master
// loses nothing and accepts what workers replay from their caches; the
// jobs that ended first are forgotten beyond Master.MaxEndedJobs), and is a
// laboro.Runner, so the core's queue, Stop, Cancel, timeouts, Queued and
// drain apply to its jobs; it hands them out through a
// transport.Dispatcher, to which each worker is joined by its serverId.
// Worker is the HTTP client: its messages go through a link.Link (connect
// and reconnect, a file cache while the master is away, per-job ordering,
// pinging), and its jobs run through a local Executor as processes.
// cmd/workerserver-master and cmd/workerserver-worker are the binaries.
// A job's JobSpec (its worker code and params) is its Job.Payload (see
// NewJob); Job.Meta is left to the caller.
//
//	m := &workerserver.Master{Servers: map[string]string{"w1": "secret"}}
//	m.Open("jobs.db")
//	ex, _ := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(256), laboro.WithConcurrency(256))
//	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second,
//		ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute} // above Master.Hold
//	srv.RegisterOnShutdown(m.Release) // held pings answer at once
//	go srv.ListenAndServe()
//	id, _ := m.NewID() // "1", "2", …: ids that any worker takes
//	h, _ := ex.Submit(ctx, workerserver.NewJob(id, "resize", params))
//
// # The wire
//
// A worker POSTs application/x-www-form-urlencoded forms, with Accept:
// application/json, to three configurable routes (Paths): its own status
// (Paths.Status + serverId), a job's status (Paths.Job + jobId) and a ping
// (Paths.Ping + serverId). Every form carries serverId and serverPassword;
// status forms carry status and data (a JSON document as a string). The
// answer is JSON (Answer): the worker uses data; error, formErrors or a
// redirect to /login is a failure. A worker's statuses are Connecting (or
// Reconnecting), Online with {"startup":true,"version":…,"workers":[{code,
// version}]}, then Stopping and Offline. A job's are Processing with
// {"progress":{total,done,percent}}, then Done with the result, or Failed
// or Cancelled with {"error":{message,name,stack}} (a Worker here sends
// the first Processing once the job has run Worker.FirstProgress, so a
// short job sends its end alone; a job whose output is over
// Worker.MaxResult, 256 KiB by default, is Failed with the limit named; a
// Worker here adds to a Failed job's error its exitCode and the end of its
// stderr, which the master gives to the job's Result: see ErrorDetail). A
// ping's answer is
// {data:{job:{jobId, worker, …params}, cancelJobs:[ids]}}. A version in
// Online may be any JSON value (the reference sends a module's `version`
// as it is, often a number): it is kept as text (Version). A Worker here
// adds to every form its process's instance (FieldInstance), and to its
// own statuses its host, pid and cache folder (FieldProcess); the
// reference sends neither, and ignores a 409's Retry-After and
// HeaderRefusal (see below).
//
// A job's "worker" names the code that runs it: the reference loads
// workers/<worker>.js; a Worker here runs the executable CodeDir/<worker>
// with the params as JSON on standard input, and its standard output (JSON;
// other text is sent as a JSON string) is the Done data.
//
// The reference worker, worker-server 0.9.2 (Node), runs against a Master:
// scripts/interop/workerserver.sh runs it, and reference_test.go plays it
// byte for byte.
//
// # Choices
//
//   - A worker process that starts says Connecting, replays its cache,
//     then says Online. At that Online the master puts back in line the
//     jobs still Processing at that worker: they died with its previous
//     process (a worker that only reconnects says Reconnecting and keeps
//     them). A worker that says Stopping or Offline gives its jobs back
//     at once.
//   - Job ids are numbers when the master picks them (NewID, the user
//     API): the reference reads the id of a job whose status it had to
//     cache back from the file name as a number, and an id like "api-1f"
//     came back as NaN, its status refused, its worker reconnecting for
//     ever. Ids a user picks are taken as they are; one that is not a
//     decimal number (NumericID) is logged, once, and `submit -id` warns.
//   - A server gets only jobs for the codes it offered at the last Online
//     that listed them ("workers"): the reference lists them at the first
//     Online of its process only, and its Online "{}" after a reconnection
//     keeps them (it crashes on a job for a code it has no module for). A
//     server that never listed its codes gets any job; one that listed
//     none gets none. A Queued job whose code no server (but those
//     Stopping or Offline) offers is shown so (JobRecord.Unoffered), and
//     the master logs it, once per code.
//   - A worker that shows no life (no request of any kind) for
//     Master.Lease, 90 s by default (three of the reference's 30 s pings;
//     a running job also reports progress every 10 s), loses its jobs to
//     the others. So does a job its worker does not speak of within a
//     lease of being handed it, though the worker shows life: the answer
//     to the ping that handed it out never arrived. Each time, the job's
//     history records the master's Queued, with the reason.
//   - A job that went back in line may end twice: the first result wins.
//     A Done from a worker that lost the job ends it if it comes first,
//     and the worker that has it then is told to cancel it; a Failed or
//     Cancelled from a worker that lost it is history only.
//   - A job whose Run ends first (Executor.Cancel, the Job.Timeout the
//     Executor applies, the Executor's Close) becomes Cancelled in the
//     table at once; its worker gets its id in cancelJobs at its next
//     ping, and what it reports afterwards is history only. Master.Cancel
//     (the user API's cancel) of a job at a worker waits instead for the
//     worker to report it; should the worker lose the job first (a new
//     process of it comes Online, it leaves, it shows no life for a
//     lease), the job ends Cancelled then, and never goes back in line:
//     a job cancelled while its worker is down never runs again.
//   - A restarted master, given its Unfinished jobs again, holds each job
//     its table has Processing at a worker for that worker, until the
//     worker reports it, or lets a lease pass without doing so.
//   - A final status (Done, Failed, Cancelled) is never replaced; later
//     statuses, such as a Done replayed twice, are kept in the job's
//     history and answered with success, so that workers' caches drain.
//   - The table keeps the last Master.MaxEndedJobs jobs to end (100,000
//     by default), so that its file stops growing: the jobs that ended
//     first are forgotten as others end. A status for a job the table
//     does not have, forgotten or never there (a worker's cache replayed
//     to a master on a new table), is answered with success (status "")
//     and recorded nowhere, and the master logs it: the reference worker
//     sends its cache before its Online and, refused, would reconnect to
//     send it again for ever.
//   - A status the master refuses for what it is (400, 404, 409, 413) is
//     dropped by the worker with a log line instead of being retried
//     forever; a refusal for who sent it (401, 403, and the 409 of a
//     serverId in use, below) is kept and retried. A Worker whose password
//     the master refuses (401) before it has once accepted it stops at
//     once (ErrPasswordRefused: a typo must not look like a slow start);
//     once accepted, it keeps trying, warning, for a master restarted with
//     another servers file may take it again.
//   - One process per serverId. Two processes under one serverId (one
//     servers-file entry given to two machines, a worker started twice)
//     used to be taken for one server: the second's Online passed for a
//     restart of the first, whose jobs went back in line and ran twice;
//     the server's cancels went to whichever process asked first; either
//     one's Stopping gave the other's jobs back and left it, alive, never
//     given another job. The master now keeps the process that holds each
//     serverId (ServerRecord.Process: its instance, FieldInstance, drawn
//     by each Worker's Run) and refuses every request of another one, 409
//     with HeaderRefusal RefusalInUse, Retry-After and a message naming the
//     holder, while the holder shows life: until it says Stopping or
//     Offline, or for a lease (Master.Lease, DefaultLease if none) after
//     its last request ended. A Worker that starts on the holder's host
//     with the holder's cache folder is its restart, and is taken at once
//     (a Worker locks its CacheDir: the holder has ended); any other is
//     taken within a lease of the holder's end, which a Worker refused
//     waits for, trying again, before it stops with ErrInUse; it stops
//     sooner, at the refusal after the holder made a request, which
//     HeaderHolderRequests counts (an idle holder asks again within a
//     Hold and its ping interval: 50 s by default), for the holder then
//     lives. A restarted
//     master keeps the holder its table names for a lease from Open.
//     Processes that send no instance (the reference's) are one process
//     to the master, as before, and other than any that does.
//   - A ping that finds no job waits for one, up to Master.Hold (20 s by
//     default, under the master's one-minute write timeout and under the
//     lease; our Worker's HTTP timeout is 30 s): a job that comes in line
//     is handed to an idle server at once (BenchmarkPickup) instead of at
//     its next ping, 30 s later for the reference. A job to cancel at that
//     server, its Stopping or Offline, and Master.Release (which a server
//     calls as it shuts down) end the wait with the answer as things
//     stand. The wire is unchanged: the ping's answer only comes later
//     (the reference's request.post sets no timeout, and its job lock
//     keeps one ping out at a time).
//   - A worker pings only when it has a free slot. So that cancelJobs
//     reach a worker whose every slot is busy, a Worker asks for them with
//     each Processing (the form field cancels, FieldCancels), and they come
//     in its answer: within the progress interval (10 s), or as a job ends
//     (below). The reference's worker asks for none, and hears of them at
//     its next ping. A Worker cancels a job through its local Executor
//     (Executor.Cancel: the job's process group is killed) and reports it
//     Cancelled.
//   - A ping may bring several jobs: a Worker with more than one free
//     slot says how many in the form field slots (FieldSlots), and the
//     master answers with up to that many, at most MaxSlots, all handed
//     out in one commit: the first as job, the others in jobs
//     (PingData.Jobs). A worker with 4 slots thus fills them in one round
//     trip instead of four. The reference's worker sends no slots and gets
//     one job at most, as before.
//   - The end of a job (Done, Failed, Cancelled) may ask for jobs too: a
//     Worker sends slots with it, its free slots then (the one the job
//     freed among them), and the master answers as a ping would, without
//     waiting (jobId and status, and job, jobs, cancelJobs), the end and
//     the hand-out in one commit. A worker kept busy thus sends one request
//     a job instead of two, and pings only when an end brought fewer jobs
//     than it asked for (such a ping may be held). Only a server Online
//     gets jobs so: a new process replays the ends of its cache between
//     its Connecting and its Online, which gives back the jobs it had. A
//     master that does not know the field answers an end as before, and
//     the Worker pings.
//   - The user API (/api/jobs, /api/servers) asks for no password: serve
//     the master on a trusted address.
package workerserver
