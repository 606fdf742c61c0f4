// Command laboro runs shell jobs on NATS JetStream, on one machine or many.
//
//	laboro run    [-workers N] (-f FILE | COMMAND…)
//	laboro serve  [-nats URL,…] [-data DIR] [-listen HOST:PORT] [-workers N] [-c N]
//	laboro worker [-nats URL,…] [-c N] [-dir DIR]
//	laboro submit [-nats URL,…] [-batch NAME] [-wait] (-f FILE | COMMAND…)
//	laboro status [-nats URL,…] [-watch] [-failed] [BATCH|ID…]
//	laboro output [-nats URL,…] ID…
//
// Jobs are shell command lines: the COMMAND words joined by spaces, or,
// with -f, each non-empty line of FILE ("-" is standard input) that does
// not start with '#'.
//
// run runs jobs on this machine and waits for them, with a NATS server of
// its own that lives as long as the command: nothing to set up.
//
// serve runs the service that dispatches submitted jobs. With no -nats it
// starts a NATS server with JetStream inside the process, storing its data
// under -data and listening on -listen (127.0.0.1:4222), and runs -workers
// jobs at a time itself (the number of CPUs): one command runs everything
// on one machine, and its jobs survive its restart. With -nats it connects
// to an existing NATS cluster instead, and workers run wherever `laboro
// worker` runs.
//
// worker runs jobs on this machine, -c at a time, until interrupted. It
// waits for the server when it is not up yet, and reconnects when it goes
// away. The first interrupt (SIGINT or SIGTERM) lets the running jobs finish
// and deliver their results, then it exits; a second one kills them, and
// they run again elsewhere. serve stops the same way: its service at once,
// its local jobs after they finish.
//
// submit stores jobs and prints the job's id, or the batch's name, on
// standard output. With -wait it waits for the jobs, as run does.
//
// run and submit -wait print a single job's output and return its exit
// status; for a batch they show progress on a terminal, then print a
// summary line and the jobs that did not succeed, and return 1 if any did
// not.
//
// status prints every batch, or the batches and jobs named; -watch follows
// one batch until it is done, -failed lists the jobs that did not succeed.
// output prints the output of finished jobs, waiting for those still
// running (it refuses ids the service does not know).
//
// The commands other than run and serve reach NATS at -nats, $LABORO_NATS,
// or nats://127.0.0.1:4222. When $LABORO_TOKEN is set, serve's embedded
// server requires it from every client and the commands present it; -creds
// gives a credentials file for a cluster that wants one. Logs go to standard error. Exit status: 0 on
// success, 1 when a job failed or NATS or the service cannot be reached, 2
// for a usage error, 130 when interrupted.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// defaultURL is where the commands other than serve look for NATS, the
// address of serve's embedded server.
const defaultURL = "nats://127.0.0.1:4222"

// Exit statuses.
const (
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() {
	os.Exit(run(os.Args[1:]))
}

var commands = map[string]func(args []string) int{
	"serve":  serve,
	"worker": worker,
	"submit": submit,
	"status": status,
	"run":    runJobs,
	"output": output,
}

const usage = `usage:
  laboro serve  [-nats URL,…] [-data DIR] [-listen HOST:PORT] [-workers N] [-c N]
  laboro worker [-nats URL,…] [-c N] [-dir DIR]
  laboro submit [-nats URL,…] [-batch NAME] [-wait] (-f FILE | COMMAND…)
  laboro status [-nats URL,…] [-watch] [-failed] [BATCH|ID…]
  laboro output [-nats URL,…] ID…
  laboro run    [-workers N] (-f FILE | COMMAND…)
Run 'laboro COMMAND -h' for a command's flags.`

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return exitUsage
	}
	cmd := commands[args[0]]
	if cmd == nil {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
			fmt.Println(usage)
			return 0
		}
		fmt.Fprintf(os.Stderr, "laboro: unknown command %q\n%s\n", args[0], usage)
		return exitUsage
	}
	return cmd(args[1:])
}

