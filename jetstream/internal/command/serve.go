package command

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/console"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/internal/web"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// serve runs the service, and with no -nats an embedded NATS server, and
// -workers job slots of its own. The first interrupt stops the service and
// lets the local jobs finish; a second one kills them (they run again
// elsewhere).
func serve(args []string) int {
	c := newCommon("serve", "[flags]",
		"Runs the service that dispatches submitted jobs. With no -nats it starts a NATS server with JetStream "+
			"inside the process, storing its data under -data and listening on -listen, and runs -workers jobs at "+
			"a time itself: one command runs everything on one machine, and its jobs survive its restart. With "+
			"-nats it connects to an existing NATS cluster instead, and workers run wherever `laboro worker` runs. "+
			"The first interrupt stops the service and lets the jobs running here finish; a second one kills them "+
			"(they run again elsewhere).\n\n"+
			"Exit status: 0 when stopped by an interrupt, 1 on an error, 2 for a usage error.")
	c.deliveryFlags()
	data := c.fs.String("data", defaultDataDir(), "data directory of the embedded NATS server")
	listen := c.fs.String("listen", "127.0.0.1:4222", "address of the embedded NATS server")
	workers := c.fs.Int("workers", runtime.NumCPU(), "jobs this process runs at once itself (0: none)")
	concurrency := c.fs.Int("c", jetstream.DefaultServiceConcurrency, "jobs out at once (published, waiting for a result)")
	dir := c.fs.String("dir", "", "directory for the <pid>.output files of the jobs run here")
	replicas := c.fs.Int("replicas", 0, "stream replicas on a NATS cluster, 3 for production (0: keep the streams' count, 1 for new ones)")
	httpAddr := c.fs.String("http", "", "serve a live web console of the fleet's jobs and /metrics on this HOST:PORT, behind laboro.token (loopback unless -http-public)")
	httpPublic := c.fs.Bool("http-public", false, "let -http listen beyond this machine")
	keep := c.fs.Int("keep", jetstream.DefaultMaxTracked, "jobs whose state serve keeps for status; past it, the batches that ended are forgotten, oldest first")
	tlsCert := c.fs.String("tls-cert", "", "the embedded server speaks TLS with this certificate (PEM), with -tls-key; its clients give -ca")
	tlsKey := c.fs.String("tls-key", "", "the certificate's key (PEM), with -tls-cert")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *httpAddr != "" {
		if err := web.CheckAddr(*httpAddr, *httpPublic); err != nil {
			return c.usageError("%v", err)
		}
	}
	switch {
	case c.fs.NArg() > 0:
		return c.usageError("unexpected argument %q", c.fs.Arg(0))
	case *workers < 0 || *workers > cli.MaxAtOnce:
		return c.usageError("-workers %d: must be from 0 to %d", *workers, cli.MaxAtOnce)
	case *concurrency <= 0 || *concurrency > cli.MaxAtOnce:
		return c.usageError("-c %d: must be from 1 to %d", *concurrency, cli.MaxAtOnce)
	case *replicas < 0:
		return c.usageError("-replicas %d: must not be negative", *replicas)
	case *keep < 1:
		return c.usageError("-keep %d: must be at least 1", *keep)
	}
	if c.url == "" { // the embedded server's address
		if _, _, err := splitHostPort(*listen); err != nil {
			return c.usageError("-listen %q: %v", *listen, err)
		}
	}
	var certs []tls.Certificate
	switch {
	case (*tlsCert == "") != (*tlsKey == ""):
		return c.usageError("-tls-cert and -tls-key go together")
	case *tlsCert != "" && c.url != "":
		return c.usageError("-tls-cert is for the embedded server; with -nats, the cluster has its own")
	case *tlsCert != "":
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return c.usageError("-tls-cert %s, -tls-key %s: %v", *tlsCert, *tlsKey, err)
		}
		certs = []tls.Certificate{cert}
	}
	defer c.log.Sync()
	local := &jetstream.Worker{}
	serviceCtx, stopService := context.WithCancel(context.Background())
	defer stopService()
	ctx, stop := interruptTwice(func() {
		c.log.Info("stopping: the jobs running here finish; interrupt again to stop at once")
		stopService()
		local.Drain()
	})
	defer stop()

	url := c.url
	if url == "" {
		var consoleHost *string
		if *httpAddr != "" {
			host, _, _ := net.SplitHostPort(*httpAddr) // checked by web.CheckAddr
			consoleHost = &host
		}
		srv, code := c.embedded(*data, *listen, consoleHost, certs)
		if srv == nil {
			return code
		}
		defer srv.Shutdown()
		// This process (the service and its own workers) reaches the
		// server without a socket: no system call a message, and no TLS,
		// whose certificate names the host the other workers reach.
		c.inProcess = srv.InProcess()
		url = "nats://" + strings.TrimPrefix(srv.URL(), "tls://")
	}
	nc, err := c.connect(url, false)
	if err != nil {
		c.log.Error("connect", zap.Error(err))
		return exitFailed
	}
	defer nc.Close()
	cfg := c.config()
	cfg.Replicas = *replicas
	cfg.Dir = *dir
	// The jobs are signed with the key of laboro's token, which the
	// workers holding it check (jetstream.Config.JobKey); the service
	// proves itself to the clients with the key of theirs (ClientKey).
	cfg.JobKey = jetstream.JobKey(c.token, c.stream)
	cfg.ClientKey = jetstream.ClientKey(c.token, c.stream)

	errs := make(chan error, 2)
	service := &jetstream.Service{Conn: nc, Config: cfg, Concurrency: *concurrency, MaxTracked: *keep}
	running := 1
	if *httpAddr != "" {
		// The fleet's console: the jobs the service hands out, and the
		// level that caps them across every worker. It takes the token
		// the service's clients present.
		if c.token == "" {
			c.log.Error("the console needs laboro's token (laboro.token, or $LABORO_TOKEN)", zap.Error(c.tokenErr))
			return exitFailed
		}
		host, _, _ := net.SplitHostPort(*httpAddr) // checked by web.CheckAddr
		if err := secret.Guard(host, c.token, cmp.Or(c.tokenFrom, "laboro's token (laboro.token, or $LABORO_TOKEN)")); err != nil {
			c.log.Error("the console", zap.Error(err))
			return exitFailed
		}
		ln, err := web.Listen(*httpAddr)
		if err != nil {
			c.log.Error("console", zap.Error(err))
			return exitFailed
		}
		defer ln.Close()
		con := web.New(c.token, &web.Fleet{Tail: service.Tail, Workers: func() []console.Worker {
			return consoleWorkers(service.Workers())
		}, Batches: func() []console.Batch {
			var list []console.Batch
			for _, b := range service.Batches(console.MaxListed) {
				// Its submissions not read yet are jobs of it too.
				cb := console.Batch{Name: b.Batch, Jobs: b.Jobs + b.Unread, Succeeded: b.Succeeded, Failed: b.Failures(),
					Cancelled: b.Cancelled, Submitted: b.Submitted}
				if b.Unread == 0 {
					cb.Ended = b.Ended
				}
				list = append(list, cb)
			}
			return list
		}, Cancel: func(ctx context.Context, id string) error {
			// Recorded in the streams, as laboro cancel's: a job the
			// page stopped while it waited does not run after a restart.
			reply, err := service.Cancel(ctx, id)
			if err == nil && len(reply.Jobs) == 1 && reply.Jobs[0].State == jetstream.StateUnknown {
				err = fmt.Errorf("%w: %s", laboro.ErrNotFound, id)
			}
			return err
		}})
		started := make(chan *laboro.Executor, 1)
		service.History = console.History
		service.KeepOutputs = keptOutputs
		service.Started = func(ex *laboro.Executor) { started <- ex }
		served := make(chan struct{})
		go func() {
			defer close(served)
			select {
			case ex := <-started:
				if err := con.Serve(serviceCtx, ln, ex, "laboro.token or $LABORO_TOKEN", c.log); err != nil {
					c.log.Error("console", zap.Error(err))
				}
			case <-serviceCtx.Done():
			}
		}()
		defer func() { stopService(); <-served }()
	}
	go func() { errs <- service.Run(serviceCtx) }()
	if *workers > 0 {
		running++
		local.Conn, local.Config, local.Concurrency, local.OutputDir = nc, cfg, *workers, *dir
		local.Name = "local"
		// The service logs each failed job; its local worker need not too.
		local.Logger = c.log.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core { return withoutFailures{core} }))
		go func() { errs <- local.Run(ctx) }()
	}
	code := 0
	for range running {
		if err := <-errs; err != nil {
			c.log.Error("stopped", zap.Error(err))
			code = exitFailed
			stop()
			stopService()
		}
	}
	if code == 0 {
		c.log.Info("stopped; the jobs not finished stay in the streams")
	}
	return code
}

