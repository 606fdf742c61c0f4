package laboro

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A job's program named without a slash ("grep") is found in $PATH as
// exec.Command finds it, by a stat of each directory of $PATH in turn until
// one holds it: a dozen stats and some 50 allocations a job where $PATH is
// long, for the same few programs job after job. programs keeps each answer
// for a second, as a shell keeps its hashed commands but never longer: a
// program installed in an earlier directory of $PATH, or removed, is seen
// within that second, and at once when $PATH itself changes.

// programTTL is how long a program's place in $PATH is kept.
const programTTL = time.Second

// maxPrograms bounds the programs kept; when full, all are forgotten.
const maxPrograms = 256

// programs is the process's cache of places found in $PATH.
var programs programCache

type programCache struct {
	mu    sync.Mutex
	path  string // the $PATH they were found in
	found map[string]program
}

type program struct {
	file  string // absolute
	until time.Time
}

// find returns the file that exec.Command would run for name: for a name
// without a slash, its absolute place in $PATH, found at most programTTL
// ago; else, and when it is not found there or not as an absolute path,
// name itself, for exec.Command to look up and report as it does.
func (c *programCache) find(name string) string {
	if strings.Contains(name, "/") || name == "" {
		return name
	}
	path := os.Getenv("PATH")
	now := time.Now()
	c.mu.Lock()
	if c.path != path {
		c.path, c.found = path, nil
	}
	p, ok := c.found[name]
	c.mu.Unlock()
	if ok && now.Before(p.until) {
		return p.file
	}
	file, err := exec.LookPath(name)
	if err != nil || !filepath.IsAbs(file) {
		return name
	}
	c.mu.Lock()
	if c.path == path {
		if c.found == nil || len(c.found) >= maxPrograms {
			c.found = make(map[string]program)
		}
		c.found[name] = program{file: file, until: now.Add(programTTL)}
	}
	c.mu.Unlock()
	return file
}
