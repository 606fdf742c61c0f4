package laboro

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
)

// Output is a job's standard output, kept in a file on disk (for the process
// runner, <pid>.output in the output directory) so that no output, however
// large, is held in memory. Read it with Open or WriteTo, as often as needed,
// then Close it to remove the file.
//
// An Output is safe for concurrent use. After Close, Open and WriteTo return
// an error matching fs.ErrClosed.
type Output struct {
	path    string
	size    int64
	release func() // called once the file is gone; may be nil
	// removing, if not nil, is called just before the file is removed
	// (ProcessRunner.Named's): a record of the outputs on disk that drops
	// the file first never names a file that is gone, whose name another
	// process's output may take.
	removing func()

	mu     sync.Mutex
	closed bool
}

// NewOutput returns an Output for a file that already exists; its Close
// removes the file. Runners other than the process runner use it to hand
// over output they captured to a file.
func NewOutput(path string, size int64) *Output { return &Output{path: path, size: size} }

// Path returns the file's path, for example "/tmp/laboro-run-123/4242.output".
func (o *Output) Path() string { return o.path }

// Size returns the output's length in bytes.
func (o *Output) Size() int64 { return o.size }

// Open opens the output for reading from its start. The caller closes the
// returned file; the output itself stays until Close.
func (o *Output) Open() (*os.File, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, &fs.PathError{Op: "open", Path: o.path, Err: fs.ErrClosed}
	}
	return os.Open(o.path)
}

// WriteTo streams the whole output to w without holding it in memory (to a
// socket or file the kernel copies it directly). It implements io.WriterTo.
func (o *Output) WriteTo(w io.Writer) (int64, error) {
	f, err := o.Open()
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

// ReadAll returns the output as a byte slice. It is for outputs known to be
// small; prefer WriteTo or Open for anything else.
func (o *Output) ReadAll() ([]byte, error) {
	f, err := o.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Close removes the file. It is safe to call more than once, and on a nil
// *Output (a result without output); such calls return nil.
func (o *Output) Close() error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	if o.removing != nil {
		o.removing()
	}
	err := os.Remove(o.path)
	if o.release != nil {
		o.release()
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// runDir is an Executor's own output directory. It is removed once the
// Executor has finished and the last output left in it has been closed,
// whichever comes last.
type runDir struct {
	path string

	mu       sync.Mutex
	open     int  // outputs handed out and not yet closed
	finished bool // the Executor is done with it
}

func (d *runDir) hold() {
	d.mu.Lock()
	d.open++
	d.mu.Unlock()
}

func (d *runDir) release() {
	d.mu.Lock()
	d.open--
	gone := d.finished && d.open == 0
	d.mu.Unlock()
	if gone {
		os.Remove(d.path)
	}
}

// finish marks the Executor done and removes the directory if no output is
// left. It is called once.
func (d *runDir) finish() {
	d.mu.Lock()
	d.finished = true
	gone := d.open == 0
	d.mu.Unlock()
	if gone {
		os.Remove(d.path)
	}
}
