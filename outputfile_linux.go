package laboro

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// An output file on Linux is made unnamed (O_TMPFILE) in the output
// directory, and gets its name, <pid>.output, by one link once the child has
// started: one change to the directory, which takes the directory's lock,
// where a named temporary file takes two (its creation and its rename); and
// a file that never gets its name, should this process die first, leaves
// nothing behind. The link is made from the descriptor itself
// (AT_EMPTY_PATH: Linux 6.10 allows it to the file's opener, older kernels
// to a privileged process), else through /proc/self/fd, a path lookup
// that costs several microseconds more. Where the file system has no
// unnamed files, or /proc is missing, the output file is named from the
// start.

// linkable reports whether an unnamed file can be linked through
// /proc/self/fd here; asked once.
var linkable = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/fd")
	return err == nil
})

// noEmptyPath is set once linking a descriptor with AT_EMPTY_PATH was
// refused where linking it through /proc then worked: this kernel does not
// allow it to this process, and it is not tried again.
var noEmptyPath atomic.Bool

// openOutput opens a new output file in dir for writing; tmp is its
// temporary name, or "" for an unnamed file.
func openOutput(dir string) (f *os.File, tmp string, err error) {
	if linkable() {
		fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err == nil {
			return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed output)")), "", nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
			return nil, "", &fs.PathError{Op: "open", Path: dir, Err: err}
		}
	}
	f, err = os.CreateTemp(dir, ".laboro-*.output")
	if err != nil {
		return nil, "", err
	}
	return f, f.Name(), nil
}

// placeOutput gives the output file f (of temporary name tmp, "" for an
// unnamed one) the name path; an error matching fs.ErrExist if path is
// taken.
func placeOutput(f *os.File, tmp, path string) error {
	if tmp != "" {
		return renameNew(tmp, path)
	}
	var err error
	if cerr := rawControl(f, func(fd uintptr) {
		if !noEmptyPath.Load() {
			err = unix.Linkat(int(fd), "", unix.AT_FDCWD, path, unix.AT_EMPTY_PATH)
			if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) {
				return
			}
		}
		perr := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(fd)), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
		if err != nil && perr == nil {
			noEmptyPath.Store(true)
		}
		err = perr
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: f.Name(), New: path, Err: err}
	}
	return nil
}

// rawControl calls fn with f's descriptor.
func rawControl(f *os.File, fn func(fd uintptr)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("laboro: output file: %w", err)
	}
	return rc.Control(fn)
}
