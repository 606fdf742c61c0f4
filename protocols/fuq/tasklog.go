package fuq

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// MaxLogTail is the most of a task's log that TaskLog reads: the end of
// its standard output and error, enough to say why it failed.
const MaxLogTail = 512

// TaskLog finds the log of task n of job d as the workers name it,
// LoggingDir/<Name>_<n>.log or, for a later run, <Name>_<n>-<i>.log (the
// newest of them), and returns its path and its last lines, at most
// MaxLogTail bytes of them (a line cut by that bound is left out, unless
// it is the only one). path is "" when no log is readable here: the
// logging directory may be on the workers' hosts only. Only a regular
// file is read, and no more of it than MaxLogTail, whatever its size.
func TaskLog(d JobDescription, n int) (path string, tail []byte) {
	if checkName(d.Name) != nil || d.LoggingDir == "" {
		return "", nil
	}
	base := filepath.Join(d.LoggingDir, fmt.Sprintf("%s_%d", d.Name, n))
	names, _ := filepath.Glob(globEscape(base) + "-*.log")
	names = append(names, base+".log")
	var when time.Time
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() && (path == "" || fi.ModTime().After(when)) {
			path, when = name, fi.ModTime()
		}
	}
	if path == "" {
		return "", nil
	}
	// O_NONBLOCK: should the name have become a FIFO since the Stat, the
	// open does not wait for a writer, and the Stat below refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", nil
	}
	off := max(0, fi.Size()-MaxLogTail)
	b := make([]byte, min(fi.Size(), MaxLogTail))
	k, err := f.ReadAt(b, off)
	if err != nil && err != io.EOF {
		return path, nil
	}
	b = bytes.TrimRight(b[:k], "\n")
	if off > 0 { // the first line may be cut: keep whole lines
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return path, bytes.ToValidUTF8(b, nil)
}

// globEscape escapes the characters filepath.Match treats as special.
func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
