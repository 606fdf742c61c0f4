//go:build unix && !linux

package laboro

import (
	"os"
	"time"
)

// stderrTail keeps the last bytes of a process's standard error. The
// process writes into a pipe, read by a goroutine of stderrTail's own, which
// the process runner waits for: memory stays bounded however much the
// process writes, and the process never blocks on a full pipe.
type stderrTail struct {
	tailBuf
	r, w *os.File
	done chan struct{}
}

func newStderrTail(max int) (*stderrTail, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &stderrTail{tailBuf: tailBuf{max: max}, r: r, w: w, done: make(chan struct{})}, nil
}

// writer is the child's standard error.
func (t *stderrTail) writer() *os.File { return t.w }

// start begins reading once the child, whose pid is given, holds the write end.
func (t *stderrTail) start(int) {
	t.w.Close()
	go t.read()
}

func (t *stderrTail) read() {
	defer close(t.done)
	var chunk [4096]byte
	for {
		n, err := t.r.Read(chunk[:])
		t.keep(chunk[:n])
		if err != nil {
			return // io.EOF, or the deadline set by finish
		}
	}
}

// collect is called before the child is waited for; the goroutine does the work.
func (t *stderrTail) collect() {}

// finish, called once the child has been reaped, waits for the end of the
// stream, at most stderrGrace, and returns the tail.
func (t *stderrTail) finish() []byte {
	select {
	case <-t.done: // the stream has ended already: no deadline to arm
	default:
		t.r.SetReadDeadline(time.Now().Add(stderrGrace))
		<-t.done
	}
	t.r.Close()
	return t.bytes()
}

// abort releases the pipe when the child never started.
func (t *stderrTail) abort() {
	t.w.Close()
	t.r.Close()
}
