// Command jobExecutorServer runs the jobs that jobCommander sends it.
//
//	jobExecutorServer portNum bufferSize threadPoolSize [-listen ADDR] [-dir DIR] [-max-conns N] [-http ADDR] [-log LEVEL] [-request-timeout D]
//
// Every commander must send the server's token: $LABORO_TOKEN when it is
// set, else the token kept in jobexec.token in the user's state directory
// ($LABORO_STATE_DIR, $XDG_STATE_HOME/laboro or ~/.local/state/laboro),
// created at the first start and readable by the user alone. jobCommander
// reads the same file, so on the same account nothing is to be done; on
// another machine, copy the file there or set LABORO_TOKEN. Jobs do not
// see the token. The server keeps nothing on disk but the outputs: a
// restart loses its queue, as the specification has it. Each output is
// removed once delivered; a server killed with SIGKILL leaves those of its
// running jobs, which the next server started on the same -dir removes (a
// hidden .jobExecutorServer-*.outputs file there notes each server's
// outputs; a live server's and files it did not make are left alone).
//
// A first Ctrl-C or SIGTERM does what an exit command does: queued jobs
// end as terminated before execution, the running ones finish and reach
// their commanders, and the server ends (status 0). A second one kills the
// running jobs and quits (status 130).
//
// With -http ADDR (on the loopback unless -http-public) it serves a live
// web console of its jobs and their Prometheus metrics at /metrics, both
// behind the same token: open http://ADDR/?token=TOKEN.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/internal/web"
	"github.com/laboro-go/laboro/protocols/jobexec"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("jobExecutorServer", "portNum bufferSize threadPoolSize [-listen ADDR] [-dir DIR] [-max-conns N] [-request-timeout D] [-http ADDR [-http-public]] [-log LEVEL] [-log-format FORMAT]",
		"Runs the jobs that jobCommander sends: at most bufferSize wait, at most threadPoolSize run at once. "+
			"Every commander must send the server's token: $LABORO_TOKEN, else the token in jobexec.token in the user's "+
			"state directory (~/.local/state/laboro), created at the first start; jobCommander on the same account "+
			"reads it, and on another machine needs a copy of the file or LABORO_TOKEN. "+
			"Nothing but the outputs is kept on disk: a restart loses the queue; the outputs a killed server left are removed by the next started on the same -dir. "+
			"A first Ctrl-C or SIGTERM drains as exit does; a second kills the running jobs. "+
			"-http serves a live web console and /metrics behind the same token (http://ADDR/?token=TOKEN).")
	listen := c.Flags.String("listen", "127.0.0.1", "address to listen on")
	dir := c.Flags.String("dir", ".", "directory for <pid>.output files")
	timeout := c.Flags.Duration("request-timeout", jobexec.DefaultRequestTimeout, "how long a commander may take to send its command")
	c.Positive("request-timeout")
	maxConns := c.Flags.Int("max-conns", jobexec.DefaultMaxConns, "connections served at once; more are refused")
	httpAddr := c.Flags.String("http", "", "serve the web console and /metrics on this HOST:PORT (loopback unless -http-public)")
	httpPublic := c.Flags.Bool("http-public", false, "let -http listen beyond this machine")
	logFlag := c.LogFlag(zap.InfoLevel)
	args := os.Args[1:]
	var pos []string // portNum, bufferSize, threadPoolSize
	if len(args) >= 3 && args[0] != "" && args[0][0] != '-' {
		pos, args = args[:3], args[3:]
	}
	c.Main(args, func(_ context.Context, rest []string) error {
		if pos == nil && len(rest) == 3 {
			pos, rest = rest, nil // after the flags
		}
		nums := positional(pos)
		switch {
		case pos == nil:
			return cli.Usagef("portNum, bufferSize and threadPoolSize are required, before or after the flags")
		case len(rest) > 0:
			return cli.Usagef("unexpected argument %q", rest[0])
		case nums[0] < 0 || nums[0] > 65535:
			return cli.Usagef("portNum %q: must be a number from 0 to 65535", pos[0])
		case nums[1] < 1:
			return cli.Usagef("bufferSize %q: must be a number of at least 1", pos[1])
		case nums[2] < 1 || nums[2] > cli.MaxAtOnce:
			return cli.Usagef("threadPoolSize %q: must be a number from 1 to %d", pos[2], cli.MaxAtOnce)
		case *maxConns < 1:
			return cli.Usagef("-max-conns %d: must be at least 1", *maxConns)
		}
		if *httpAddr != "" {
			if err := web.CheckAddr(*httpAddr, *httpPublic); err != nil {
				return cli.Usagef("%v", err)
			}
		}
		log := logFlag.Logger()
		// A first signal drains, a second kills.
		drain, kill, stop := cli.Interrupts(context.Background(), func() {
			log.Warn("interrupted: draining as exit does (interrupt again to kill the running jobs)")
		}, nil)
		defer stop()
		// The address is said whatever -log says: with port 0 it is the
		// only way to reach the server.
		err := serve(kill, drain, *listen, nums, *dir, *timeout, *maxConns, *httpAddr, log, logFlag.Records())
		switch {
		case errors.Is(err, jobexec.ErrServerTerminated):
			log.Info("drained and terminated")
			return nil
		case kill.Err() != nil && errors.Is(context.Cause(kill), cli.ErrInterrupted):
			log.Warn("interrupted again: the running jobs were killed")
			return cli.ErrInterrupted
		}
		return err
	})
}

