// Package cli is what the project's commands share, so that each
// cmd/*/main.go only parses its flags and calls a package: how a command
// parses its command line and answers --help and --version, its logger,
// its signals, its exit statuses, and the report of a batch of jobs.
//
//	func main() {
//		c := cli.New("fuq-worker", "-connect HOST:PORT [-np N]", "Runs the tasks a fuq foreman pushes to it.")
//		addr := c.Flags.String("connect", "", "the foreman's HOST:PORT")
//		log := c.LogFlag(zap.InfoLevel)
//		c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
//			if *addr == "" {
//				return cli.Usagef("-connect is required")
//			}
//			return run(ctx, *addr, log.Logger())
//		})
//	}
package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/laboro-go/laboro/internal/secret"
)

// Every command keeps the project's secrets from the jobs it starts: the
// secret package takes them out of the environment as the program starts,
// and Protect keeps the process's first environment, where they stay,
// from the jobs' eyes.
func init() { secret.Protect() }

// Exit statuses of every command.
const (
	ExitOK          = 0   // done as asked
	ExitFailed      = 1   // a job failed, or an error kept the command from its work
	ExitUsage       = 2   // a mistake in the command line
	ExitInterrupted = 130 // stopped by an interrupt before it was done
)

// UsageError is a mistake in the command line; Main prints it with the
// synopsis and exits with ExitUsage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// MaxAtOnce bounds a count of jobs run at once that a binary is given
// (a pool's size): each place is a goroutine and its state, made as the
// binary starts whether or not jobs come, so a count mistyped by a few
// digits would take the machine's memory before the first job.
const MaxAtOnce = 10000

// Usagef returns a *UsageError that says what is wrong, for example
// Usagef("port %d: must be 1–65535", port).
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitError makes Main exit with Code, printing Err unless it is nil: for
// a command whose status is a job's own (an exit status passed on).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns an *ExitError of code without a message.
func Exit(code int) error { return &ExitError{Code: code} }

// ErrInterrupted is what a command returns when an interrupt stopped it
// before it was done; Main exits with ExitInterrupted. A context ended by
// Main's signals returns context.Canceled, which Main takes the same way.
var ErrInterrupted = errors.New("interrupted")

// Command is one command-line program: its name, synopsis and flags.
type Command struct {
	Name     string // as typed, for example "fuq-foreman submit"
	Synopsis string // the arguments, for example "[-wait] -name NAME -tasks N"
	Doc      string // what it does, a sentence or two, for --help
	// Epilog, if set, is written after Doc by --help as it is, unwrapped
	// (a list of commands, one a line).
	Epilog string
	// Flags is the command's flag set; add its flags before Main. -version
	// (and --version) is defined already.
	Flags *flag.FlagSet

	// Stdout and Stderr default to the process's.
	Stdout, Stderr io.Writer

	version *bool
	bounds  []bound // checked by Parse
	logs    *Log    // set by LogFlag: Report writes in its format
}

// bound is a flag whose value Parse checks: more than 0, or 0 or more.
type bound struct {
	name     string
	positive bool
}

// New returns a Command with an empty flag set.
func New(name, synopsis, doc string) *Command {
	c := &Command{Name: name, Synopsis: synopsis, Doc: doc, Stdout: os.Stdout, Stderr: os.Stderr,
		Flags: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.Flags.SetOutput(io.Discard) // Parse reports errors its own way
	c.version = c.Flags.Bool("version", false, "print the version and exit")
	return c
}

// Positive makes Parse refuse a value of 0 or less for the named flags (of
// type time.Duration, int or int64) with a usage error naming the flag:
// for a value whose 0 would otherwise stand for a default the user did not
// ask for. Each must be defined already.
func (c *Command) Positive(names ...string) { c.bound(true, names) }

// NotNegative makes Parse refuse a value below 0 for the named flags, as
// Positive does.
func (c *Command) NotNegative(names ...string) { c.bound(false, names) }

func (c *Command) bound(positive bool, names []string) {
	for _, name := range names {
		if c.Flags.Lookup(name) == nil {
			panic("cli: no flag -" + name)
		}
		c.bounds = append(c.bounds, bound{name, positive})
	}
}

// checkBounds returns a usage error for the first flag out of its bound.
func (c *Command) checkBounds() error {
	for _, b := range c.bounds {
		f := c.Flags.Lookup(b.name)
		var sign int
		switch v := f.Value.(flag.Getter).Get().(type) {
		case time.Duration:
			sign = cmp.Compare(v, 0)
		case int:
			sign = cmp.Compare(v, 0)
		case int64:
			sign = cmp.Compare(v, 0)
		default:
			panic(fmt.Sprintf("cli: -%s is a %T, not a number", b.name, v))
		}
		switch {
		case b.positive && sign <= 0:
			return Usagef("-%s %s: must be more than 0", b.name, f.Value)
		case sign < 0:
			return Usagef("-%s %s: must be 0 or more", b.name, f.Value)
		}
	}
	return nil
}

// Usage returns the synopsis line, "usage: NAME SYNOPSIS".
func (c *Command) Usage() string {
	return strings.TrimSpace("usage: " + c.Name + " " + c.Synopsis)
}

// Help writes what --help shows: the synopsis, the doc, and every flag
// with its sentence and default.
func (c *Command) Help(w io.Writer) {
	fmt.Fprintln(w, c.Usage())
	if c.Doc != "" {
		fmt.Fprintf(w, "\n%s\n", wrap(c.Doc, 76))
	}
	if c.Epilog != "" {
		fmt.Fprintf(w, "\n%s", c.Epilog)
	}
	n := 0
	c.Flags.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, c.Flags)
	}
}