// common holds the flags every command has.
type common struct {
	fs         *flag.FlagSet
	url        string
	stream     string
	ackWait    time.Duration
	maxDeliver int
	creds      string
	token      string // $LABORO_TOKEN
	level      zapcore.Level
	log        *zap.Logger
}

func newCommon(name, synopsis string) *common {
	c := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError), level: zap.InfoLevel, token: os.Getenv("LABORO_TOKEN")}
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: laboro %s %s\n", name, synopsis)
		c.fs.PrintDefaults()
	}
	if name != "run" { // run has a server of its own
		c.fs.StringVar(&c.url, "nats", os.Getenv("LABORO_NATS"), "NATS server URLs, comma-separated ($LABORO_NATS)")
		c.fs.StringVar(&c.creds, "creds", "", "NATS credentials file (user JWT and seed)")
	}
	c.fs.StringVar(&c.stream, "stream", jetstream.DefaultStream, "name of the streams to use")
	c.fs.Var(&c.level, "log", "log level: debug, info, warn, error")
	return c
}

// deliveryFlags adds the flags that the service and the workers must agree on.
func (c *common) deliveryFlags() {
	c.fs.DurationVar(&c.ackWait, "ack-wait", 0, "redeliver a job whose worker is silent this long (0: as set before, 30s at first)")
	c.fs.IntVar(&c.maxDeliver, "max-deliver", 0, "fail a job delivered this many times without a result (0: as set before, 5 at first)")
}

// parse parses args; it returns false and the exit status when the command
// should not go on.
func (c *common) parse(args []string) (int, bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return exitUsage, false
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace, cfg.DisableCaller = zap.NewAtomicLevelAt(c.level), true, true
	log, err := cfg.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro:", err)
		return exitFailed, false
	}
	c.log = log.Named("laboro")
	return 0, true
}

func (c *common) config() jetstream.Config {
	return jetstream.Config{Stream: c.stream, AckWait: c.ackWait, MaxDeliver: c.maxDeliver, Logger: c.log}
}

// connect connects to url (or defaultURL). A worker waits for a server
// that is not up yet; the other commands fail at once.
func (c *common) connect(url string, waitForServer bool) (*nats.Conn, error) {
	if url == "" {
		url = defaultURL
	}
	opts := []nats.Option{
		nats.Name("laboro"),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.log.Warn("disconnected from NATS", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			c.log.Info("reconnected to NATS", zap.String("url", nc.ConnectedUrl()))
		}),
	}
	if c.token != "" {
		opts = append(opts, nats.Token(c.token))
	}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if waitForServer {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s (is `laboro serve` running?): %w", url, err)
	}
	return nc, nil
}

// client connects to NATS and returns a Client whose results go to a
// directory of its own; release disconnects and removes the directory. On
// failure it says why on standard error and returns false.
func (c *common) client() (cl *jetstream.Client, release func(), ok bool) {
	nc, err := c.connect(c.url, false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "laboro %s: %v\n", c.fs.Name(), err)
		return nil, nil, false
	}
	dir, err := os.MkdirTemp("", "laboro-"+c.fs.Name()+"-")
	if err != nil {
		nc.Close()
		fmt.Fprintf(os.Stderr, "laboro %s: %v\n", c.fs.Name(), err)
		return nil, nil, false
	}
	cfg := c.config()
	cfg.Dir = dir
	return &jetstream.Client{Conn: nc, Config: cfg}, func() { nc.Close(); os.RemoveAll(dir) }, true
}

