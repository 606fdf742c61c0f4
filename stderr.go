package laboro

import (
	"os"
	"time"
)

// stderrGrace is how long a finished job's standard error is still read
// when something other than the job's process (a descendant left running in
// the background) keeps it open. What the process itself wrote is already in
// the pipe when it exits, so the wait is over at once in the usual case.
const stderrGrace = 50 * time.Millisecond

// stderrTail keeps the last max bytes of a process's standard error. The
// process writes into a pipe, read by a goroutine of stderrTail's own, which
// the process runner waits for: memory stays bounded however much the
// process writes, and the process never blocks on a full pipe.
type stderrTail struct {
	r, w *os.File
	max  int
	buf  []byte // read only by the reading goroutine until done is closed
	done chan struct{}
}

func newStderrTail(max int) (*stderrTail, error) {
	if max <= 0 {
		max = DefaultStderrTail
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &stderrTail{r: r, w: w, max: max, done: make(chan struct{})}, nil
}

// start begins reading once the child holds the write end.
func (t *stderrTail) start() {
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

func (t *stderrTail) keep(p []byte) {
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
}

// finish waits for the end of the stream, at most stderrGrace, and returns
// the tail, or nil when nothing was written.
func (t *stderrTail) finish() []byte {
	select {
	case <-t.done: // the stream has ended already: no deadline to arm
	default:
		t.r.SetReadDeadline(time.Now().Add(stderrGrace))
		<-t.done
	}
	t.r.Close()
	if len(t.buf) == 0 {
		return nil
	}
	return t.buf
}

// abort releases the pipe when the child never started.
func (t *stderrTail) abort() {
	t.w.Close()
	t.r.Close()
}
