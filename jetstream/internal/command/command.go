// Package command is the laboro command (jetstream/cmd/laboro): one file
// per subcommand (run, serve, worker, submit, status, output, cancel,
// token), and
// apart from them what they share: their flags and their logger
// (flags.go), the connection to NATS (nats.go), the batch driver that
// follows jobs to their end (batch.go, progress.go), and the set-up of
// signals (signals.go) and exit statuses (exit.go).
//
//	func main() { os.Exit(command.Main(os.Args[1:])) }
package command

import (
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/cli"
)

// commands are the subcommands, by name: each parses its arguments (the
// ones after its name) and returns the exit status.
var commands = map[string]func(args []string) int{
	"serve":  serve,
	"worker": worker,
	"submit": submit,
	"status": status,
	"run":    runJobs,
	"output": output,
	"cancel": cancel,
	"token":  token,
}

const usage = `usage:
  laboro serve  [-nats URL,…] [-data DIR] [-listen HOST:PORT] [-tls-cert FILE -tls-key FILE] [-workers N] [-c N]
  laboro worker [-nats URL,…] [-ca FILE] [-c N] [-dir DIR]
  laboro submit [-nats URL,…] [-batch NAME] [-wait] (-f FILE | COMMAND…)
  laboro status [-nats URL,…] [-watch] [-failed] [BATCH|ID…]
  laboro output [-nats URL,…] ID…
  laboro cancel [-nats URL,…] ID…
  laboro run    [-workers N] [-results DIR] [-joblog FILE [-resume|-resume-failed]] [-retries N] [-halt now|soon,fail=N] (-f FILE | COMMAND…)
  laboro token  [-stream NAME] (worker | client)
Run 'laboro COMMAND -h' for a command's flags, 'laboro --version' for the version.`

// Main runs the laboro command with args, the arguments after the
// program's name, and returns its exit status.
func Main(args []string) int {
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
		if args[0] == "-version" || args[0] == "--version" || args[0] == "version" {
			fmt.Println("laboro", cli.Version())
			return 0
		}
		fmt.Fprintf(os.Stderr, "laboro: unknown command %q\n%s\n", args[0], usage)
		return exitUsage
	}
	return cmd(args[1:])
}