// interruptTwice returns a context that ends at the second SIGINT or
// SIGTERM; first is called at the first one.
func interruptTwice(first func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigs)
		select {
		case <-sigs:
			first()
		case <-ctx.Done():
			return
		}
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// interruptible returns a context that ends at SIGINT or SIGTERM.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func serve(args []string) int {
	c := newCommon("serve", "[flags]")
	c.deliveryFlags()
	data := c.fs.String("data", defaultDataDir(), "data directory of the embedded NATS server")
	listen := c.fs.String("listen", "127.0.0.1:4222", "address of the embedded NATS server")
	workers := c.fs.Int("workers", runtime.NumCPU(), "jobs this process runs at once itself (0: none)")
	concurrency := c.fs.Int("c", jetstream.DefaultServiceConcurrency, "jobs out at once (published, waiting for a result)")
	dir := c.fs.String("dir", "", "directory for the <pid>.output files of the jobs run here")
	replicas := c.fs.Int("replicas", 0, "stream replicas on a NATS cluster, 3 for production (0: keep the streams' count, 1 for new ones)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.fs.NArg() > 0 || *workers < 0 || *concurrency <= 0 || *replicas < 0 {
		c.fs.Usage()
		return exitUsage
	}
	defer c.log.Sync()
	// The first interrupt stops the service and lets the local jobs finish;
	// a second one kills them (they run again elsewhere).
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
		host, port, err := splitHostPort(*listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "laboro serve: -listen:", err)
			return exitUsage
		}
		if err := os.MkdirAll(*data, 0o700); err != nil {
			c.log.Error("data directory", zap.Error(err))
			return exitFailed
		}
		var opts []jetstream.EmbeddedOption
		if c.token != "" {
			opts = append(opts, jetstream.WithToken(c.token))
		} else if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			c.log.Warn("the embedded NATS server listens beyond this machine without LABORO_TOKEN: " +
				"anyone who reaches it can run commands on the workers")
		}
		srv, err := jetstream.StartEmbedded(*data, host, port, opts...)
		if err != nil {
			c.log.Error("embedded NATS server", zap.Error(err))
			return exitFailed
		}
		defer srv.Shutdown()
		url = srv.URL()
		c.log.Info("embedded NATS server", zap.String("url", url), zap.String("data", *data))
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

	errs := make(chan error, 2)
	go func() {
		errs <- (&jetstream.Service{Conn: nc, Config: cfg, Concurrency: *concurrency}).Run(serviceCtx)
	}()
	running := 1
	if *workers > 0 {
		running++
		local.Conn, local.Config, local.Concurrency, local.OutputDir = nc, cfg, *workers, *dir
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

func worker(args []string) int {
	c := newCommon("worker", "[flags]")
	c.deliveryFlags()
	n := c.fs.Int("c", runtime.NumCPU(), "jobs run at once")
	dir := c.fs.String("dir", "", "directory for the jobs' <pid>.output files")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.fs.NArg() > 0 || *n <= 0 {
		c.fs.Usage()
		return exitUsage
	}
	defer c.log.Sync()
	w := &jetstream.Worker{Config: c.config(), Concurrency: *n, OutputDir: *dir}
	ctx, stop := interruptTwice(func() {
		c.log.Info("finishing the running jobs; interrupt again to stop at once (they would run again elsewhere)")
		w.Drain()
	})
	defer stop()
	nc, err := c.connect(c.url, true)
	if err != nil {
		c.log.Error("connect", zap.Error(err))
		return exitFailed
	}
	defer nc.Close()
	w.Conn = nc
	c.log.Info("worker", zap.String("nats", or(c.url, defaultURL)), zap.Int("concurrency", *n))
	if err := w.Run(ctx); err != nil {
		c.log.Error("worker stopped", zap.Error(err))
		return exitFailed
	}
	if ctx.Err() != nil {
		c.log.Info("worker stopped; its unfinished jobs go to other workers")
	} else {
		c.log.Info("worker stopped after finishing its jobs")
	}
	return 0
}

// jobFlags are the flags that say which jobs to run.
type jobFlags struct {
	file    *string
	workDir *string
	timeout *time.Duration
}

func (c *common) jobFlags() jobFlags {
	return jobFlags{
		file:    c.fs.String("f", "", "file of jobs, one shell command line per line (- for standard input)"),
		workDir: c.fs.String("C", "", "directory the jobs run in, on the workers"),
		timeout: c.fs.Duration("timeout", 0, "kill each job after this long (0: no limit)"),
	}
}

// jobs returns the jobs that -f or the COMMAND words give, or false and
// the exit status.
func (c *common) jobs(f jobFlags) ([]laboro.Job, int, bool) {
	if (*f.file == "") == (c.fs.NArg() == 0) || *f.timeout < 0 {
		c.fs.Usage()
		return nil, exitUsage, false
	}
	lines := []string{strings.Join(c.fs.Args(), " ")}
	if *f.file != "" {
		var err error
		if lines, err = readJobs(*f.file); err != nil {
			fmt.Fprintf(os.Stderr, "laboro %s: %v\n", c.fs.Name(), err)
			return nil, exitFailed, false
		}
		if len(lines) == 0 {
			fmt.Fprintf(os.Stderr, "laboro %s: no jobs in %s\n", c.fs.Name(), *f.file)
			return nil, exitFailed, false
		}
	}
	jobs := make([]laboro.Job, len(lines))
	for i, l := range lines {
		jobs[i] = laboro.Job{Script: l, Dir: *f.workDir, Timeout: *f.timeout}
	}
	return jobs, 0, true
}

func submit(args []string) int {
	c := newCommon("submit", "[flags] (-f FILE | COMMAND…)")
	jf := c.jobFlags()
	batch := c.fs.String("batch", "", "batch name (default: a new one)")
	id := c.fs.String("id", "", "id of the job (COMMAND only; default: BATCH-N)")
	wait := c.fs.Bool("wait", false, "wait for the jobs; print a single job's output")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *id != "" && *jf.file != "" {
		c.fs.Usage()
		return exitUsage
	}
	jobs, code, ok := c.jobs(jf)
	if !ok {
		return code
	}
	defer c.log.Sync()
	jobs[0].ID = *id
	if *batch == "" {
		*batch = jetstream.NewBatch()
	}

	ctx, stop := interruptible()
	defer stop()
	cl, release, ok := c.client()
	if !ok {
		return exitFailed
	}
	defer release()
	ids, err := cl.Submit(ctx, *batch, jobs)
	if err != nil {
		return failed(ctx, "submit", err)
	}
	single := *jf.file == ""
	c.log.Debug("submitted", zap.String("batch", *batch), zap.Int("jobs", len(ids)))
	if !*wait {
		if single {
			fmt.Println(ids[0])
		} else {
			fmt.Println(*batch)
		}
		return 0
	}
	if single {
		res, err := cl.Result(ctx, ids[0])
		if err != nil {
			return failed(ctx, "submit", err)
		}
		return printResult(res, true)
	}
	return watch(ctx, cl, *batch, len(ids))
}

// runJobs runs jobs on this machine alone, through an embedded server of
// its own that lives as long as the command, and waits for them.
func runJobs(args []string) int {
	c := newCommon("run", "[flags] (-f FILE | COMMAND…)")
	c.level = zap.WarnLevel
	jf := c.jobFlags()
	workers := c.fs.Int("workers", runtime.NumCPU(), "jobs run at once")
	if code, ok := c.parse(args); !ok {
		return code
	}
	jobs, code, ok := c.jobs(jf)
	if !ok {
		return code
	}
	c.token = "" // its server is its own
	if *workers <= 0 {
		c.fs.Usage()
		return exitUsage
	}
	defer c.log.Sync()
	ctx, stop := interruptible()
	defer stop()
	dir, err := os.MkdirTemp("", "laboro-run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro run:", err)
		return exitFailed
	}
	defer os.RemoveAll(dir)
	srv, err := jetstream.StartEmbedded(filepath.Join(dir, "nats"), "127.0.0.1", -1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro run:", err)
		return exitFailed
	}
	defer srv.Shutdown()
	nc, err := c.connect(srv.URL(), false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro run:", err)
		return exitFailed
	}
	defer nc.Close()
	cfg := c.config()
	cfg.Dir = dir

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- (&jetstream.Service{Conn: nc, Config: cfg}).Run(runCtx) }()
	go func() {
		done <- (&jetstream.Worker{Conn: nc, Config: cfg, Concurrency: *workers, OutputDir: dir}).Run(runCtx)
	}()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "laboro run:", err)
			}
		}
	}()

	cl := &jetstream.Client{Conn: nc, Config: cfg}
	for { // until the service answers
		if _, err := cl.Status(ctx, jetstream.StatusRequest{}); !errors.Is(err, jetstream.ErrNoService) {
			break
		}
		select {
		case <-ctx.Done():
			return failed(ctx, "run", ctx.Err())
		case err := <-done: // the service or the worker could not start
			done <- err // the deferred wait reports it
			return exitFailed
		case <-time.After(10 * time.Millisecond):
		}
	}
	batch := jetstream.NewBatch()
	ids, err := cl.Submit(ctx, batch, jobs)
	if err != nil {
		return failed(ctx, "run", err)
	}
	if len(ids) == 1 && *jf.file == "" {
		res, err := cl.Result(ctx, ids[0])
		if err != nil {
			return failed(ctx, "run", err)
		}
		return printResult(res, true)
	}
	return watch(ctx, cl, batch, len(ids))
}

