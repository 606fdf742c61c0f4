package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"
)

// A server's outputs are removed as they are delivered; one killed with
// SIGKILL (or by the OOM killer, or with its whole cgroup) leaves those of
// its running and undelivered jobs behind, <pid>.output files nobody will
// ask for. So each server keeps a ledger of its outputs in their directory,
// .jobExecutorServer-*.outputs: "+ NAME" as an output gets its name,
// "- NAME" just before it is removed (so that a ledger never names a file
// that is gone, whose name a later job's output may take). A server holds
// an exclusive flock on its ledger for as long as it lives, which the
// kernel drops however it dies; at start, a server takes each ledger it
// can lock as a dead server's, removes the outputs noted there and still
// there, and then the ledger. A live server's ledger cannot be locked, so
// its outputs are never touched; and a file the ledgers do not name (a
// user's own 42.output) is never touched either. What it cannot cover: an
// output named in the microseconds before it is noted, should the server
// be killed then (it is left behind).

// ledgerPattern matches the ledgers of a directory.
const ledgerPattern = ".jobExecutorServer-*.outputs"

// ledgerCompact is the size past which a ledger is rewritten with the live
// outputs alone.
const ledgerCompact = 64 << 10

// ledger is a server's record of its outputs on disk.
type ledger struct {
	log *zap.Logger

	mu   sync.Mutex
	f    *os.File // locked for the server's life
	size int64
	live map[string]struct{}
}

// openLedger removes the outputs the dead servers of dir left, then starts
// this server's ledger there.
func openLedger(dir string, log *zap.Logger) (*ledger, error) {
	sweepLedgers(dir, log)
	var suffix [6]byte
	rand.Read(suffix[:])
	name := strings.Replace(ledgerPattern, "*", fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(suffix[:])), 1)
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("-dir %q: the record of its outputs: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("-dir %q: locking the record of its outputs: %w", dir, err)
	}
	return &ledger{log: log, f: f, live: map[string]struct{}{}}, nil
}

// named notes an output as it gets its name; it is ProcessRunner.Named.
func (l *ledger) named(path string) (removing func()) {
	name := filepath.Base(path)
	if strings.ContainsAny(name, "\n") {
		return nil
	}
	l.note('+', name)
	return func() { l.note('-', name) }
}

func (l *ledger) note(op byte, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if op == '+' {
		l.live[name] = struct{}{}
	} else {
		delete(l.live, name)
	}
	n, err := l.f.WriteAt([]byte(string(op)+" "+name+"\n"), l.size)
	l.size += int64(n)
	if err != nil {
		// Only what a killed server leaves is at stake: say so, go on.
		l.log.Warn("cannot note an output in the record of outputs; should the server be killed, the next may leave it behind",
			zap.String("record", l.f.Name()), zap.Error(err))
		return
	}
	if l.size > ledgerCompact {
		l.compact()
	}
}

// compact rewrites the ledger with the live outputs alone. Killed midway,
// the server leaves a ledger that names fewer outputs: some are left
// behind, none is removed that should not be.
func (l *ledger) compact() {
	var b strings.Builder
	for name := range l.live {
		b.WriteString("+ " + name + "\n")
	}
	if err := l.f.Truncate(0); err != nil {
		return
	}
	n, _ := l.f.WriteAt([]byte(b.String()), 0)
	l.size = int64(n)
}

// close removes the ledger if every output it notes is gone, and else
// leaves it for the next server to sweep; either way it releases it.
func (l *ledger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.live) == 0 {
		os.Remove(l.f.Name())
	}
	l.f.Close()
}

// sweepLedgers removes the outputs noted in the ledgers of dir that no live
// server holds, and those ledgers.
func sweepLedgers(dir string, log *zap.Logger) {
	paths, _ := filepath.Glob(filepath.Join(dir, ledgerPattern))
	for _, p := range paths {
		removed, err := sweepLedger(p)
		if err != nil {
			log.Warn("cannot remove the outputs a killed server left", zap.String("record", p), zap.Error(err))
			continue
		}
		if len(removed) > 0 {
			log.Warn("removed the outputs a killed server left", zap.String("dir", dir), zap.Strings("outputs", removed))
		}
	}
}

// sweepLedger removes the outputs noted in ledger p and still there, then
// p, unless a live server holds it; it returns the names removed.
func sweepLedger(p string) ([]string, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // swept by another server starting
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	// Locked after another server swept it and removed it: nothing to do.
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink == 0 {
		return nil, err
	}
	live := map[string]struct{}{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		op, name, ok := strings.Cut(sc.Text(), " ")
		// A name with a slash would be a file elsewhere: not an output.
		if !ok || name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
			continue
		}
		switch op {
		case "+":
			live[name] = struct{}{}
		case "-":
			delete(live, name)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	dir := filepath.Dir(p)
	var removed []string
	for name := range live {
		if err := os.Remove(filepath.Join(dir, name)); err == nil {
			removed = append(removed, name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return removed, err
		}
	}
	return removed, os.Remove(p)
}
