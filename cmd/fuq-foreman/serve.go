package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
)

// serve runs the foreman until ctx ends.
func serve(ctx context.Context, listen, control string, grace time.Duration, log *zap.Logger) error {
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
	hs := &http.Server{Handler: (&fuq.Control{Foreman: f, Executor: ex}).Handler(), ReadHeaderTimeout: 10 * time.Second}
	controlled := make(chan error, 1)
	go func() { controlled <- hs.Serve(cl) }()
	defer func() { hs.Close(); <-controlled }()
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
