package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func suite() (*Suite, *bytes.Buffer, *bytes.Buffer, *[]string) {
	var out, errOut bytes.Buffer
	var ran []string
	mk := func(name string) Subcommand {
		return Subcommand{Name: name, Synopsis: "[-x] ARG", Doc: name + " does it.", Setup: func(c *Command) func(context.Context, []string) error {
			x := c.Flags.Bool("x", false, "an x")
			return func(_ context.Context, args []string) error {
				if *x {
					args = append([]string{"-x"}, args...)
				}
				ran = append(ran, name+" "+joined(args))
				return nil
			}
		}}
	}
	s := &Suite{Name: "prog", Doc: "Prog does things.", Default: "serve", Commands: []Subcommand{mk("serve"), mk("submit")},
		Stdout: &out, Stderr: &errOut}
	return s, &out, &errOut, &ran
}

func joined(args []string) string {
	var b bytes.Buffer
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	return b.String()
}

func TestSuiteRunsTheNamedOrDefaultCommand(t *testing.T) {
	s, _, _, ran := suite()
	assert.Equal(t, ExitOK, s.Run([]string{"submit", "-x", "a"}))
	assert.Equal(t, ExitOK, s.Run([]string{"-x", "b"}))
	assert.Equal(t, ExitOK, s.Run(nil))
	assert.Equal(t, []string{"submit -x a", "serve -x b", "serve "}, *ran)
}

func TestSuiteHelpAndErrors(t *testing.T) {
	s, out, errOut, _ := suite()
	assert.Equal(t, ExitOK, s.Run([]string{"help"}))
	assert.Contains(t, out.String(), "Prog does things.")
	assert.Contains(t, out.String(), "  prog [serve] [-x] ARG\n  prog submit [-x] ARG\n")

	out.Reset()
	assert.Equal(t, ExitOK, s.Run([]string{"submit", "--help"}))
	assert.Contains(t, out.String(), "usage: prog submit [-x] ARG")
	assert.Contains(t, out.String(), "an x")
	byHelp := out.String()
	out.Reset()
	assert.Equal(t, ExitOK, s.Run([]string{"help", "submit"}), "help COMMAND")
	assert.Equal(t, byHelp, out.String())
	assert.Equal(t, ExitUsage, s.Run([]string{"help", "nosuch"}))
	assert.Contains(t, errOut.String(), `unknown command "nosuch"`)
	errOut.Reset()

	out.Reset()
	assert.Equal(t, ExitOK, s.Run([]string{"--help"}), "the default command's help lists the others")
	assert.Contains(t, out.String(), "usage: prog [-x] ARG")
	assert.Contains(t, out.String(), "\ncommands:\n  prog [serve] [-x] ARG\n  prog submit [-x] ARG\n", "one command a line")
	assert.Equal(t, 1, strings.Count(out.String(), "usage:"), "one usage line: the default command's")

	out.Reset()
	assert.Equal(t, ExitOK, s.Run([]string{"--version"}))
	assert.Regexp(t, `^prog .*go1`, out.String())

	assert.Equal(t, ExitUsage, s.Run([]string{"frob"}))
	assert.Contains(t, errOut.String(), `prog: unknown command "frob"`)
	errOut.Reset()
	assert.Equal(t, ExitUsage, s.Run([]string{"submit", "-y"}))
	assert.Contains(t, errOut.String(), "prog submit: flag provided but not defined: -y")
}
