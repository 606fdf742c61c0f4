package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
)

// Subcommand is one command of a Suite.
type Subcommand struct {
	Name     string // as typed after the program's name
	Synopsis string // its arguments
	Doc      string // what it does
	// Setup defines the command's flags on c and returns the function that
	// runs it, as Command.Main takes.
	Setup func(c *Command) func(ctx context.Context, args []string) error
}

// Suite is a program of several commands, run as PROGRAM COMMAND [flags]
// [args], each a Command of its own.
type Suite struct {
	Name     string // the program's name
	Doc      string // what the program does, for --help
	Default  string // the command run when the first argument is a flag or none is given; "" for none
	Commands []Subcommand

	// Stdout and Stderr default to the process's.
	Stdout, Stderr io.Writer
}

// Main runs the command args name and exits with its status.
func (s *Suite) Main(args []string) { os.Exit(s.Run(args)) }

// Run runs the command args name and returns its exit status. -h, -help,
// --help and help list the commands on Stdout; --version prints the
// version; an unknown command is a usage error.
func (s *Suite) Run(args []string) int {
	stdout, stderr := s.Stdout, s.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	name := s.Default
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if len(args) > 0 && name == s.Default {
		switch args[0] {
		case "-version", "--version":
			fmt.Fprintln(stdout, s.Name, Version())
			return ExitOK
		case "-h", "-help", "--help":
			if s.Default == "" {
				s.help(stdout)
				return ExitOK
			}
		}
	}
	if name == "help" {
		if len(args) == 0 {
			s.help(stdout)
			return ExitOK
		}
		// help COMMAND: that command's help, as COMMAND -h gives it.
		name, args = args[0], []string{"-h"}
	}
	for _, sub := range s.Commands {
		if sub.Name == name {
			c := New(s.Name+" "+sub.Name, sub.Synopsis, sub.Doc)
			c.Stdout, c.Stderr = stdout, stderr
			if name == s.Default {
				c.Name = s.Name // PROGRAM [flags] is the default command
				c.Epilog = s.commandList()
			}
			run := sub.Setup(c)
			return c.Run(args, run)
		}
	}
	if name == "" {
		fmt.Fprintf(stderr, "%s: a command is required\n%s", s.Name, s.commandList())
	} else {
		fmt.Fprintf(stderr, "%s: unknown command %q\n%s", s.Name, name, s.commandList())
	}
	return ExitUsage
}

// help writes the program's doc and its commands.
func (s *Suite) help(w io.Writer) {
	if s.Doc != "" {
		fmt.Fprintf(w, "%s\n\n", wrap(s.Doc, 76))
	}
	fmt.Fprint(w, s.commandList())
}

// commandList is "commands:" and a line per command. (Not "usage:": the
// default command's help, which begins with its own usage line, ends with
// it.)
func (s *Suite) commandList() string {
	var b strings.Builder
	b.WriteString("commands:\n")
	for _, sub := range s.Commands {
		name := sub.Name
		if name == s.Default {
			name = "[" + name + "]"
		}
		fmt.Fprintf(&b, "  %s %s %s\n", s.Name, name, sub.Synopsis)
	}
	fmt.Fprintf(&b, "Run '%s COMMAND --help' for a command's flags.\n", s.Name)
	return b.String()
}
