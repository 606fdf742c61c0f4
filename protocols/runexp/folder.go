package runexp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/laboro-go/laboro"
	"go.uber.org/zap"
)

// SummaryLine is the first line of a result as the reference runner writes
// it; a result file that starts with the success form marks its job done.
const (
	summarySuccess = "runexp summary: success"
	summaryFailure = "runexp summary: failure"
)

// Folder is a job folder as the reference manager serves it: every file
// under Runs is a job, named by its path under Runs without extension, of
// the type given by its extension; the result of job NAME goes to
// Outputs/NAME.res. A job whose result file starts with "runexp summary:
// success" is done and not served again, so a manager restarted on the
// same folder resumes.
type Folder struct {
	Runs    string
	Outputs string
}

// FolderJob is a job file found in a Folder.
type FolderJob struct {
	Name string  // path under Runs without extension, with '/' separators
	Type JobType // the extension, with its dot
	Path string  // the file
}

// Jobs lists the job files not yet done, in lexical order, and how many are
// done already. Files without an extension, or whose name could not be sent
// (a newline in it), are skipped with an error in skipped.
func (f Folder) Jobs() (todo []FolderJob, done int, skipped []error, err error) {
	err = filepath.WalkDir(f.Runs, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(f.Runs, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		ext := filepath.Ext(rel)
		j := FolderJob{Name: strings.TrimSuffix(rel, ext), Type: JobType(ext), Path: path}
		if !validType(ext) || (&Manager{}).Validate(NewJob(j.Name, j.Type, "")) != nil {
			skipped = append(skipped, fmt.Errorf("runexp: %s: not a job file (a job needs a name and an extension, on one line)", path))
			return nil
		}
		if ok, err := f.Done(j.Name); err != nil {
			return err
		} else if ok {
			done++
			return nil
		}
		todo = append(todo, j)
		return nil
	})
	return todo, done, skipped, err
}

// ResultPath is where the result of job name is written.
func (f Folder) ResultPath(name string) string {
	return filepath.Join(f.Outputs, filepath.FromSlash(name)+".res")
}

// Done reports whether job name's result file shows success.
func (f Folder) Done(name string) (bool, error) {
	file, err := os.Open(f.ResultPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer file.Close()
	line, err := bufio.NewReader(io.LimitReader(file, 256)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return strings.TrimRight(line, "\r\n") == summarySuccess, nil
}

// Load reads a job file into a job for the Manager.
func (f Folder) Load(j FolderJob) (laboro.Job, error) {
	b, err := os.ReadFile(j.Path)
	if err != nil {
		return laboro.Job{}, err
	}
	return NewJob(j.Name, j.Type, string(b)), nil
}

// Save writes a job's output as its result file, atomically: a crash
// leaves either the old file or the new one, never half of one.
func (f Folder) Save(name string, out *laboro.Output) (err error) {
	path := f.ResultPath(name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".runexp-*.res.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if out != nil {
		if _, err := out.WriteTo(tmp); err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Progress is the state of a folder run, for a progress display.
type Progress struct {
	Total   int // jobs to run in this run
	Done    int // results received in this run
	Failed  int // of which failures
	Running int // jobs out at runners
	Runners int // runners connected
}

// FolderRun serves a Folder's jobs to runners and saves their results.
type FolderRun struct {
	Folder  Folder
	Manager *Manager
	// Sorted serves jobs in lexical order; by default they are shuffled,
	// as the reference manager does.
	Sorted bool
	// OnProgress, if set, is called after each result and every
	// ProgressEvery (200 ms by default) from one goroutine.
	OnProgress    func(Progress)
	ProgressEvery time.Duration
}

// Run serves every job of the folder not yet done on ln and writes each
// result, and returns once every job has a result and every runner has
// said FINO ANKAU (or left), or when ctx ends. It returns the final
// progress; Failed > 0 says that some jobs failed.
func (r *FolderRun) Run(ctx context.Context, ln net.Listener) (Progress, error) {
	m := r.Manager
	m.init()
	todo, _, skipped, err := r.Folder.Jobs()
	if err != nil {
		ln.Close()
		return Progress{}, err
	}
	for _, err := range skipped {
		m.Logger.Warn("skipped", zap.Error(err))
	}
	if !r.Sorted {
		rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	}
	// Every job goes to the Manager at once: runners take them as they ask.
	n := max(1, len(todo))
	ex, err := laboro.New(laboro.WithRunner(m), laboro.WithBufferSize(n), laboro.WithPoolSize(min(n, 4096)),
		laboro.WithConcurrency(min(n, 4096)), laboro.WithLogger(m.Logger))
	if err != nil {
		ln.Close()
		return Progress{}, err
	}
	defer ex.Close()
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- m.Serve(serveCtx, ln) }()
	defer func() { stopServing(); <-served }()

	var (
		mu       sync.Mutex
		progress = Progress{Total: len(todo)}
		results  sync.WaitGroup
		saveErr  error
	)
	snapshot := func() Progress {
		st := m.Stats()
		mu.Lock()
		defer mu.Unlock()
		p := progress
		p.Running, p.Runners = st.Out, st.Runners
		return p
	}
	for _, j := range todo {
		job, err := r.Folder.Load(j)
		if err != nil {
			return snapshot(), err
		}
		h, err := ex.Submit(ctx, job)
		if err != nil {
			return snapshot(), err
		}
		results.Go(func() {
			res, err := h.Wait(ctx)
			if err != nil {
				return
			}
			defer res.Output.Close()
			err = r.Folder.Save(j.Name, res.Output)
			mu.Lock()
			progress.Done++
			if res.Status != laboro.StatusSucceeded {
				progress.Failed++
			}
			if err != nil && saveErr == nil {
				saveErr = err
			}
			mu.Unlock()
			if r.OnProgress != nil {
				r.OnProgress(snapshot())
			}
		})
	}
	m.Finish(ex)

	allResults := make(chan struct{})
	go func() { results.Wait(); close(allResults) }()
	every := r.ProgressEvery
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	waitFor := func(done <-chan struct{}) error {
		for {
			select {
			case <-done:
				return nil
			case <-tick.C:
				if r.OnProgress != nil {
					r.OnProgress(snapshot())
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := waitFor(allResults); err != nil {
		ex.Close()
		<-allResults
		return snapshot(), err
	}
	// Every runner must then have said FINO ANKAU, or left.
	if err := waitFor(m.Idle()); err != nil {
		return snapshot(), err
	}
	mu.Lock()
	defer mu.Unlock()
	return progress, saveErr
}