// serve serves until an exit command or drain has been drained, or until
// ctx ends, which kills the running jobs.
// The serving record goes to always, written at every level.
func serve(ctx, drain context.Context, host string, nums []int, dir string, timeout time.Duration, maxConns int, httpAddr string, log, always *zap.Logger) error {
	// Read first, so that LABORO_TOKEN leaves the environment before any
	// job could inherit it.
	token, path, err := secret.Ensure("jobexec", "LABORO_TOKEN")
	if err != nil {
		return fmt.Errorf("the commanders' token: %w", err)
	}
	from := cmp.Or(path, "$LABORO_TOKEN")
	if err := secret.Guard(host, token, from); err != nil {
		return err
	}
	if httpAddr != "" {
		httpHost, _, _ := net.SplitHostPort(httpAddr) // checked by web.CheckAddr
		if err := secret.Guard(httpHost, token, from); err != nil {
			return err
		}
	}
	if fi, err := os.Stat(dir); err != nil {
		return cli.Usagef("-dir %q: %v", dir, errors.Unwrap(err))
	} else if !fi.IsDir() {
		return cli.Usagef("-dir %q: not a directory", dir)
	}
	outputs, err := openLedger(dir, log)
	if err != nil {
		return err
	}
	defer outputs.close()
	runner := &laboro.ProcessRunner{Dir: dir, Logger: log, Named: outputs.named}
	opts := []laboro.Option{laboro.WithBufferSize(nums[1]), laboro.WithPoolSize(nums[2]),
		laboro.WithRunner(runner), laboro.WithLogger(log)}
	var console *web.Web
	var consoleLn net.Listener
	if httpAddr != "" {
		if consoleLn, err = web.Listen(httpAddr); err != nil {
			return err
		}
		defer consoleLn.Close()
		console = web.New(token, nil)
		opts = append(opts, laboro.WithHistory(web.History))
	}
	ex, err := laboro.New(opts...)
	if err != nil {
		return err
	}
	defer ex.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(nums[0])))
	if err != nil {
		return err
	}
	always.Info("serving", zap.String("addr", ln.Addr().String()), zap.String("token", from))
	srv := &jobexec.Server{Executor: ex, Token: token, Logger: log, RequestTimeout: timeout, MaxConns: maxConns}
	context.AfterFunc(ctx, func() { ex.Close() })
	context.AfterFunc(drain, func() {
		if errors.Is(context.Cause(drain), cli.ErrInterrupted) {
			srv.Terminate()
		}
	})
	if console == nil {
		return srv.Serve(ctx, ln)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consoleDone := make(chan error, 1)
	go func() { consoleDone <- console.Serve(ctx, consoleLn, ex, from, log) }()
	err = srv.Serve(ctx, ln)
	cancel()
	if cerr := <-consoleDone; cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// positional parses the three numbers; one that is not a number is -1.
func positional(args []string) []int {
	nums := make([]int, len(args))
	for i, a := range args {
		v, err := strconv.Atoi(a)
		if err != nil {
			v = -1
		}
		nums[i] = v
	}
	return nums
}