// readJobs reads job lines from name ("-": standard input).
func readJobs(name string) ([]string, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// watch follows batch until n of its jobs (all, for n ≤ 0) ended, with a
// progress bar on a terminal, then prints a summary and the jobs that did
// not succeed.
func watch(ctx context.Context, cl *jetstream.Client, batch string, n int) int {
	var bar *progressbar.ProgressBar
	progress := func(b jetstream.BatchStatus) {
		if !term.IsTerminal(int(os.Stderr.Fd())) {
			return
		}
		total := max(n, b.Jobs)
		if bar == nil && total > 0 {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
		}
		if bar != nil {
			bar.ChangeMax(total)
			bar.Describe(fmt.Sprintf("waiting %d, dispatched %d, failed %d", b.Waiting, b.Dispatched, b.Failed))
			bar.Set(b.Done())
		}
	}
	if _, err := cl.Status(ctx, jetstream.StatusRequest{Batches: []string{batch}}); errors.Is(err, jetstream.ErrNoService) {
		fmt.Fprintln(os.Stderr, "laboro: no service is running; the jobs wait for `laboro serve`")
	}
	b, err := cl.Wait(ctx, batch, n, 200*time.Millisecond, progress)
	if err != nil {
		return failed(ctx, "wait", err)
	}
	fmt.Printf("batch %s: %d jobs, %d succeeded, %d failed\n", b.Batch, b.Jobs, b.Succeeded, b.Failed)
	if b.Failed == 0 {
		return 0
	}
	reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: []string{batch}, Unsuccessful: true})
	if err != nil {
		return failed(ctx, "status", err)
	}
	printJobs(os.Stdout, reply.Jobs, reply.Truncated)
	return exitFailed
}

