// Package transport is what every remote manager of the project shares,
// whatever its wire: the Dispatcher that hands jobs to workers, the
// accept loop of its server (Serve), its connections' deadlines (Deadlined)
// and their cut when the server ends (Interruptible), and the Backoff of
// everything that retries. Its subpackage link is the other end: a worker's link to its
// master (connect and reconnect, a spool on disk while the master is
// away, per-job ordering, pinging).
//
// # The spine of the remote systems
//
// A protocol's manager side is a laboro.Runner, so that an Executor's
// buffer, concurrency level, Stop, Cancel, timeouts and drain apply to
// remote jobs as to local ones. Its Run hands the job to a Dispatcher and
// waits; the protocol's connection code joins each worker to the
// Dispatcher and moves jobs and results between the Dispatcher and the
// wire:
//
//	d := transport.NewDispatcher[string, laboro.Job](transport.Config{Grace: 10 * time.Second})
//
//	// the Runner
//	func (m *Manager) Run(ctx context.Context, job laboro.Job) laboro.Result {
//		return m.d.Run(ctx, job.ID, job)
//	}
//
//	// a connection
//	w := d.Join(peer, func(ids []string) { sendCancel(conn, ids) })
//	defer w.Leave(err)
//	for {
//		t := w.Next(ctx, time.Second, nil)  // pull: the worker asked; or,
//		// push: select on w.Wake() and call w.Take(free, nil)
//		send(conn, t.Key, t.Value)
//		...
//		w.Complete(id, result)              // from the worker's report
//	}
//
// What the Dispatcher guarantees, so that no protocol has to:
//
//   - every job ends once: its first result is delivered to its Run; any
//     later one is discarded with its output closed (ErrLate);
//   - a worker that leaves gives its jobs back to the front of the line,
//     after Config.Grace (a worker that reconnects names the jobs it still
//     runs with Worker.Reclaim); a worker that shows no life (Worker.Renew)
//     for Config.Lease loses its jobs to others;
//   - a job whose Run ends (Executor.Cancel, Job.Timeout, Close) ends at
//     once: it leaves the line, or its worker is told to cancel it (the
//     function given to Join); a worker that cannot be told learns it when
//     it reclaims the job;
//   - a job handed out Config.MaxAttempts times without a result fails
//     with ErrAttempts, so that a job that kills its worker does not go
//     round for ever.
//
// The jetstream package's Manager needs no Dispatcher: NATS JetStream's
// work queue, acknowledgements and redelivery do the same there.
package transport
