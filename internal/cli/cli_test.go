package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// command returns a Command writing to buffers, with one flag.
func command() (*Command, *bytes.Buffer, *bytes.Buffer, *int) {
	c := New("tool", "[-n N] FILE", "Tool does a thing to FILE.")
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	n := c.Flags.Int("n", 3, "how many times")
	return c, &out, &errOut, n
}

func TestHelpGoesToStdoutAndExitsZero(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		c, out, errOut, _ := command()
		c.LogFlag(zap.InfoLevel)
		ran := false
		code := c.Run([]string{arg}, func(context.Context, []string) error { ran = true; return nil })
		assert.Equal(t, ExitOK, code, arg)
		assert.False(t, ran, "%s runs nothing", arg)
		assert.Empty(t, errOut.String())
		for _, want := range []string{"usage: tool [-n N] FILE", "Tool does a thing", "-n int", "how many times (default 3)", "-log", "-version"} {
			assert.Contains(t, out.String(), want, arg)
		}
	}
}

// Aliases (-g and -group: one variable, one sentence) are listed once,
// under both names; -log-format is there for every command with logs.
func TestHelpListsAliasesOnce(t *testing.T) {
	c, out, _, _ := command()
	var group string
	for _, name := range []string{"g", "group"} {
		c.Flags.StringVar(&group, name, "main", "group to join")
	}
	c.LogFlag(zap.InfoLevel)
	require.Equal(t, ExitOK, c.Run([]string{"--help"}, func(context.Context, []string) error { return nil }))
	assert.Equal(t, 1, strings.Count(out.String(), "group to join"), out.String())
	assert.Contains(t, out.String(), "  -g, -group string\n    \tgroup to join (default \"main\")\n")
	assert.Contains(t, out.String(), "-log-format format")
}

// A bad flag value, or an address with a bad port, is a usage error that
// names the flag, the value and what it must be.
func TestBadValuesNamed(t *testing.T) {
	c, _, errOut, _ := command()
	c.Flags.Duration("pulse", 0, "how often")
	c.LogFlag(zap.InfoLevel)
	for args, want := range map[string]string{
		"-n abc":          `tool: -n "abc": not a whole number` + "\n",
		"-pulse xyz":      `tool: -pulse "xyz": not a duration (like 300ms, 5s, 2m)` + "\n",
		"-log-format xml": `tool: -log-format "xml": must be console or json` + "\n", // the value said once
	} {
		errOut.Reset()
		code := c.Run(strings.Fields(args), func(context.Context, []string) error { return nil })
		assert.Equal(t, ExitUsage, code, args)
		assert.Contains(t, errOut.String(), want, args)
	}
	require.NoError(t, CheckAddr("listen", "127.0.0.1:0"))
	require.NoError(t, CheckAddr("listen", ":7720"))
	for addr, want := range map[string]string{
		":99999":    `-listen ":99999": port "99999" must be a number from 0 to 65535`,
		"host:abc":  `-listen "host:abc": port "abc" must be a number from 0 to 65535`,
		"localhost": `-listen "localhost": must be HOST:PORT`,
	} {
		err := CheckAddr("listen", addr)
		var ue *UsageError
		require.ErrorAs(t, err, &ue, addr)
		assert.Equal(t, want, ue.Msg)
	}
}

// Positive and NotNegative bounds are checked as the flags are parsed,
// each refusal naming the flag and its value; values inside pass.
func TestBoundedFlags(t *testing.T) {
	for args, want := range map[string]string{
		"-pulse 0s":      "tool: -pulse 0s: must be more than 0\n",
		"-pulse -2s":     "tool: -pulse -2s: must be more than 0\n",
		"-n 0":           "tool: -n 0: must be more than 0\n",
		"-grace -1ms":    "tool: -grace -1ms: must be 0 or more\n",
		"-size -1":       "tool: -size -1: must be 0 or more\n",
		"-pulse 1ms":     "",
		"-grace 0s -n 1": "",
		"-size 0":        "",
	} {
		c, _, errOut, _ := command()
		c.Flags.Duration("pulse", time.Minute, "how often")
		c.Flags.Duration("grace", time.Second, "how long")
		c.Flags.Int64("size", 1, "how big")
		c.Positive("pulse", "n")
		c.NotNegative("grace", "size")
		ran := false
		code := c.Run(strings.Fields(args), func(context.Context, []string) error { ran = true; return nil })
		if want == "" {
			assert.Equal(t, ExitOK, code, args)
			assert.True(t, ran, args)
			continue
		}
		assert.Equal(t, ExitUsage, code, args)
		assert.False(t, ran, args)
		assert.True(t, strings.HasPrefix(errOut.String(), want), "%s: %s", args, errOut)
	}
}

func TestVersion(t *testing.T) {
	c, out, _, _ := command()
	assert.Equal(t, ExitOK, c.Run([]string{"--version"}, nil))
	assert.Regexp(t, `^tool .*go1\.`, out.String())
}

func TestUsageErrorsNameWhatIsWrong(t *testing.T) {
	c, out, errOut, _ := command()
	code := c.Run([]string{"-nope"}, nil)
	assert.Equal(t, ExitUsage, code)
	assert.Empty(t, out.String())
	assert.Equal(t, "tool: flag provided but not defined: -nope\nusage: tool [-n N] FILE\nRun 'tool --help' for every flag.\n", errOut.String())

	c, _, errOut, _ = command()
	assert.Equal(t, ExitUsage, c.Run([]string{"-n", "abc"}, nil))
	assert.Contains(t, errOut.String(), `-n "abc": not a whole number`)

	c, _, errOut, n := command()
	code = c.Run([]string{"-n", "0", "f"}, func(_ context.Context, args []string) error {
		assert.Equal(t, []string{"f"}, args)
		if *n < 1 {
			return Usagef("-n %d: must be at least 1", *n)
		}
		return nil
	})
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errOut.String(), "tool: -n 0: must be at least 1\n")
}

