package runexp

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A runner's output starts with a header (WIRE-NOTES): the summary line,
// the times, the command, the exit status, then the program's output. The
// REZULTO that carries it says only success or failure; a manager reports
// a failed job better with what the header and the output's end say.

const (
	// headerRead is how much of an output's start is read for its header.
	headerRead = 2 << 10
	// outputTail is how much of a failed job's output its Result keeps,
	// as Result.Stderr: a runner of this package sends the job's standard
	// error within its output, and the reference's runner writes it to
	// its terminal, so the output's end is where the reason is.
	outputTail = 4 << 10
	// maxSignalText bounds the signal's line kept from a header.
	maxSignalText = 64
)

// failure is what a failed job's output says of its end.
type failure struct {
	exitCode int    // the exit status, -1 when none is there or a signal ended it
	signal   string // the signal that ended it ("9 (killed)"), "" when none did
	tail     []byte // the output's last bytes after the header
}

// failureOf reads a failed job's output file: the exit status its header
// gives (this package's runner writes "exit status: N", and "signal: N
// (name)" after it when a signal ended the process; the reference's
// writes "Program exited with status S", S being the wait status: the
// process's exit status times 256, or its signal), and the output's last
// bytes after the header.
func failureOf(path string) failure {
	fl := failure{exitCode: -1}
	f, err := os.Open(path)
	if err != nil {
		return fl
	}
	defer f.Close()
	head := make([]byte, headerRead)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	body := int64(0) // where the program's output starts
	seen := false    // the exit status's line
	for rest, off := head, 0; len(rest) > 0; {
		line, after, found := bytes.Cut(rest, []byte("\n"))
		if !found {
			break
		}
		off += len(line) + 1
		rest = after
		if v, ok := bytes.CutPrefix(line, []byte("exit status: ")); ok && !seen {
			seen = true
			if code, err := strconv.Atoi(string(v)); err == nil {
				fl.exitCode = code
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("signal: ")); ok && seen && fl.signal == "" {
			fl.signal = strings.ToValidUTF8(string(v[:min(len(v), maxSignalText)]), "")
		} else if v, ok := bytes.CutPrefix(line, []byte("Program exited with status ")); ok && !seen {
			seen = true
			if st, err := strconv.Atoi(string(v)); err == nil && st >= 0 {
				if sig := syscall.Signal(st & 0x7f); sig == 0 {
					fl.exitCode = st >> 8
				} else {
					fl.signal = strconv.Itoa(int(sig)) + " (" + sig.String() + ")"
				}
			}
		} else if len(line) == 0 && seen {
			// The blank line that ends the header.
			body = int64(off)
			break
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return fl
	}
	from := max(body, fi.Size()-outputTail)
	fl.tail = make([]byte, fi.Size()-from)
	n, _ = f.ReadAt(fl.tail, from)
	fl.tail = fl.tail[:n]
	return fl
}