func status(args []string) int {
	c := newCommon("status", "[flags] [BATCH|ID…]")
	follow := c.fs.Bool("watch", false, "follow one batch until it is done, with progress on a terminal")
	unsuccessful := c.fs.Bool("failed", false, "list the jobs that did not succeed")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if *follow && c.fs.NArg() != 1 {
		c.fs.Usage() // -watch follows one batch
		return exitUsage
	}
	defer c.log.Sync()
	ctx, stop := interruptible()
	defer stop()
	cl, release, ok := c.client()
	if !ok {
		return exitFailed
	}
	defer release()
	if *follow {
		return watch(ctx, cl, c.fs.Arg(0), 0)
	}
	reply, err := cl.Status(ctx, jetstream.StatusRequest{Batches: c.fs.Args(), Unsuccessful: *unsuccessful})
	if err != nil {
		return failed(ctx, "status", err)
	}
	// The names that are no batch are job ids.
	var ids []string
	for _, a := range c.fs.Args() {
		if !hasBatch(reply.Batches, a) {
			ids = append(ids, a)
		}
	}
	if len(ids) > 0 {
		jobs, err := cl.Status(ctx, jetstream.StatusRequest{IDs: ids})
		if err != nil {
			return failed(ctx, "status", err)
		}
		reply.Jobs = append(jobs.Jobs, reply.Jobs...)
	}
	if len(reply.Batches) > 0 || c.fs.NArg() == 0 {
		w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(w, "BATCH\tJOBS\tWAITING\tDISPATCHED\tSUCCEEDED\tFAILED\tSUBMITTED")
		for _, b := range reply.Batches {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", b.Batch, b.Jobs, b.Waiting, b.Dispatched,
				b.Succeeded, b.Failed, b.Submitted.Local().Format(time.DateTime))
		}
		w.Flush()
		if c.fs.NArg() == 0 {
			fmt.Printf("in the stream: %d, on workers: %d\n", reply.InStream, reply.OnWorkers)
		}
	}
	printJobs(os.Stdout, reply.Jobs, reply.Truncated)
	for _, j := range reply.Jobs {
		if j.State == jetstream.StateUnknown {
			return exitFailed
		}
	}
	return 0
}

