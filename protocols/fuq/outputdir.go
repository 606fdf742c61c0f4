package fuq

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/laboro-go/laboro"
	"go.uber.org/zap"
)

// Where a task's output is while it runs.
//
// A task's standard output and error go to a <pid>.output file while it
// runs, which becomes its log, by a link, when it ends: so the file must
// be in the logging directory's file system. It is put in a directory of
// the worker's own inside the logging directory,
// LoggingDir/.fuq-running-<random>, and never right in LoggingDir, so
// that nothing is left there when the worker dies:
//
//   - the worker removes its directory when it ends;
//   - killed (SIGKILL), its reaper, which outlives it, removes it
//     (laboro.RemoveAtExit);
//   - and should both die at once (the host crashed, or its whole control
//     group was killed), the next worker that runs a task for that logging
//     directory, on any host, removes the directories of dead workers it
//     finds there. A worker holds an exclusive lock (flock) on the file
//     "lock" in its directory for as long as it lives; a directory is
//     removed only when that lock can be taken, that is when its worker is
//     gone (on NFS too, where the lock is the server's, and a crashed host's
//     locks are freed when it is known gone). A directory without a
//     "lock" file, or whose lock cannot be tried (a file system without
//     locks), is left alone: it may be a live worker's.

// runningPrefix begins the name of a worker's directory of outputs.
const runningPrefix = ".fuq-running-"

// ownRunning are the directories of outputs of this process's workers: a
// sweep never tries their locks (on NFS, flock is a POSIX lock, which a
// process may take again over its own, and which closing any descriptor
// of the file releases).
var ownRunning sync.Map

// outputDirs are a Worker's directories of outputs, one per logging
// directory; safe for concurrent use.
type outputDirs struct {
	log  *zap.Logger
	mu   sync.Mutex
	dirs map[string]*outputDir // by logging directory
}

// outputDir is one of them.
type outputDir struct {
	path   string
	lock   *os.File // holds the flock while the worker lives
	forget func()   // strikes path off the reaper's list
}

// dir returns the worker's directory of outputs in logDir, made (and the
// dead workers' there removed) the first time, and again if it has gone.
func (o *outputDirs) dir(logDir string) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d := o.dirs[logDir]; d != nil {
		if _, err := os.Lstat(filepath.Join(d.path, "lock")); err == nil {
			return d.path, nil
		}
		d.close() // removed under our feet (the logging directory was)
		delete(o.dirs, logDir)
	}
	sweepRunning(logDir, o.log)
	d, err := newOutputDir(logDir)
	if err != nil {
		return "", err
	}
	if o.dirs == nil {
		o.dirs = map[string]*outputDir{}
	}
	o.dirs[logDir] = d
	return d.path, nil
}

// close removes every directory of outputs; the tasks have ended, and
// their outputs are closed.
func (o *outputDirs) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, d := range o.dirs {
		d.close()
		delete(o.dirs, k)
	}
}

// newOutputDir makes a directory of outputs in logDir, locked.
func newOutputDir(logDir string) (*outputDir, error) {
	path, err := os.MkdirTemp(logDir, runningPrefix)
	if err != nil {
		return nil, err
	}
	d := &outputDir{path: path, forget: laboro.RemoveAtExit(path)}
	ownRunning.Store(path, struct{}{})
	// The lock is taken on a file of another name, then renamed "lock":
	// a sweep never finds a "lock" that is not yet locked.
	tmp := filepath.Join(path, "lock.new")
	d.lock, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err == nil {
		err = syscall.Flock(int(d.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			// No locks here: a sweep cannot take it either, and leaves
			// the directory alone (the reaper still removes it).
			err = nil
		}
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(path, "lock"))
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *outputDir) close() {
	os.RemoveAll(d.path)
	if d.lock != nil {
		d.lock.Close()
	}
	d.forget()
	ownRunning.Delete(d.path)
}

// sweepRunning removes the directories of outputs in logDir whose workers
// are gone: those whose lock it can take.
func sweepRunning(logDir string, log *zap.Logger) {
	f, err := os.Open(logDir)
	if err != nil {
		return
	}
	defer f.Close()
	for {
		// In batches: a logging directory may hold a million logs.
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if !strings.HasPrefix(name, runningPrefix) {
				continue
			}
			path := filepath.Join(logDir, name)
			if _, own := ownRunning.Load(path); own {
				continue
			}
			if removeDead(path) {
				log.Info("removed the outputs of a worker that died while its tasks ran", zap.String("dir", path))
			}
		}
		if err != nil {
			return
		}
	}
}

// removeDead removes path, a directory of outputs, if its lock can be
// taken: its worker is gone.
func removeDead(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return false
	}
	// Not created if missing: a directory without it is not known dead.
	lock, err := os.OpenFile(filepath.Join(path, "lock"), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer lock.Close()
	if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false // held by a live worker, or no locks here
	}
	return os.RemoveAll(path) == nil
}
