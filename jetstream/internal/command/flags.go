package command

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// common holds the flags every command has, and what they set up.
type common struct {
	fs         *flag.FlagSet
	url        string
	stream     string
	ackWait    time.Duration
	maxDeliver int
	creds      string
	token      string // the server's token; see connect
	tokenSet   bool   // token is decided (serve's own server)
	tokenErr   error  // why no token was found
	level      zapcore.Level
	format     cli.LogFormat
	version    bool
	log        *zap.Logger
}

func newCommon(name, synopsis string) *common {
	c := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError), level: zap.InfoLevel, format: "console"}
	// Parse's messages are parse's to print: help on standard output,
	// errors on standard error.
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: laboro %s %s\n", name, synopsis)
		c.fs.PrintDefaults()
	}
	if name != "run" && name != "token" { // neither needs a server
		c.fs.StringVar(&c.url, "nats", os.Getenv("LABORO_NATS"), "NATS server URLs, comma-separated ($LABORO_NATS)")
		c.fs.StringVar(&c.creds, "creds", "", "NATS credentials file (user JWT and seed)")
	}
	c.fs.StringVar(&c.stream, "stream", jetstream.DefaultStream, "name of the streams to use")
	c.fs.Var(&c.level, "log", "log `level`: debug, info, warn or error")
	c.fs.Var(&c.format, "log-format", "log `format`: console (lines for people) or json (one object per line)")
	c.fs.BoolVar(&c.version, "version", false, "print the version and exit")
	return c
}

// deliveryFlags adds the flags that the service and the workers must agree on.
func (c *common) deliveryFlags() {
	c.fs.DurationVar(&c.ackWait, "ack-wait", 0, "redeliver a job whose worker is silent this long (0: as set before, 30s at first)")
	c.fs.IntVar(&c.maxDeliver, "max-deliver", 0, "fail a job delivered this many times without a result (0: as set before, 5 at first)")
}

// parse parses args and sets up the logger; it returns false and the exit
// status when the command should not go on.
func (c *common) parse(args []string) (int, bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.fs.SetOutput(os.Stdout)
			c.fs.Usage()
			return 0, false
		}
		fmt.Fprintf(os.Stderr, "laboro %s: %v\n", c.fs.Name(), err)
		c.fs.SetOutput(os.Stderr)
		c.fs.Usage()
		return exitUsage, false
	}
	if c.version {
		fmt.Println("laboro", cli.Version())
		return 0, false
	}
	log, err := newLogger(c.level, c.format)
	if err != nil {
		fmt.Fprintln(os.Stderr, "laboro:", err)
		return exitFailed, false
	}
	c.log = log
	return 0, true
}

// usageError says what is wrong (format and args), prints the command's
// usage on standard error, and returns exitUsage.
func (c *common) usageError(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "laboro %s: %s\n", c.fs.Name(), fmt.Sprintf(format, args...))
	c.fs.SetOutput(os.Stderr)
	c.fs.Usage()
	return exitUsage
}

func (c *common) config() jetstream.Config {
	return jetstream.Config{Stream: c.stream, AckWait: c.ackWait, MaxDeliver: c.maxDeliver, Logger: c.log}
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
	switch {
	case *f.file == "" && c.fs.NArg() == 0:
		return nil, c.usageError("give a COMMAND, or -f FILE of commands"), false
	case *f.file != "" && c.fs.NArg() > 0:
		return nil, c.usageError("give -f FILE or a COMMAND, not both (%q)", c.fs.Arg(0)), false
	case *f.timeout < 0:
		return nil, c.usageError("-timeout %v: must not be negative", *f.timeout), false
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

// readJobs reads job lines from name ("-": standard input): every line
// that is not blank or a comment (#), trimmed.
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
