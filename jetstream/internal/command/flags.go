package command

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// common holds the flags every command has, and what they set up.
type common struct {
	name       string       // the subcommand's name: run, serve, …
	cmd        *cli.Command // its help, its parsing, its usage errors
	fs         *flag.FlagSet
	url        string
	stream     string
	ackWait    time.Duration
	maxDeliver int
	creds      string
	ca         string      // -ca: the CA of the server's certificate
	inProcess  nats.Option // serve's connection to its embedded server
	token      string      // the server's token; see connect
	tokenSet   bool        // token is decided (serve's own server)
	tokenErr   error       // why no token was found
	tokenFrom  string      // where token came from, for messages
	// found is the token that a worker's connection, made before there
	// was one, found; proved is closed once that connection is up (see
	// connect and jobKey).
	found  atomic.Pointer[string]
	proved chan struct{}
	// tokenProven is set when connect connected proving laboro's token:
	// the server is serve's, whose service can prove itself in turn.
	tokenProven bool
	logs        *cli.Log // -log and -log-format
	log         *zap.Logger
}

// newCommon returns the flags of subcommand name, whose arguments are
// synopsis and whose help says doc: those it uses of -nats, -creds,
// -stream, -log and -log-format, and -version. Its help, its usage errors
// and its flag errors read as those of the project's other commands.
func newCommon(name, synopsis, doc string) *common {
	cmd := cli.New("laboro "+name, synopsis, doc)
	c := &common{name: name, cmd: cmd, fs: cmd.Flags, stream: jetstream.DefaultStream}
	nats := natsEnv() // scrubbed for every command: each may start jobs
	switch name {
	case "run", "token": // neither needs a server
	case "serve": // its own, embedded, unless told: $LABORO_NATS is for the clients
		c.fs.Var((*natsURL)(&c.url), "nats", "NATS server `URLs`, comma-separated (default: an embedded server)")
		c.fs.StringVar(&c.creds, "creds", "", "NATS credentials file (user JWT and seed)")
	default:
		c.url = nats
		c.fs.Var((*natsURL)(&c.url), "nats", "NATS server `URLs`, comma-separated ($LABORO_NATS)")
		c.fs.StringVar(&c.creds, "creds", "", "NATS credentials file (user JWT and seed)")
	}
	if name != "run" && name != "token" {
		c.fs.StringVar(&c.ca, "ca", "", "the CA of the NATS server's certificate, PEM, for a server that speaks TLS (default: the system's roots)")
	}
	if name != "run" { // run's jobs go through no stream
		c.fs.StringVar(&c.stream, "stream", jetstream.DefaultStream, "name of the streams to use")
	}
	switch name {
	case "token": // it prints its token, and logs nothing
		c.logs = cli.NewLog(zap.InfoLevel, "console")
	case "run":
		// Its summary tells what went wrong; the log, what else is
		// wrong.
		c.logs = cmd.LogFlag(zap.WarnLevel)
	default:
		c.logs = cmd.LogFlag(zap.InfoLevel)
	}
	return c
}

// natsURL is -nats: shown, as its default in the help, without the
// credentials its URLs may carry ($LABORO_NATS's are not for the screen).
type natsURL string

func (u *natsURL) String() string { return shown(string(*u)) }

// Set takes v as it is; parse warns if it carries credentials.
func (u *natsURL) Set(v string) error {
	*u = natsURL(v)
	return nil
}

// natsEnv returns $LABORO_NATS, and leaves it in the environment without
// the credentials its URLs may carry: the jobs this process starts (and
// the commands they run) inherit the address, never a secret.
func natsEnv() string {
	v := os.Getenv("LABORO_NATS")
	if s := shown(v); s != v {
		os.Setenv("LABORO_NATS", s)
	}
	return v
}

// deliveryFlags adds the flags that the service and the workers must agree on.
func (c *common) deliveryFlags() {
	c.fs.DurationVar(&c.ackWait, "ack-wait", 0, "redeliver a job whose worker is silent this long (0: as set before, 30s at first)")
	c.fs.IntVar(&c.maxDeliver, "max-deliver", 0, "fail a job delivered this many times without a result (0: as set before, 5 at first)")
}

// parse parses args and sets up the logger; it returns false and the exit
// status when the command should not go on: -h and -version answered
// (0), or a usage error said.
func (c *common) parse(args []string) (int, bool) {
	err := c.cmd.Parse(args)
	c.fs.Visit(func(f *flag.Flag) {
		// Said, not refused: it works, but ps shows it to every user.
		// Said once the flags are parsed, in the -log-format they chose.
		if f.Name == "nats" && shown(c.url) != c.url {
			c.logs.Tell(zapcore.WarnLevel, "laboro",
				"-nats carries credentials, which any user sees in ps: set $LABORO_NATS, or give -creds")
		}
	})
	if err != nil {
		return c.cmd.Report(err), false
	}
	switch { // 0 if deliveryFlags did not add them
	case c.ackWait < 0:
		return c.usageError("-ack-wait %v: must not be negative", c.ackWait), false
	case c.maxDeliver < 0:
		return c.usageError("-max-deliver %d: must not be negative", c.maxDeliver), false
	}
	c.log = c.logs.Logger().Named("laboro")
	return 0, true
}