func TestExitStatuses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		says string
	}{
		{nil, ExitOK, ""},
		{errors.New("disk full"), ExitFailed, "tool: disk full\n"},
		{&ExitError{Code: 7}, 7, ""},
		{&ExitError{Code: 3, Err: errors.New("banned")}, 3, "tool: banned\n"},
		{fmt.Errorf("waiting: %w", context.Canceled), ExitInterrupted, "tool: interrupted\n"},
		{ErrInterrupted, ExitInterrupted, "tool: interrupted\n"},
	} {
		c, _, errOut, _ := command()
		assert.Equal(t, tc.code, c.Run(nil, func(context.Context, []string) error { return tc.err }), "%v", tc.err)
		assert.Equal(t, tc.says, errOut.String(), "%v", tc.err)
	}
}

// With -log-format json, a command's error at exit is one JSON record at
// error level of the logger NAME, its text the message (the synopsis a
// field, after a usage error): standard error stays one object a line.
func TestJSONLogReportsAsARecord(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		err   error
		code  int
		msg   string
		usage string
	}{
		{nil, errors.New("disk full"), ExitFailed, "disk full", ""},
		{nil, &ExitError{Code: 3, Err: errors.New("banned")}, 3, "banned", ""},
		{nil, ErrInterrupted, ExitInterrupted, "interrupted", ""},
		{nil, Usagef("-n 0: must be at least 1"), ExitUsage, "-n 0: must be at least 1", "usage: tool [-n N] FILE"},
		{[]string{"-nope"}, nil, ExitUsage, "flag provided but not defined: -nope", "usage: tool [-n N] FILE"},
		{nil, &ExitError{Code: 7}, 7, "", ""},
	} {
		c, _, errOut, _ := command()
		c.LogFlag(zap.InfoLevel)
		args := append([]string{"-log-format", "json"}, tc.args...)
		assert.Equal(t, tc.code, c.Run(args, func(context.Context, []string) error { return tc.err }), "%v", tc.err)
		if tc.msg == "" {
			assert.Empty(t, errOut.String(), "%v", tc.err)
			continue
		}
		require.Equal(t, 1, strings.Count(errOut.String(), "\n"), "one line: %q", errOut.String())
		var r map[string]any
		require.NoError(t, json.Unmarshal(errOut.Bytes(), &r), errOut.String())
		assert.Equal(t, "error", r["level"], "%v", r)
		assert.Equal(t, "tool", r["logger"], "%v", r)
		assert.Equal(t, tc.msg, r["msg"], "%v", r)
		if tc.usage != "" {
			assert.Equal(t, tc.usage, r["usage"], "%v", r)
		}
	}
}

// The first signal ends drain, the second kill; each after its function
// has returned, so that what it says comes before whatever the end brings
// about.
func TestInterruptsDrainThenKill(t *testing.T) {
	inFirst, inSecond, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	drain, kill, stop := Interrupts(context.Background(),
		func() { close(inFirst); <-release },
		func() { close(inSecond) })
	defer stop()
	defer stop() // twice is fine
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	<-inFirst
	assert.NoError(t, drain.Err(), "drain ends once first has returned")
	close(release)
	<-drain.Done()
	assert.ErrorIs(t, context.Cause(drain), ErrInterrupted)
	assert.NoError(t, kill.Err(), "one signal only drains")
	select {
	case <-inSecond:
		t.Fatal("second called at the first signal")
	default:
	}
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
	<-inSecond
	<-kill.Done()
	assert.ErrorIs(t, context.Cause(kill), ErrInterrupted)
}

// stop ends both contexts, calling neither function.
func TestInterruptsStop(t *testing.T) {
	called := func() { t.Error("called without a signal") }
	drain, kill, stop := Interrupts(context.Background(), called, called)
	stop()
	<-drain.Done()
	<-kill.Done()
	assert.NotErrorIs(t, context.Cause(drain), ErrInterrupted)
}

func TestMainContextEndsOnASignal(t *testing.T) {
	c, _, errOut, _ := command()
	code := c.Run(nil, func(ctx context.Context, _ []string) error {
		require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGINT))
		<-ctx.Done()
		return ctx.Err()
	})
	assert.Equal(t, ExitInterrupted, code)
	assert.Equal(t, "tool: interrupted\n", errOut.String())
}

// Every binary of the project keeps the secrets of its environment from
// its jobs: each command parses its flags through this package, or is
// laboro's, and both call secret.Protect as the program starts.
func TestEveryCommandProtectsItsSecrets(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`,
		"github.com/laboro-go/laboro/cmd/...", "github.com/laboro-go/laboro/jetstream/cmd/...").Output()
	require.NoError(t, err)
	commands := strings.Fields(string(out))
	require.GreaterOrEqual(t, len(commands), 11, "the project's binaries")
	for _, cmd := range commands {
		out, err := exec.Command("go", "list", "-deps", cmd).Output()
		require.NoError(t, err)
		deps := strings.Fields(string(out))
		assert.Contains(t, deps, "github.com/laboro-go/laboro/internal/secret",
			"%s leaves the secrets of its environment to its jobs", cmd)
		assert.True(t, slices.Contains(deps, "github.com/laboro-go/laboro/internal/cli") ||
			slices.Contains(deps, "github.com/laboro-go/laboro/jetstream/internal/command"),
			"%s starts without secret.Protect", cmd)
	}
}
