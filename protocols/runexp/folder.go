package runexp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/laboro-go/laboro"
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

// String returns the job's file: what names the job in a log line, where
// its Payload (see Folder.Load) stands for it.
func (j FolderJob) String() string { return j.Path }

// Jobs lists the job files not yet done, in lexical order, and how many are
// done already. Files without an extension, or whose name could not be sent
// (a newline in it), are skipped with an error in skipped; so is a file whose
// job name an earlier one has (a.py and a.sh, a.sh and its backup a.sh~):
// they would share a result file.
func (f Folder) Jobs() (todo []FolderJob, done int, skipped []error, err error) {
	named := map[string]string{} // job name → its file
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
		if first, dup := named[j.Name]; dup {
			skipped = append(skipped, fmt.Errorf("runexp: %s: not served: its job name, %q, is %s's (a job is named by its path without extension)",
				path, j.Name, first))
			return nil
		}
		named[j.Name] = path
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

// Load reads a job file into a job for the Manager: NewJob's, with j as its
// Payload (which gives the Manager its type, and names its file in the
// Executor's log lines instead of its script). A file over DefaultMaxSize,
// more than a runner takes, is refused unread.
func (f Folder) Load(j FolderJob) (laboro.Job, error) {
	file, err := os.Open(j.Path)
	if err != nil {
		return laboro.Job{}, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return laboro.Job{}, err
	}
	var b []byte
	if fi.Size() <= DefaultMaxSize {
		// Bounded again: the file may have grown since.
		b, err = io.ReadAll(io.LimitReader(file, DefaultMaxSize+1))
	}
	switch {
	case err != nil:
		return laboro.Job{}, err
	case fi.Size() > DefaultMaxSize || len(b) > DefaultMaxSize:
		return laboro.Job{}, fmt.Errorf("runexp: %s: a job file over %d bytes, more than a runner takes", j.Path, DefaultMaxSize)
	}
	job := NewJob(j.Name, j.Type, string(b))
	job.Payload = j
	return job, nil
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
