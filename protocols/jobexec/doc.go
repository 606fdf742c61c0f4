// Package jobexec is the wire between jobCommander and jobExecutorServer,
// the network job executor of the project's jobexecutor-server
// specification: a server runs Unix commands sent by commanders through a
// laboro.Executor, and each commander lives for one command.
//
// Server serves commanders, running their jobs with a laboro.Executor's
// process runner; Client sends one command and prints the answer as
// jobCommander does. The binaries in cmd/jobExecutorServer and
// cmd/jobCommander are thin wrappers over them.
//
// # What a commander sees
//
// The console texts are those of the specification, to the letter:
// "JOB <job_N, job> SUBMITTED", then the output between
// "-----job_N output start-----" and "-----job_N output end-----";
// "CONCURRENCY SET AT N"; "JOB <job_N> REMOVED" or "JOB <job_N> NOTFOUND";
// one "<job_N, job>" line per queued job; "SERVER TERMINATED". The job text
// is the command line as typed, each argument shell-quoted when it needs
// to be, so that it can be pasted back into a shell. The commander's exit
// status is an issued job's own, 1 for a stop that removed nothing
// (NOTFOUND), 0 for the other commands carried out.
//
// An exit command is answered "SERVER TERMINATED" at once, as the student
// servers of the same assignment answer it. The server then drains: it
// takes no new command (each is refused with a reason); queued jobs, and
// submitters still blocked on a full buffer, get "SERVER TERMINATED BEFORE
// EXECUTION" (the queued ones end before the answer is sent, so none
// starts after it); running jobs finish and their outputs are
// delivered; then Serve returns ErrServerTerminated and jobExecutorServer
// ends. The specification asks for the answer "before the server ends" and
// for the end "after the running jobs have finished and their outputs have
// been returned": both hold. Answering after the drain would hold an exit
// commander for as long as the longest job, and a script that runs exit and
// then stops its long job would wait forever.
//
// A commander that goes away does not disturb the server. If its job was
// still blocked on a full buffer, the job is dropped; if it was queued or
// running, it runs on, its output is discarded and its file removed. Both
// are logged.
//
// # Limits
//
// A connection must deliver its request within Server.RequestTimeout, and
// take each frame of the answer within Server.WriteTimeout; a frame longer
// than the reader's limit is refused before allocation; a connection that
// breaks the protocol gets a refusal frame, when it can still be written,
// and is closed. None of these affect other connections.
//
// A Client gives up with ErrNotServer when the peer does not acknowledge
// its request within Client.AckTimeout (5 s), closes without a word, or
// answers in another protocol: a student jobExecutorServer (each has a C
// wire of its own; they take our request's first bytes for a length and
// wait for more, or close), an HTTP server, anything else. Only the
// acknowledgement is timed: an issueJob's answer may come hours later,
// when its job ends; every other command is answered at once, so each read
// of its answer has the same deadline.
//
// # The wire
//
// A commander opens a TCP connection, sends one request frame, and reads
// frames until an exit frame, after which either side closes. The server
// answers a request of version 2 with an acknowledgement frame first, as
// soon as it has read it and before anything that may wait (an issueJob
// on a full buffer), then the answer proper.
//
// Every frame is a 5-byte header — the payload's length as a big-endian
// uint32, then the frame type — followed by the payload:
//
//	+----------------+------+-----------------+
//	| length (4, BE) | type | payload (length) |
//	+----------------+------+-----------------+
//
// A length above the reader's limit (DefaultMaxFrame unless configured) is
// refused with ErrFrameTooLarge before anything is allocated.
//
// Frame types:
//
//	'H' hello     commander → server: opens an exchange of version 5 (a
//	              commander with a token): the version byte (5) and 32
//	              random bytes, the commander's nonce
//	'C' challenge server → commander: the answer to a hello: 32 random
//	              bytes, the server's nonce, and the server's proof
//	'Q' request   commander → server: the command, see below
//	'A' ack       server → commander: the request was read; empty payload.
//	              Sent only for a request of version 2 or later, as the
//	              first frame; a refusal may follow it
//	'L' line      server → commander: one line of console text, without its
//	              newline ("JOB <job_1, ls -l> SUBMITTED", "CONCURRENCY SET
//	              AT 2", "-----job_1 output start-----", …)
//	'O' output    server → commander: raw bytes of a job's output, in chunks
//	              of at most OutputChunk bytes
//	'R' refusal   server → commander: why the command was not carried out
//	'E' stderr    server → commander: the end of the standard error of an
//	              issued job that did not succeed (at most laboro's tail of
//	              it), after its output's end line; sent only for a request
//	              of version 3 or later, and only when there is some
//	'W' why       server → commander: how an issued job ended when it did
//	              not exit by itself, as one line of text ("killed: signal:
//	              killed", "failed: exec: \"frob\": executable file not found
//	              in $PATH"), after its output's end line and its 'E' frame;
//	              sent only for a request of version 4 or later
//	'X' exit      server → commander: the commander's exit status, a
//	              big-endian int32; the last frame of every exchange
//
// A request's payload is the version byte, then a list of strings, each
// a uvarint length and its bytes: the shared token ("" when none is
// configured; in version 5, the commander's proof), the command ("issueJob", "setConcurrency", "stop", "poll",
// "exit") and its arguments as the user typed them, boundaries kept, so
// that `issueJob sh -c 'echo "a   b"'` reaches the server as three words.
// A request holds at most MaxRequestStrings strings, and no string may
// claim more bytes than the payload has left.
//
// # Version 5: the token proven, never sent
//
// A commander with a token sends a hello first and waits for the
// challenge, whose proof is HMAC-SHA256 keyed with the token over
// "laboro jobexec server\x00", the commander's nonce and the server's
// (ServerProof). Only if that proof is right does it send its request, of
// version 5, whose token string is its own proof: HMAC-SHA256 keyed with
// the token over "laboro jobexec commander\x00", both nonces and the
// request's payload with an empty token (Request.Prove), so that the proof
// holds for this command and these arguments only. The server checks it
// (Request.Proven) as it checked the token before, and the exchange goes
// on as in version 4.
//
// So the token never crosses the wire: someone on the path learns nothing
// that would let them send a command (a recorded request fails under the
// server's next nonce, and one changed on the way fails its proof), and a
// program that took the server's port while it was down (another user's,
// on the loopback) gets neither the token nor the command: the Client ends
// with ErrServerUnproven. A server of an earlier version refuses the hello
// as a bad request; a Client with a token does not then fall back to
// version 4, which would send the token in the clear, but ends with
// ErrServerUnproven too. A Client without a token sends version 4 with no
// hello, and a server still takes a token sent in the clear by a commander
// of an earlier version. The wire is not encrypted: the commands and
// outputs themselves can be read on the path.
//
// # Versions 1 to 4, and older commanders and servers
//
// Version 4 is version 5 without the hello and the challenge, the token
// sent as it is. Version 3 is version 4 without the 'W' frame, and version
// 2 is version 3 without the 'E' frame. A server from before a version refuses a request
// of that version as one from before version 2 refuses a version 2
// request (below), and a Client then tries again with the version before.
//
// Version 1 is version 2 without the acknowledgement: a request whose
// version byte is 1 gets the same answer, with no 'A' frame, which a
// commander from before version 2 would take for a broken protocol. A
// server from before version 2 refuses a version 2 request at once, with a
// refusal frame and no acknowledgement; a Client that sees a refusal before
// the acknowledgement sends its command again, as version 1, on a new
// connection (the refused request did nothing), and then waits as a version
// 1 commander does: such a server answers exit only after the drain.
package jobexec
