package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/internal/web"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
)

// webFlags are serve's flags for the reference's workers.
type webFlags struct {
	listen, cert, key, auth string
}

// check refuses a half-given -web.
func (w webFlags) check() error {
	if w.listen == "" {
		if w.cert != "" || w.key != "" {
			return cli.Usagef("-tls-cert and -tls-key go with -web")
		}
		return nil
	}
	if w.cert == "" || w.key == "" {
		return cli.Usagef("-web needs -tls-cert and -tls-key: the reference's workers speak HTTPS only")
	}
	return cli.CheckAddr("web", w.listen)
}

// secret returns the workers' shared secret: from -auth-file, else
// $FUQ_AUTH, else the state directory's fuq.token, created with a new
// token at the first start; and where it came from, for the log.
func (w webFlags) secret() ([]byte, string, error) {
	if w.auth != "" {
		auth, err := fuq.ReadAuth(w.auth)
		return auth, w.auth, err
	}
	tok, path, err := secret.Ensure("fuq", fuq.AuthEnv)
	if path == "" {
		path = "$" + fuq.AuthEnv
	}
	return []byte(tok), path, err
}

// config loads the certificate.
func (w webFlags) config(auth []byte) (fuq.WebConfig, error) {
	cert, err := tls.LoadX509KeyPair(w.cert, w.key)
	if err != nil {
		return fuq.WebConfig{}, err
	}
	return fuq.WebConfig{Auth: auth, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}, nil
}

// maxControlConns bounds the connections the control socket serves at
// once; its HTTP server has the binaries' limits (web.Server).
const maxControlConns = 64

// serve runs the foreman until ctx ends.
// The serving record goes to serving, which writes it whatever -log says:
// with a port of the system's choice, it is how the user learns the port.
func serve(ctx context.Context, listen, control, journal string, grace time.Duration, lim limits, wf webFlags, log, serving *zap.Logger) error {
	auth, authFrom, err := wf.secret()
	if err != nil {
		return fmt.Errorf("the workers' shared secret: %w", err)
	}
	for _, addr := range []string{listen, wf.listen} {
		host, _, _ := net.SplitHostPort(addr) // checked by cli.CheckAddr
		if err := secret.Guard(host, string(auth), authFrom); addr != "" && err != nil {
			return err
		}
	}
	var wcfg fuq.WebConfig
	if wf.listen != "" {
		if wcfg, err = wf.config(auth); err != nil {
			return err
		}
	}
	if journal == "" {
		dir, err := secret.Dir()
		if err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		journal = filepath.Join(dir, "fuq-foreman.journal")
	}
	jn, jobs, err := fuq.OpenJournalKeeping(journal, lim.endedTasks, lim.endedJobs)
	if err != nil {
		return err
	}
	defer jn.Close()
	f := &fuq.Foreman{Grace: grace, MaxTasks: lim.tasks, MaxEndedTasks: lim.endedTasks, MaxEndedJobs: lim.endedJobs, Secret: auth, Journal: jn, Logger: log}
	ex, err := laboro.New(laboro.WithRunner(f), laboro.WithPoolSize(64), laboro.WithConcurrency(64),
		laboro.WithBufferSize(1024), laboro.WithLogger(log))
	if err != nil {
		return err
	}
	defer ex.Close()
	// The journal closes first: the Runs that ex.Close ends are not
	// recorded as cancelled, and the next start resumes their jobs.
	defer jn.Close()
	ctl := &fuq.Control{Foreman: f, Executor: ex, Journal: jn, Explain: explain}
	if err := ctl.Resume(jobs); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var wln net.Listener
	if wf.listen != "" {
		if wln, err = net.Listen("tcp", wf.listen); err != nil {
			ln.Close()
			return err
		}
	}
	cl, err := listenControl(control)
	if err != nil {
		ln.Close()
		if wln != nil {
			wln.Close()
		}
		return err
	}
	defer os.Remove(control)
	fields := []zap.Field{zap.String("addr", ln.Addr().String()), zap.String("control", control), zap.String("secret", authFrom),
		zap.String("journal", journal)}
	if wln != nil {
		fields = append(fields, zap.String("web", "https://"+wln.Addr().String()))
	}
	serving.Info("serving", fields...)
	hs := web.Server(ctl.Handler(), log.Named("control"))
	if lim.control != 0 {
		hs.ReadHeaderTimeout, hs.ReadTimeout, hs.IdleTimeout, hs.WriteTimeout = lim.control, lim.control, lim.control, lim.control
		// Well under them, as fuq.DefaultMaxWait is under web.Server's: the
		// answer must be written before the deadline, on a loaded machine too.
		ctl.MaxWait = lim.control / 10
	}
	controlled := make(chan error, 1)
	go func() { controlled <- hs.Serve(netutil.LimitListener(cl, maxControlConns)) }()
	defer func() { hs.Close(); <-controlled }()
	// The listeners serve until ctx ends, or until one of them fails,
	// which ends the other.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.Serve(gctx, ln) })
	if wln != nil {
		g.Go(func() error { return f.ServeWeb(gctx, wln, wcfg) })
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		log.Info("stopped by a signal; the jobs not ended resume at the next start")
		return nil
	}
	return err
}

// explain words a refused submission for the user of submit: a limit's
// error names the flag that sets it.
func explain(err error) string {
	if errors.Is(err, fuq.ErrTooManyTasks) {
		return err.Error() + " (fuq-foreman serve -max-tasks)"
	}
	return err.Error()
}

// listenControl listens on the control socket, readable by this user only;
// a socket left by a foreman that died is replaced, a live one is not.
func listenControl(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if os.Getenv("XDG_RUNTIME_DIR") == "" && path == defaultSocket() {
		// Its directory is in the shared temporary directory: made by
		// this user, and no one else's to enter. (The runtime directory
		// is the user's by its definition.)
		if err := privateDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	if c, err := net.DialTimeout("unix", path, 5*time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("a foreman already answers on %s", path)
	}
	os.Remove(path)
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	return ln, err
}

// defaultSocket is the control socket's path: in the user's runtime
// directory, else in a directory of the user's own in the temporary one
// (a socket right in /tmp could be made first by another user, who would
// then hear the clients).
func defaultSocket() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "fuq-foreman.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("fuq-foreman-%d", os.Getuid()), "control.sock")
}

// privateDir refuses a directory that is not this user's alone.
func privateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("the control socket's directory %s is not a directory", dir)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("the control socket's directory %s belongs to another user: remove it, or give -control", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("the control socket's directory %s is open to other users (mode %04o): chmod 700 it, or give -control", dir, uint32(fi.Mode().Perm()))
	}
	return nil
}