// usageError says what is wrong (format and args) on standard error, with
// the command's synopsis and where to find its flags (not the flags
// themselves: the message would be lost above them), and returns
// exitUsage.
func (c *common) usageError(format string, args ...any) int {
	return c.cmd.Report(cli.Usagef(format, args...))
}

func (c *common) config() jetstream.Config {
	return jetstream.Config{Stream: c.stream, AckWait: c.ackWait, MaxDeliver: c.maxDeliver, Logger: c.log}
}

// jobFlags are the flags that say which jobs to run.
type jobFlags struct {
	file    *string
	workDir *string
	timeout *time.Duration
	local   bool // the jobs run here (run), not on the workers (submit)
}

func (c *common) jobFlags() jobFlags {
	f := jobFlags{local: c.name == "run"}
	f.file = c.fs.String("f", "", "file of jobs, one shell command line per line (- for standard input)")
	if f.local {
		f.workDir = c.fs.String("C", "", "directory the jobs run in (default: the current one)")
	} else {
		f.workDir = c.fs.String("C", "", "directory the jobs run in, on the workers")
	}
	f.timeout = c.fs.Duration("timeout", 0, "kill each job after this long (0: no limit)")
	return f
}

// checkJobs checks the flags that say which jobs to run; false and the
// exit status on a usage error.
func (c *common) checkJobs(f jobFlags) (int, bool) {
	switch {
	case *f.file == "" && c.fs.NArg() == 0:
		return c.usageError("give a COMMAND, or -f FILE of commands"), false
	case *f.file != "" && c.fs.NArg() > 0:
		return c.usageError("give -f FILE or a COMMAND, not both (%q)", c.fs.Arg(0)), false
	case *f.timeout < 0:
		return c.usageError("-timeout %v: must not be negative", *f.timeout), false
	}
	if f.local && *f.workDir != "" {
		// Checked here, once: else every job would fail to start, each
		// with an error that names the shell rather than the directory.
		// (The workers' directories are theirs to check.)
		if st, err := os.Stat(*f.workDir); err != nil {
			return c.usageError("-C %q: %v", *f.workDir, pathError(err)), false
		} else if !st.IsDir() {
			return c.usageError("-C %q: not a directory", *f.workDir), false
		}
	}
	return 0, true
}

// pathError is err of a file operation without the operation and the path
// (which the message names already): "no such file or directory".
func pathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkName returns a usage error's message if value, the value of flag
// -name (a job id or a batch name), is one the jetstream package would
// refuse, else "": said before connecting, and naming the flag.
func checkName(name, value string) string {
	err := jetstream.ValidID(value)
	if err == nil {
		return ""
	}
	why := err.Error()
	// "jetstream: job id "x" must be …": the flag's name and value say
	// the rest.
	if rest, ok := strings.CutPrefix(why, fmt.Sprintf("jetstream: job id %q ", value)); ok {
		why = rest
	}
	return fmt.Sprintf("-%s %q: %s", name, value, why)
}

// job returns the job of a command line, as the flags say.
func (f jobFlags) job(line string) laboro.Job {
	return laboro.Job{Script: line, Dir: *f.workDir, Timeout: *f.timeout}
}

// maxJobLine is the longest line of a file of jobs.
const maxJobLine = 1 << 20

// jobFile is a file of jobs (-f), one command line per line, read as its
// jobs are submitted.
type jobFile struct {
	name  string
	r     io.ReadCloser
	total int // its jobs, if it is a regular file (counted at open); else -1
}

// openJobFile opens the file of jobs name ("-": standard input).
func openJobFile(name string) (*jobFile, error) {
	if name == "-" {
		return &jobFile{name: name, r: io.NopCloser(os.Stdin), total: -1}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	jf := &jobFile{name: name, r: f, total: -1}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return jf, nil // a pipe: its jobs are counted as they come
	}
	n := 0
	for _, err := range jf.lines() {
		if err != nil {
			f.Close()
			return nil, err
		}
		n++
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	jf.total = n
	return jf, nil
}

// lines yields the job lines that follow: every line that is not blank or
// a comment (#), trimmed; then the read's error, if any, which names the
// line.
func (jf *jobFile) lines() iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		sc := bufio.NewScanner(jf.r)
		sc.Buffer(make([]byte, 64<<10), maxJobLine)
		n := 0
		for sc.Scan() {
			n++
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
				if !yield(l, nil) {
					return
				}
			}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				err = fmt.Errorf("line %d is longer than %d bytes", n+1, maxJobLine)
			}
			yield("", fmt.Errorf("%s: %w", jf.name, err))
		}
	}
}

// jobs yields the jobs of the lines that follow, as flags make them,
// then the read's error, if any.
func (jf *jobFile) jobs(flags jobFlags) iter.Seq2[laboro.Job, error] {
	return func(yield func(laboro.Job, error) bool) {
		for line, err := range jf.lines() {
			if err != nil {
				yield(laboro.Job{}, err)
				return
			}
			if !yield(flags.job(line), nil) {
				return
			}
		}
	}
}

// Close closes the file.
func (jf *jobFile) Close() error { return jf.r.Close() }