// printFlags writes the flags as flag.PrintDefaults does, but each set of
// aliases (flags of the same sentence and default, such as -g and -group)
// once, under all its names.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	type entry struct {
		names       []string
		kind, usage string
		def         string
		zeroDefault bool
	}
	var entries []*entry
	byKey := map[string]*entry{}
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		key := kind + "\x00" + usage + "\x00" + f.DefValue
		if e := byKey[key]; e != nil {
			e.names = append(e.names, "-"+f.Name)
			return
		}
		e := &entry{names: []string{"-" + f.Name}, kind: kind, usage: usage, def: f.DefValue,
			zeroDefault: f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "0s"}
		byKey[key] = e
		entries = append(entries, e)
	})
	for _, e := range entries {
		line := "  " + strings.Join(e.names, ", ")
		if e.kind != "" {
			line += " " + e.kind
		}
		line += "\n    \t" + strings.ReplaceAll(e.usage, "\n", "\n    \t")
		if !e.zeroDefault {
			if e.kind == "string" {
				line += fmt.Sprintf(" (default %q)", e.def)
			} else {
				line += fmt.Sprintf(" (default %v)", e.def)
			}
		}
		fmt.Fprintln(w, line)
	}
}

// wrap folds the paragraphs of s (separated by blank lines) at width.
func wrap(s string, width int) string {
	var out []string
	for _, para := range strings.Split(strings.TrimSpace(s), "\n\n") {
		var lines []string
		line := ""
		for _, word := range strings.Fields(para) {
			if line != "" && len(line)+1+len(word) > width {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += word
		}
		out = append(out, strings.Join(append(lines, line), "\n"))
	}
	return strings.Join(out, "\n\n")
}

// errHelp and errVersion end Parse for a request that is already answered.
var (
	errHelp    = errors.New("help shown")
	errVersion = errors.New("version shown")
)

// Parse parses args. -h, -help and --help print Help on Stdout, and
// -version prints Version: both end the command with ExitOK (Main does).
// A flag that is not defined or has a bad value is a *UsageError naming it.
func (c *Command) Parse(args []string) error {
	err := c.Flags.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.Help(c.Stdout)
		return errHelp
	case err != nil:
		return &UsageError{Msg: flagError(c.Flags, err)}
	case *c.version:
		fmt.Fprintln(c.Stdout, c.Name, Version())
		return errVersion
	}
	return c.checkBounds()
}

