//go:build unix

package laboro

import (
	"bytes"
	"os"
	"time"
)

// stderrGrace is how long a finished job's standard error is still read
// when something other than the job's process (a descendant left running in
// the background) keeps it open. What the process itself wrote is already in
// the pipe when it exits, so the wait is over at once in the usual case.
const stderrGrace = 50 * time.Millisecond

// tailBuf keeps the last max bytes appended to it.
type tailBuf struct {
	max int
	buf []byte
	cut bool // bytes before buf were dropped
}

func (t *tailBuf) keep(p []byte) {
	if len(p) >= t.max {
		t.cut = t.cut || len(t.buf) > 0 || len(p) > t.max
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
}

// fileTail returns the last n bytes of the file at path, cut as tailBuf
// cuts them; nil if there are none or it cannot be read.
func fileTail(path string, n int) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(fi.Size()-int64(n), 0)
	buf := make([]byte, fi.Size()-off)
	read, _ := f.ReadAt(buf, off)
	t := tailBuf{max: n, buf: buf[:read], cut: off > 0}
	return t.bytes()
}

// bytes returns the tail, or nil when nothing was written. When its start
// was dropped, the tail starts at a line's start (the first line's rest is
// dropped too), unless it holds a single line.
func (t *tailBuf) bytes() []byte {
	if len(t.buf) == 0 {
		return nil
	}
	if t.cut {
		if i := bytes.IndexByte(t.buf, '\n'); i >= 0 && i < len(t.buf)-1 {
			return t.buf[i+1:]
		}
	}
	return t.buf
}
