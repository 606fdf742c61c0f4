// Command fuq-foreman runs fuq jobs on the workers that connect to it, and
// is also how a user submits jobs to it and follows them.
//
//	fuq-foreman [-listen ADDR] [-control SOCKET] [-grace D] [-log LEVEL]    serve
//	fuq-foreman submit [-wait] -name NAME -command CMD -tasks N [-wd DIR] [-logdir DIR]
//	fuq-foreman status [-tasks] [JOB]
//	fuq-foreman cancel JOB
//	fuq-foreman stop N|now                                                   STOP(N) to every worker
//
// The running foreman serves the other commands on a Unix socket
// (-control, $XDG_RUNTIME_DIR/fuq-foreman.sock or /tmp/fuq-foreman-UID.sock
// by default), readable by its user only. submit prints the job's id
// (job_1, …); with -wait it waits for the job and exits 0 only if every task
// succeeded. Exit status 2 is a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("fuq-foreman "+cmd, flag.ContinueOnError)
	control := fs.String("control", defaultSocket(), "the control socket")
	var run func() error
	switch cmd {
	case "serve":
		listen := fs.String("listen", ":7720", "address workers connect to")
		grace := fs.Duration("grace", fuq.DefaultGrace, "how long a vanished worker's tasks wait for it")
		level := zap.InfoLevel
		fs.Var(&level, "log", "log level: debug, info, warn, error")
		run = func() error { return serve(*listen, *control, *grace, level) }
	case "submit", "status", "cancel", "stop":
		run = client(cmd, fs, control)
	default:
		usage()
	}
	if err := fs.Parse(args); err != nil {
		usage()
	}
	if err := run(); err != nil {
		if errors.Is(err, errUsage) {
			usage()
		}
		fmt.Fprintln(os.Stderr, "fuq-foreman:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func usage() {
	fmt.Fprintln(os.Stderr, `usage: fuq-foreman [-listen ADDR] [-control SOCKET] [-grace D] [-log LEVEL]
       fuq-foreman submit [-wait] -name NAME -command CMD -tasks N [-wd DIR] [-logdir DIR]
       fuq-foreman status [-tasks] [JOB]
       fuq-foreman cancel JOB
       fuq-foreman stop N|now`)
	os.Exit(2)
}

// serve runs the foreman until an interrupt.
func serve(listen, control string, grace time.Duration, level zapcore.Level) error {
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace = zap.NewAtomicLevelAt(level), true
	log, _ := cfg.Build()
	f := &fuq.Foreman{Grace: grace, Logger: log}
	ex, err := laboro.New(laboro.WithRunner(f), laboro.WithPoolSize(64), laboro.WithConcurrency(64),
		laboro.WithBufferSize(1024), laboro.WithLogger(log))
	if err != nil {
		return err
	}
	defer ex.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	cl, err := listenControl(control)
	if err != nil {
		ln.Close()
		return err
	}
	defer os.Remove(control)
	log.Info("serving", zap.String("addr", ln.Addr().String()), zap.String("control", control))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: (&fuq.Control{Foreman: f, Executor: ex}).Handler()}
	go hs.Serve(cl)
	defer hs.Close()
	err = f.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		log.Info("stopped by a signal")
		return nil
	}
	return err
}

// listenControl listens on the control socket, readable by this user only;
// a socket left by a foreman that died is replaced, a live one is not.
func listenControl(path string) (net.Listener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("a foreman already answers on %s", path)
	}
	os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	return ln, err
}

func defaultSocket() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "fuq-foreman.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("fuq-foreman-%d.sock", os.Getuid()))
}