// badValue is the flag package's message for a value it cannot parse.
var badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -(\S+): (.*)$`)

// flagError says what is wrong with a flag in words a user can act on:
// `-p "abc": not a valid int` rather than the flag package's "parse error".
func flagError(fs *flag.FlagSet, err error) string {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	why := m[3]
	if f := fs.Lookup(m[2]); f != nil && strings.HasSuffix(why, "parse error") {
		kind, _ := flag.UnquoteUsage(f)
		switch kind {
		case "int", "uint":
			why = "not a whole number"
		case "duration":
			why = "not a duration (like 300ms, 5s, 2m)"
		case "float":
			why = "not a number"
		default:
			why = "not a valid " + kind
		}
	}
	return fmt.Sprintf("-%s %q: %s", m[2], m[1], why)
}

// CheckAddr is a usage error unless addr, the value of flag name, is
// HOST:PORT with a port from 0 to 65535 (HOST may be empty: every
// interface).
func CheckAddr(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return Usagef("-%s %q: must be HOST:PORT", name, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return Usagef("-%s %q: port %q must be a number from 0 to 65535", name, addr, port)
	}
	return nil
}

// Main parses args and runs main with a context that ends on the first
// SIGINT or SIGTERM, and with the arguments left after the flags; then it
// exits with the status main's error gives (see Code), printing the error,
// if any, as Report does. It does not return.
func (c *Command) Main(args []string, main func(ctx context.Context, args []string) error) {
	os.Exit(c.Run(args, main))
}

// Run is Main without the exit: it returns the exit status.
func (c *Command) Run(args []string, main func(ctx context.Context, args []string) error) int {
	err := c.Parse(args)
	if err == nil {
		ctx, stop := Interruptible(context.Background())
		err = main(ctx, c.Flags.Args())
		stop()
	}
	return c.Report(err)
}

// Report prints err for the user on Stderr and returns its exit status
// (Code): as "NAME: error" (and the synopsis after a usage error), or,
// when the command's -log-format (LogFlag) is json, as one record at error
// level of the logger NAME whose message is the error's text (with the
// synopsis as the field "usage" after a usage error), so that standard
// error stays one object a line.
func (c *Command) Report(err error) int {
	code := Code(err)
	var ue *UsageError
	var ee *ExitError
	json := c.logs != nil && c.logs.format == "json"
	switch {
	case errors.Is(err, errHelp), errors.Is(err, errVersion), err == nil:
	case errors.As(err, &ue) && json:
		record(c.Stderr, zapcore.ErrorLevel, c.Name, ue.Msg, zap.String("usage", c.Usage()))
	case errors.As(err, &ue):
		fmt.Fprintf(c.Stderr, "%s: %s\n%s\nRun '%s --help' for every flag.\n", c.Name, ue.Msg, c.Usage(), c.Name)
	case errors.As(err, &ee) && ee.Err == nil:
	case code == ExitInterrupted && json:
		record(c.Stderr, zapcore.ErrorLevel, c.Name, "interrupted")
	case code == ExitInterrupted:
		fmt.Fprintf(c.Stderr, "%s: interrupted\n", c.Name)
	case json:
		record(c.Stderr, zapcore.ErrorLevel, c.Name, err.Error())
	default:
		fmt.Fprintf(c.Stderr, "%s: %s\n", c.Name, err)
	}
	return code
}

// Code returns the exit status of a command that ended with err: ExitOK
// for nil (or a request for help or the version), ExitUsage for a
// *UsageError, an *ExitError's Code, ExitInterrupted for ErrInterrupted or
// context.Canceled, else ExitFailed.
func Code(err error) int {
	var ue *UsageError
	var ee *ExitError
	switch {
	case err == nil, errors.Is(err, errHelp), errors.Is(err, errVersion):
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, ErrInterrupted), errors.Is(err, context.Canceled):
		return ExitInterrupted
	}
	return ExitFailed
}

// Version returns the module version the binary was built from, with the
// commit when the build recorded one ("(devel)" for a plain go build in a
// checkout).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	return v + " " + bi.GoVersion
}

// Log is a command's -log and -log-format flags and the logger they make.
type Log struct {
	level  zapcore.Level
	format LogFormat
}

// LogFlag defines -log LEVEL (debug, info, warn, error), def by default,
// and -log-format (console or json).
func (c *Command) LogFlag(def zapcore.Level) *Log {
	l := &Log{level: def, format: "console"}
	c.logs = l
	c.Flags.Var(&l.level, "log", "log `level`: debug, info, warn or error")
	c.Flags.Var(&l.format, "log-format", "log `format`: console (lines for people) or json (one object per line)")
	return l
}

// Logger returns the logger of every command: on standard error (standard
// output is for what the user asked for), at the level chosen, in the
// format chosen, without stack traces or the places in the source.
func (l *Log) Logger() *zap.Logger { return Logger(l.level, l.format) }

// Format returns the format chosen, console or json.
func (l *Log) Format() LogFormat { return l.format }

// Records returns a logger for what a command shows on standard error
// whatever -log says: beside its log, its progress and a summary when the
// log is JSON (so that standard error stays one object a line), and the
// few records a user cannot do without, such as the address a server
// listens on when the system chose its port. In the format chosen, at
// info.
func (l *Log) Records() *zap.Logger { return Logger(zapcore.InfoLevel, l.format) }

// Tell writes on standard error what a command tells its user beside its
// log, whatever -log says: with console, the line "name: text" (text
// alone when name is ""), fields left out; with json, one record at level
// of the logger name, whose message is text, with fields. For the lines
// that must stay lines for people under console (errors, notes), and be
// records a log collector takes under json.
func (l *Log) Tell(level zapcore.Level, name, text string, fields ...zap.Field) {
	switch {
	case l.format == "json":
		record(os.Stderr, level, name, text, fields...)
	case name == "":
		fmt.Fprintln(os.Stderr, text)
	default:
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, text)
	}
}

// record writes to w one JSON record at level, of the logger name, as
// Logger's records are written.
func record(w io.Writer, level zapcore.Level, name, msg string, fields ...zap.Field) {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(jsonEncoderConfig()), zapcore.Lock(zapcore.AddSync(w)), level)
	log := zap.New(core)
	if name != "" {
		log = log.Named(name)
	}
	if ce := log.Check(level, msg); ce != nil {
		ce.Write(fields...)
	}
}

// jsonEncoderConfig is how the records of a JSON log are written.
func jsonEncoderConfig() zapcore.EncoderConfig {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	return cfg
}

// Progress returns the progress of a batch, on standard error, in the
// format chosen: with console, NewProgress(os.Stderr, every), a bar on a
// terminal and a line of counts every every otherwise; with json, never a
// bar nor a line but log records of the logger "progress" (see
// NewLogProgress and Records), every every and once as it closes.
func (l *Log) Progress(every time.Duration) *Progress {
	if l.format == "json" {
		return NewLogProgress(l.Records().Named("progress"), every)
	}
	return NewProgress(os.Stderr, every)
}

// NewLog returns the Log of a command whose -log and -log-format were
// parsed some other way (level and format; "" is console).
func NewLog(level zapcore.Level, format LogFormat) *Log {
	return &Log{level: level, format: cmp.Or(format, "console")}
}

// LogFormat is the format of the log lines: "console" or "json".
type LogFormat string

// Set accepts console or json.
func (f *LogFormat) Set(s string) error {
	if s != "console" && s != "json" {
		return errors.New("must be console or json") // the flag and value are said before
	}
	*f = LogFormat(s)
	return nil
}

func (f *LogFormat) String() string { return string(*f) }

// Logger returns a logger to standard error at level, in format ("" is
// console).
func Logger(level zapcore.Level, format LogFormat) *zap.Logger {
	cfg := zap.NewDevelopmentConfig()
	if format == "json" {
		cfg = zap.NewProductionConfig()
		cfg.Sampling = nil // every failed job is logged
		cfg.EncoderConfig = jsonEncoderConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.DisableStacktrace, cfg.DisableCaller = true, true
	cfg.OutputPaths, cfg.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	log, err := cfg.Build()
	if err != nil { // only a bad configuration fails, and this one is fixed
		panic(err)
	}
	return log
}

// Interruptible returns a context that ends at the first SIGINT or
// SIGTERM; stop releases the signals.
func Interruptible(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// Interrupts returns two contexts for a command that stops in two steps:
// drain ends at the first SIGINT or SIGTERM (stop taking work, let the
// running jobs finish), kill at the second (stop them now). first and
// second, when not nil, are called at the first and the second signal,
// before the context ends: what they say is told before whatever the end
// brings about (a process that exits at once). They must not block. stop
// releases the signals and ends both; it may be called more than once.
func Interrupts(parent context.Context, first, second func()) (drain, kill context.Context, stop func()) {
	drain, endDrain := context.WithCancelCause(parent)
	kill, endKill := context.WithCancelCause(parent)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for n := 0; n < 2; n++ {
			select {
			case sig := <-signals:
				if n == 0 {
					if first != nil {
						first()
					}
					endDrain(fmt.Errorf("%w: %v", ErrInterrupted, sig))
				} else {
					if second != nil {
						second()
					}
					endKill(fmt.Errorf("%w again: %v", ErrInterrupted, sig))
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return drain, kill, func() {
		once.Do(func() {
			signal.Stop(signals)
			close(done)
			<-exited
			endDrain(nil)
			endKill(nil)
		})
	}
}
