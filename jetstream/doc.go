// Package jetstream runs laboro jobs on NATS JetStream, so that jobs
// survive a manager's restart and reach workers on many machines.
//
// A Manager is a laboro.Runner: give it to an Executor with
// laboro.WithRunner, and each job the Executor runs is published to the
// JOBS work-queue stream (file storage; the job id as Nats-Msg-Id, so a
// re-submitted job is not duplicated) while Run waits for its result on the
// RESULTS stream. The id is the job's name in the streams, for good: a job
// submitted again under its id gets its stored outcome, and another job
// under that id (the Executor's job_1 of a program run again) is refused
// with laboro.ErrDuplicateID. The Executor's buffer, Stop, Queued and concurrency keep
// their meaning on top of it: a job reaches the stream only once the
// Executor runs it. Workers, in any number of processes, pull jobs with one
// durable consumer, run each through a local laboro.Executor as a process,
// keep long jobs alive with in-progress acknowledgements, publish the
// result (in chunks when the output is large) and only then acknowledge the
// job.
//
// A Run whose context ends first (Executor.Cancel, Job.Timeout, the
// Executor's Close) returns at once, and the job ends for good: the end is
// recorded in the RESULTS stream, on a subject that workers listen to, and
// the job leaves the work queue. Its worker cancels it in its own Executor,
// which kills the job's process group; a worker that gets the job later
// does not run it; a result that comes late is dropped, the recorded end
// being the job's outcome. A job travels with the deadline of its Run, so
// that a worker does not start it past that deadline and kills it there,
// should the end never reach it (a JobOptions payload may bound its run on
// the worker instead). Manager.Close, by contrast, leaves the jobs in the
// streams, for the next Manager.
//
// Delivery is at least once: a worker stopped mid-job hands its job back,
// for another worker to run at once; one that dies has its job handed back
// by the Service within seconds of its silence (three heartbeats, each
// 2 s), also when it died while no Service ran (a Service that starts reads
// each worker's last heartbeat, kept in the <Stream>_WORKERS stream), and
// without a Service redelivered after Config.AckWait; a job
// delivered Config.MaxDeliver times
// without a result ends StatusFailed with an error matching ErrMaxDeliver
// (the Manager listens for JetStream's max-deliveries advisory, and finds
// the jobs whose advisory came while no Manager listened); duplicate
// results are dropped by job id and attempt, the first complete one wins.
//
// A Service, what the laboro command's `serve` runs, reads the jobs that
// Clients submit to the SUBMITTED stream as it has room, runs them through
// an Executor over a Manager, answers the Clients' status requests (counting
// the submissions it has not read yet) and cancels jobs at their request
// (those not read yet too); it rebuilds all it knows from the streams when
// it starts again.
// A Client submits batches, follows them, cancels jobs and reads their
// results, from any machine that reaches NATS.
//
// With no NATS URL, StartEmbedded runs a server with JetStream inside the
// process, so that one program runs everything on one machine:
//
//	srv, err := jetstream.StartEmbedded(dataDir, "127.0.0.1", -1)
//	if err != nil { ... }
//	defer srv.Shutdown()
//	nc, err := nats.Connect(srv.URL())
//	if err != nil { ... }
//	defer nc.Close()
//	m, err := jetstream.NewManager(ctx, nc, jetstream.Config{})
//	if err != nil { ... }
//	defer m.Close()
//	w := &jetstream.Worker{Conn: nc, Concurrency: 4}
//	go w.Run(ctx) // or in other processes, on other machines
//	ex, err := laboro.New(laboro.WithRunner(m))
//	...
package jetstream
