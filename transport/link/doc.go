// Package link is the worker side's link to its master, for every protocol
// whose worker reports to a master (the manager side's counterpart is the
// Dispatcher of the parent package, transport): when to connect and
// reconnect, when a message is sent and when it is cached on disk
// instead, the order of a job's messages, and when to ask for jobs. It
// implements the rules of the project's worker-master-scheduling
// specification (its reference is the Node project worker-server), and
// knows nothing of any wire: a protocol supplies a Master (Hello, Online,
// Send, Goodbye) and a ping function, and gets a Link, a JobStream per job
// and a Pinger.
//
//	l, err := link.New(master, link.Config{CacheDir: "/var/lib/worker/jobs"})
//	l.Start()                                  // connects in the background
//	p := l.NewPinger(askForJob)                // pings on connecting, and so on
//	j := l.Job(jobID)
//	j.Progress(body)                           // at most one per interval, the latest
//	j.Complete(final)                          // after every progress; sent or cached
//	p.JobDone()
//	err = l.Stop(ctx)                          // waits, says goodbye, ends its goroutines
//
// # The rules as implemented
//
// Connecting (Start, a failed send, or the reconnect timer): nothing if an
// attempt runs, the link is connected, or it stops. An attempt first waits
// for the Sends under way, then calls Hello (reconnect false until a Hello
// has once succeeded, true after), sends the cached messages oldest first,
// deleting each file once sent, calls Online, and tells the Pingers. Any
// failure on the way (Hello, a cached message, Online) ends the attempt,
// and another one comes after Config.Reconnect on the Clock.
//
// Sending: while stopping, or disconnected, a message is cached; while
// connecting, Send waits for the attempt to end; while connected, it is
// sent at once, concurrently with other Sends. A failed send is cached, and
// the link disconnects (later messages are cached) and reconnects at once,
// after the Sends under way have ended.
//
// Stopping: no more sends or connection attempts; a running attempt and the
// Sends under way are waited for; then Goodbye if connected. Every
// goroutine the link started has ended when Stop returns.
//
// # Choices where the rules are vague
//
//   - Waiting is part of connecting: while an attempt waits for the Sends
//     under way to end, new Sends wait for it too (instead of caching).
//   - A Send whose context ends while it waits for an attempt caches its
//     message; the attempt sends it before declaring the link connected.
//     More generally the link is declared connected only with the cache
//     empty (no Send under way), so a cached message never stays behind
//     newer messages of its job that are sent directly.
//   - Every failed master Send counts as a disconnection, even one whose
//     caller's context ended: the message must be cached, and the cache
//     must be replayed before anything newer of its job is sent.
//   - A failure while replaying the cache is a failed attempt: the next one
//     comes after Config.Reconnect, not at once, so that a message the
//     master keeps refusing does not make the worker reconnect in a loop.
//     (A Master should report a message refused for good as sent.)
//   - An attempt under way when Stop comes runs to its end (replay and
//     Online included), and Stop then says Goodbye: the master always sees
//     Online before Stopping, and the cache is delivered if it can be.
//   - If Stop's context ends first, what it waits for is cancelled (its
//     messages are cached) and there is no Goodbye.
//   - Progress: "schedule sending progress again" is taken literally: after
//     each progress send has ended, the next one is scheduled after
//     Config.Progress, and sends the latest body given, until Complete. A
//     progress given meanwhile only replaces that body. So a running job
//     reports at most, and at least, once per interval.
//   - Complete blocks until the completion is sent or cached. Progress
//     never blocks.
//   - Pinging: a ping that fails is treated as "no job" (the next one after
//     Config.Ping); the link does not take it for a disconnection, which
//     only a Send can reveal. At most one ping runs at a time; a trigger
//     while one runs makes another right after. There are no pings while
//     the link is disconnected or stopping; a new Pinger on a connected
//     link pings at once.
//
// # The file cache
//
// One file per key in Config.CacheDir: the key, with every byte outside
// [A-Za-z0-9._-] written %XX, then ".json" (a key of over about 190 bytes
// ends in its SHA-256 instead). Each file is written whole (a temporary
// file, synced, renamed, the directory synced), so a crash leaves the old
// message or the new one; New reads back what an earlier run left. A later
// message of a key replaces the earlier one, except that a final message
// is never replaced by a progress.
//
// Where this differs from the reference: its cache is <jobs dir>/<jobId>.json
// holding {status, data}. The file names are the same for job ids of the
// usual kind, but the content here is {"key", "final", "seq", "time",
// "body"}, with the protocol's message (which may well be the reference's
// {status, data}) as body: the link treats messages as opaque and needs to
// know which are final and their order, which the reference's file does
// not say. A body that is not compact JSON is kept as base64 in "bytes"
// instead, so that every body reads back byte for byte.
package link
