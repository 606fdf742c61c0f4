// Command fuq-worker runs the tasks a fuq foreman pushes to it.
//
//	fuq-worker -connect HOST:PORT [-np N] [-spool DIR] [-log LEVEL]
//	fuq-worker -foreman https://HOST:PORT [-ca FILE] [-certname NAME] [-auth-file FILE] [-node NAME] [-np N] [-spool DIR] [-log LEVEL]
//
// With -connect it speaks the spec's plain TCP conversation (fuq-foreman
// -listen); with -foreman it joins a foreman as the reference's workers do,
// over HTTPS and a websocket (a real fuqsrv foreman, or fuq-foreman -web):
// -ca is the CA of the foreman's certificate (the system's roots by
// default), -certname the name it carries when that is not the URL's host,
// and the shared secret comes from -auth-file (the secret alone, or the
// reference's fuqsrv.conf) or from $FUQ_AUTH, never from the command line.
//
// N processors are offered (the number of CPUs by default); each task runs
// "Command <task number>" in its job's working directory, with its output
// in LoggingDir/<Name>_<Task>.log. When the connection drops, the tasks
// run on and the worker connects again; the outcomes of tasks that ended
// meanwhile wait in the spool directory until the foreman has them. Exit
// status: 0 when the foreman stopped the worker, 1 on an error (a refused
// login among them), 2 for a usage error, 130 when interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/fuq"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("fuq-worker", "-connect HOST:PORT | -foreman URL [-ca FILE] [-certname NAME] [-auth-file FILE] [-node NAME]  [-np N] [-spool DIR] [-reconnect D] [-log LEVEL]",
		"Runs the tasks a fuq foreman pushes to it, N at a time: each runs \"Command <task number>\" in its job's "+
			"working directory, with its output in LoggingDir/<Name>_<Task>.log. -connect speaks plain TCP to "+
			"fuq-foreman; -foreman joins a foreman over HTTPS and a websocket as the reference's workers do (a real "+
			"fuqsrv, or fuq-foreman -web). Either way the worker proves it holds the foreman's shared secret: from "+
			"-auth-file, else $"+fuq.AuthEnv+", else the fuq.token that a foreman of the same user keeps in "+
			"~/.local/state/laboro. When the "+
			"connection drops, the tasks run on and the worker connects again; the outcomes of tasks that ended "+
			"meanwhile wait in the spool directory. Exit status: 0 when the foreman stopped the worker, 1 on an "+
			"error, 2 for a usage error, 130 when interrupted.")
	w := &fuq.Worker{}
	var web webFlags
	c.Flags.StringVar(&w.Addr, "connect", "", "the foreman's HOST:PORT, over plain TCP")
	c.Flags.StringVar(&web.url, "foreman", "", "the foreman's https://HOST:PORT, over HTTPS and a websocket")
	c.Flags.StringVar(&web.ca, "ca", "", "the CA of the foreman's certificate, PEM (default: the system's roots), with -foreman")
	c.Flags.StringVar(&web.certName, "certname", "", "the name in the foreman's certificate, if not the URL's host, with -foreman")
	c.Flags.StringVar(&web.auth, "auth-file", "", "the shared secret, alone or as fuqsrv.conf's auth line (default $"+fuq.AuthEnv+", else the state directory's fuq.token)")
	c.Flags.StringVar(&web.node, "node", "", "the name the worker logs in with (default: the host's name), with -foreman")
	c.Flags.IntVar(&w.Procs, "np", runtime.NumCPU(), "processors to offer")
	c.Flags.StringVar(&w.SpoolDir, "spool", defaultSpool(), "directory for outcomes not yet delivered")
	c.Flags.DurationVar(&w.Reconnect, "reconnect", fuq.DefaultReconnect, "first wait before connecting again")
	c.Positive("reconnect")
	logFlag := c.LogFlag(zap.InfoLevel)
	c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case (w.Addr == "") == (web.url == ""):
			return cli.Usagef("one of -connect HOST:PORT and -foreman URL is required")
		case w.Procs < 1 || w.Procs > cli.MaxAtOnce:
			return cli.Usagef("-np %d: must be from 1 to %d", w.Procs, cli.MaxAtOnce)
		}
		if w.Addr != "" {
			if err := cli.CheckAddr("connect", w.Addr); err != nil {
				return err
			}
		}
		auth, err := loadSecret(web.auth)
		if err != nil {
			return err
		}
		if w.Web, err = web.dialer(auth); err != nil {
			return err
		}
		if w.Web == nil {
			w.Secret = auth
		}
		w.Logger = logFlag.Logger()
		err = w.Run(ctx)
		if errors.Is(err, fuq.ErrStopped) {
			return nil
		}
		return err
	})
}

// defaultSpool is a directory of this user's that survives a restart.
func defaultSpool() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "fuq-worker")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("fuq-worker-%d", os.Getuid()))
}
