// Package jobexec is the wire between jobCommander and jobExecutorServer,
// the network job executor of the project's jobexecutor-server
// specification: a server runs Unix commands sent by commanders through a
// laboro.Executor, and each commander lives for one command.
//
// This package holds, for now, the codec: framing, the request message and
// the size limits. It starts no goroutines.
//
// # The wire, version 1
//
// A commander opens a TCP connection, sends one request frame, and reads
// frames until an exit frame, after which either side closes.
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
//	'Q' request   commander → server: the command, see below
//	'L' line      server → commander: one line of console text, without its
//	              newline ("JOB <job_1, ls -l> SUBMITTED", "CONCURRENCY SET
//	              AT 2", "-----job_1 output start-----", …)
//	'O' output    server → commander: raw bytes of a job's output, in chunks
//	              of at most OutputChunk bytes
//	'R' refusal   server → commander: why the command was not carried out
//	'X' exit      server → commander: the commander's exit status, a
//	              big-endian int32; the last frame of every exchange
//
// A request's payload is the version byte (1), then a list of strings, each
// a uvarint length and its bytes: the shared token ("" when none is
// configured), the command ("issueJob", "setConcurrency", "stop", "poll",
// "exit") and its arguments as the user typed them, boundaries kept, so
// that `issueJob sh -c 'echo "a   b"'` reaches the server as three words.
// A request holds at most MaxRequestStrings strings, and no string may
// claim more bytes than the payload has left.
package jobexec