func hasBatch(bs []jetstream.BatchStatus, name string) bool {
	for _, b := range bs {
		if b.Batch == name {
			return true
		}
	}
	return false
}

// printJobs prints one line per job: id, state, exit status, error.
func printJobs(out io.Writer, jobs []jetstream.JobStatus, truncated bool) {
	if len(jobs) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "JOB\tSTATE\tEXIT\tERROR")
	for _, j := range jobs {
		exit := "-"
		if j.ExitCode >= 0 {
			exit = fmt.Sprint(j.ExitCode)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", j.ID, j.State, exit, j.Error)
	}
	w.Flush()
	if truncated {
		fmt.Fprintln(out, "(more jobs not listed)")
	}
}

func output(args []string) int {
	c := newCommon("output", "[flags] ID…")
	if code, ok := c.parse(args); !ok {
		return code
	}
	if c.fs.NArg() == 0 {
		c.fs.Usage()
		return exitUsage
	}
	defer c.log.Sync()
	ctx, stop := interruptible()
	defer stop()
	cl, release, ok := c.client()
	if !ok {
		return exitFailed
	}
	defer release()
	// Ids the service does not know would be waited for forever.
	if reply, err := cl.Status(ctx, jetstream.StatusRequest{IDs: c.fs.Args()}); err == nil {
		for _, j := range reply.Jobs {
			if j.State == jetstream.StateUnknown {
				fmt.Fprintf(os.Stderr, "laboro output: no job %s\n", j.ID)
				return exitFailed
			}
		}
	}
	code := 0
	for _, id := range c.fs.Args() {
		res, err := cl.Result(ctx, id)
		if err != nil {
			return failed(ctx, "output", err)
		}
		if printResult(res, c.fs.NArg() == 1) != 0 {
			code = exitFailed
		}
	}
	return code
}

// printResult writes res's output to standard output and, when it did not
// succeed, a line to standard error. It returns the exit status for it: the
// job's own with exitCode, else 0 or 1.
func printResult(res laboro.Result, exitCode bool) int {
	if res.Output != nil {
		_, err := res.Output.WriteTo(os.Stdout)
		res.Output.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "laboro:", err)
			return exitFailed
		}
	}
	if res.Status == laboro.StatusSucceeded {
		return 0
	}
	fmt.Fprintf(os.Stderr, "laboro: job %s %s: %v\n", res.ID, res.Status, res.Err)
	if exitCode && res.ExitCode > 0 {
		return res.ExitCode
	}
	return exitFailed
}

// failed reports err of the named step, and returns 130 when the user
// interrupted it.
func failed(ctx context.Context, step string, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "laboro: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(os.Stderr, "laboro %s: %v\n", step, err)
	return exitFailed
}

// defaultDataDir is $XDG_STATE_HOME/laboro, or ~/.local/state/laboro.
func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "laboro")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "laboro")
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
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	if port == 0 {
		port = -1 // the NATS server's "any free port"
	}
	return host, port, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
