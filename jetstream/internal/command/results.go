package command

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/lines"
)

// recorder keeps what run's user asked to keep of each job: its files
// under -results, its line in -joblog.
type recorder struct {
	results string
	host    string
	mu      sync.Mutex
	log     *os.File // nil without -joblog
	w       *bufio.Writer
}

func newRecorder(o runOptions) (*recorder, error) {
	r := &recorder{results: o.results}
	r.host, _ = os.Hostname()
	if o.results != "" {
		if err := os.MkdirAll(o.results, 0o755); err != nil {
			return nil, err
		}
	}
	if o.joblog != "" {
		f, err := os.OpenFile(o.joblog, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		if err := mendTornLine(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", o.joblog, err)
		}
		r.log, r.w = f, bufio.NewWriter(f)
		if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
			r.w.WriteString(jobLogHeader)
		}
	}
	return r, nil
}

// record keeps job's result: its files, then its log line (written at
// once, so that a run killed midway can be resumed from the log; none for
// a job killed by a halt or an interrupt, see logged).
func (r *recorder) record(job laboro.Job, res laboro.Result) error {
	var errs []error
	if r.results != "" {
		errs = append(errs, r.save(job, res))
	}
	if exitval, signal, ended := logged(res); r.log != nil && ended {
		var size int64
		if res.Output != nil {
			size = res.Output.Size()
		}
		start := float64(res.Started.UnixMilli()) / 1000
		line := fmt.Sprintf("%s\t%s\t%.3f\t%.3f\t0\t%d\t%d\t%d\t%s\n", job.ID, r.host, start,
			res.Duration().Seconds(), size, exitval, signal, oneLine(job.Script, 1<<20))
		r.mu.Lock()
		_, err := r.w.WriteString(line)
		if err == nil {
			err = r.w.Flush()
		}
		r.mu.Unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// save writes DIR/<seq>/{cmd,stdout,stderr,exitval}.
func (r *recorder) save(job laboro.Job, res laboro.Result) error {
	dir := filepath.Join(r.results, job.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var stdout io.Reader = strings.NewReader("")
	if res.Output != nil {
		f, err := res.Output.Open()
		if err != nil {
			return err
		}
		defer f.Close()
		stdout = f
	}
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		return err
	}
	_, err = io.Copy(out, stdout)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return errors.Join(err,
		os.WriteFile(filepath.Join(dir, "stderr"), res.Stderr, 0o644),
		os.WriteFile(filepath.Join(dir, "exitval"), []byte(strconv.Itoa(res.ExitCode)+"\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "cmd"), []byte(job.Script+"\n"), 0o644))
}

// close flushes and closes the job log; it may be called more than once.
func (r *recorder) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log == nil {
		return nil
	}
	err := errors.Join(r.w.Flush(), r.log.Close())
	r.log = nil
	return err
}

// logged says what the job log holds of res, as GNU parallel writes it:
// its exit value (-1 when the job has none: its process was killed, or
// never started) and the signal that ended it (0 for none), or !ended for
// a job that did not end by itself, which the log leaves out so that
// -resume runs it again: one run's halt or interrupt killed it.
func logged(res laboro.Result) (exitval, signal int, ended bool) {
	switch res.Status {
	case laboro.StatusKilled, laboro.StatusTerminated, laboro.StatusStopped:
		return 0, 0, false
	}
	exitval, signal = res.ExitCode, signalOf(res)
	if exitval < 0 {
		exitval = -1
		if signal == 0 && res.PID != 0 && res.Status != laboro.StatusFailed {
			// Timed out or cancelled: laboro killed its process group.
			signal = int(syscall.SIGKILL)
		}
	}
	return exitval, signal, true
}

// signalOf is the signal that ended res's process, 0 for none.
func signalOf(res laboro.Result) int {
	var ee *exec.ExitError
	if errors.As(res.Err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return int(ws.Signal())
		}
	}
	return 0
}

// readJobLog returns the sequence numbers of the jobs a job log lists:
// every one, or with succeededOnly those that exited 0 with no signal.
func readJobLog(path string, succeededOnly bool) (map[string]bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]bool{}, nil // nothing ran yet
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	whole, err := lines.Whole(f)
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(f, whole)) // a last line cut by a crash: its job runs again
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		fields := strings.SplitN(sc.Text(), "\t", 9)
		if n == 1 && fields[0] == "Seq" {
			continue
		}
		if len(fields) < 9 {
			return nil, fmt.Errorf("%s:%d: not a job log line (9 tab-separated fields)", path, n)
		}
		if !succeededOnly || (fields[6] == "0" && fields[7] == "0") {
			done[fields[0]] = true
		}
	}
	return done, sc.Err()
}

// jobLogHeader is the first line of a job log, as GNU parallel writes it.
const jobLogHeader = "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\tSignal\tCommand\n"

// mendTornLine readies the job log f for its next line when its last line
// lacks its newline (a crash cut it; -resume ignores it): it removes that
// line, or, in a file that does not start as a job log (another file named
// by mistake), keeps it and ends it.
func mendTornLine(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	whole, err := lines.Whole(f)
	if err != nil || whole == fi.Size() {
		return err
	}
	head := make([]byte, len(jobLogHeader))
	if _, err := f.ReadAt(head, 0); err == nil && string(head) == jobLogHeader {
		return f.Truncate(whole)
	}
	_, err = f.WriteString("\n")
	return err
}

// countDone counts the sequence numbers from 1 to n that done holds.
func countDone(done map[string]bool, n int) int {
	count := 0
	for seq := range done {
		if i, err := strconv.Atoi(seq); err == nil && i >= 1 && i <= n {
			count++
		}
	}
	return count
}