// embedded starts serve's embedded NATS server, with its data in data,
// listening on listen, speaking TLS with certs if any. On failure it
// returns nil and the exit status.
func (c *common) embedded(data, listen string, consoleHost *string, certs []tls.Certificate) (*jetstream.Embedded, int) {
	host, port, _ := splitHostPort(listen) // checked by serve
	if err := os.MkdirAll(data, 0o700); err != nil {
		c.log.Error("data directory", zap.Error(err))
		return nil, exitFailed
	}
	// The clients' token: $LABORO_TOKEN, else laboro.token in the state
	// directory, made now if there is none; the other commands of this
	// user find it there.
	tok, path, err := secret.Ensure("laboro", "LABORO_TOKEN")
	if err != nil {
		c.log.Error("the clients' token", zap.Error(err))
		return nil, exitFailed
	}
	c.token, c.tokenSet = tok, true
	if path == "" {
		path = "$LABORO_TOKEN"
	}
	c.tokenFrom = path
	if err := secret.Guard(host, tok, path); err != nil {
		c.log.Error("the clients' token", zap.Error(err))
		return nil, exitFailed
	}
	if consoleHost != nil { // the console takes the same token: refused before the server starts
		if err := secret.Guard(*consoleHost, tok, path); err != nil {
			c.log.Error("the console", zap.Error(err))
			return nil, exitFailed
		}
	}
	opts := []jetstream.EmbeddedOption{jetstream.WithToken(tok)}
	if certs != nil {
		opts = append(opts, func(o *server.Options) {
			o.TLSConfig = &tls.Config{Certificates: certs, MinVersion: tls.VersionTLS12}
			o.TLSTimeout = 2
		})
	} else if !secret.Loopback(host) {
		c.log.Warn("the embedded server listens beyond this machine without TLS: the token stays off the wire and a worker gives its results only to a server that proves it is this one, but the jobs' commands and outputs cross the network in clear, for any program between to read; give -tls-cert and -tls-key",
			zap.String("listen", listen))
	}
	srv, err := jetstream.StartEmbedded(data, host, port, opts...)
	if err != nil {
		c.log.Error("embedded NATS server", zap.Error(err))
		return nil, exitFailed
	}
	c.log.Info("embedded NATS server", zap.String("url", srv.URL()), zap.String("data", data), zap.String("token", path))
	return srv, 0
}

