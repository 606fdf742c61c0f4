// Command workerserver-worker runs the jobs of a workerserver master.
//
//	workerserver-worker -url URL -id ID -codes DIR -cache DIR [-password-file FILE] [-c N] [-ping D] [-progress D] [-first-progress D] [-reconnect D] [-max-result BYTES]
//
// The password is read from -password-file, else from
// WORKERSERVER_PASSWORD, which is then removed from the environment so
// that no job sees it. A job for worker code
// CODE runs the executable DIR/CODE with the job's params as JSON on its
// standard input; its standard output (JSON, at most -max-result bytes) is the job's result. Statuses
// that cannot reach the master wait in the cache directory, and are sent,
// in order, once it is back. One worker process runs under an id: it
// exits 1 at once if another one holds its cache directory, and, refused
// by the master because another process runs under its id (HTTP 409),
// tries again until that one has had a lease to prove it ended (a
// crashed worker started again is taken), then exits 1. If the master
// refuses its password (HTTP 401) before it has once accepted it, it exits
// 1 at once; once accepted, it keeps trying, with a warning (the master
// may come back with another servers file). Exit status: 0 after an
// interrupt, 1 on an error, 2 for a usage error.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/protocols/workerserver"
	"github.com/laboro-go/laboro/transport/link"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("workerserver-worker", "-url URL -id ID -codes DIR -cache DIR [-password-file FILE] [-c N] [-ping D] [-progress D] [-first-progress D] [-reconnect D] [-max-result BYTES]",
		"Runs the jobs of a workerserver master, N at a time. The password is read from -password-file, else "+
			"$WORKERSERVER_PASSWORD (which no job sees). A job "+
			"for worker code CODE runs the executable DIR/CODE with the job's params as JSON on its standard input; its "+
			"standard output (JSON, at most -max-result bytes) is the job's result. Statuses that cannot reach the master wait in the cache "+
			"directory, and are sent, in order, once it is back. One worker process runs under an id: it exits 1 at once if "+
			"another one holds its cache directory, and, refused by the master because another process runs under its id, "+
			"tries again until that one has had the master's lease to prove it ended (a crashed worker started again is "+
			"taken), then exits 1. If the master refuses its password before it has once accepted it, it exits 1 at once; "+
			"once accepted, it keeps trying, with a warning (the master may come back with another servers file). "+
			"Exit status: 0 after an interrupt, 1 on an error, 2 for a usage error.")
	// Read at once and removed from the environment, so that no job sees it.
	password, _ := secret.FromEnv("WORKERSERVER_PASSWORD")
	w := &workerserver.Worker{Password: password, Version: "1"}
	passwordFile := c.Flags.String("password-file", "", "a file holding the password (default $WORKERSERVER_PASSWORD)")
	caFile := c.Flags.String("ca", "", "the CA of an https:// master's certificate, PEM (default: the system's roots)")
	c.Flags.StringVar(&w.URL, "url", "", "the master's base URL, like http://master:8080")
	c.Flags.StringVar(&w.ServerID, "id", "", "this worker's id at the master")
	c.Flags.StringVar(&w.CodeDir, "codes", "", "folder of executables, one per worker code")
	c.Flags.StringVar(&w.CacheDir, "cache", "", "folder where statuses wait for the master")
	c.Flags.IntVar(&w.Concurrency, "c", runtime.NumCPU(), "jobs at once")
	// The defaults are the flags' own, so that a 0 (which the Worker
	// would take for them) is refused rather than quietly meaning them.
	c.Flags.DurationVar(&w.Ping, "ping", link.DefaultPing, "ping interval when no job came")
	c.Flags.DurationVar(&w.Progress, "progress", link.DefaultProgress, "progress re-sent after")
	c.Flags.DurationVar(&w.FirstProgress, "first-progress", workerserver.DefaultFirstProgress,
		"a job's first progress sent once it has run for (at most -progress; 0 or negative: as it starts)")
	c.Flags.DurationVar(&w.Reconnect, "reconnect", link.DefaultReconnect, "wait before connecting again")
	c.Flags.Int64Var(&w.MaxResult, "max-result", workerserver.DefaultMaxResult,
		"the largest output of a job sent as its result, in bytes; a job that prints more fails (the master takes requests of 1 MiB, form-encoded: a byte of JSON may take three)")
	c.Positive("max-result", "ping", "progress", "reconnect")
	logFlag := c.LogFlag(zap.InfoLevel)
	c.Main(os.Args[1:], func(_ context.Context, args []string) error {
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				return fmt.Errorf("-ca: %w", err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				return fmt.Errorf("-ca %s: no PEM certificate", *caFile)
			}
			w.Client = workerserver.NewClient(w.Concurrency, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
		}
		if *passwordFile != "" {
			p, err := secret.ReadFile(*passwordFile)
			if err != nil {
				return fmt.Errorf("-password-file: %w", err)
			}
			w.Password = p
		}
		for _, req := range []struct{ flag, value string }{{"-url", w.URL}, {"-id", w.ServerID}, {"-codes", w.CodeDir}, {"-cache", w.CacheDir}} {
			if req.value == "" {
				return cli.Usagef("%s is required", req.flag)
			}
		}
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case w.Concurrency < 1 || w.Concurrency > cli.MaxAtOnce:
			return cli.Usagef("-c %d: must be from 1 to %d", w.Concurrency, cli.MaxAtOnce)
		}
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cli.Usagef("-url %q: want the master's http:// or https:// base URL, like http://master:8080", w.URL)
		}
		if fi, err := os.Stat(w.CodeDir); err != nil || !fi.IsDir() {
			return cli.Usagef("-codes %q: not a folder of executables", w.CodeDir)
		}
		if w.Password == "" {
			return cli.Usagef("no password: set WORKERSERVER_PASSWORD, or give -password-file")
		}
		if w.FirstProgress == 0 {
			w.FirstProgress = -1 // as it starts: the Worker's 0 is its default
		}
		w.Logger = logFlag.Logger()
		// A first signal drains: the running jobs finish and are sent; a
		// second kills them, and the master gives them to other workers.
		_, kill, stop := cli.Interrupts(context.Background(), func() {
			w.Drain()
			w.Logger.Warn("interrupted: the running jobs finish (interrupt again to stop at once; the master gives them to others)")
		}, nil)
		defer stop()
		switch err := w.Run(kill); {
		case errors.Is(err, workerserver.ErrPasswordRefused):
			return fmt.Errorf("%w (check -id, and -password-file or $WORKERSERVER_PASSWORD)", err)
		case err == nil:
			w.Logger.Info("drained and stopped")
			return nil
		case errors.Is(err, context.Canceled):
			w.Logger.Info("stopped by a signal; the jobs it ran go to other workers")
			return nil
		default:
			return err
		}
	})
}