// defaultDataDir is $XDG_STATE_HOME/laboro, or ~/.local/state/laboro.
func defaultDataDir() string {
	// The state directory of the tokens: an instance kept apart by
	// $LABORO_STATE_DIR keeps its streams apart too.
	if d, err := secret.Dir(); err == nil {
		return d
	}
	return filepath.Join(os.TempDir(), "laboro")
}

// splitHostPort splits the -listen address; port 0 picks a free port.
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q: must be a number from 0 to 65535", p)
	}
	if port == 0 {
		port = -1 // the NATS server's "any free port"
	}
	return host, port, nil
}

// keptOutputs bounds the bytes of finished jobs' outputs that serve -http
// keeps on its disk, for its console to show them.
const keptOutputs = 256 << 20

// withoutFailures is a log core that drops the Executor's "job failed"
// lines, which the service's own log has already.
type withoutFailures struct{ zapcore.Core }

func (c withoutFailures) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == "job failed" {
		return ce
	}
	return c.Core.Check(e, ce)
}

func (c withoutFailures) With(fields []zapcore.Field) zapcore.Core {
	return withoutFailures{c.Core.With(fields)}
}

// consoleWorkers is the fleet as the console lists it: each worker by its
// name, and two live workers sharing a name each with its run, as each
// logged it.
func consoleWorkers(ws []jetstream.WorkerInfo) []console.Worker {
	list := make([]console.Worker, 0, len(ws))
	for i, w := range ws {
		name := w.Name
		twin := (i > 0 && ws[i-1].Name == w.Name) || (i+1 < len(ws) && ws[i+1].Name == w.Name)
		if twin && w.Run != "" {
			name += " (run " + w.Run + ")"
		}
		list = append(list, console.Worker{Name: name, Slots: w.Slots, Running: w.Running})
	}
	return list
}
