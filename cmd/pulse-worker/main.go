// Command pulse-worker registers with a pulse controller and solves the
// tasks it is given with a command: each task's bytes on the command's
// standard input, its standard output the result.
//
//	pulse-worker [-dir DIR] [-later] [-pulse D] -- COMMAND [ARGS…]
//
// For example: pulse-worker -dir /tmp/ctl -- md5sum. It pulses the
// controller on DIR/main.sock and listens on DIR/<worker id>.sock. A
// RESTART from the controller kills the running task, and the worker
// registers again. Exit status: 0 after an interrupt, 1 on an error, 2 for
// a usage error.
package main

import (
	"context"
	"errors"
	"os"
	"os/exec"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/protocols/pulse"
	"go.uber.org/zap"
)

func main() {
	c := cli.New("pulse-worker", "[-dir DIR] [-later] [-pulse D] -- COMMAND [ARGS…]",
		"Registers with a pulse controller and solves the tasks it is given with COMMAND: each task's bytes on its "+
			"standard input, its standard output the result (for example: pulse-worker -dir /tmp/ctl -- md5sum). A "+
			"RESTART from the controller kills the running task, and the worker registers again. Exit status: 0 after "+
			"an interrupt, 1 on an error, 2 for a usage error.")
	w := &pulse.Worker{}
	c.Flags.StringVar(&w.Dir, "dir", pulse.DefaultDir, "the controller's directory")
	later := c.Flags.Bool("later", false, "speak the reference's later enum numbering (INVALID = 0)")
	c.Flags.DurationVar(&w.NextPulse, "pulse", pulse.DefaultNextPulse, "next_pulse announced; pulses come every 1/2 to 3/4 of it")
	c.Positive("pulse")
	logFlag := c.LogFlag(zap.InfoLevel)
	c.Main(os.Args[1:], func(ctx context.Context, args []string) error {
		if len(args) == 0 {
			return cli.Usagef("COMMAND is required")
		}
		// A worker that cannot run its command would take every task
		// and fail it, spending the attempts other workers could use.
		if _, err := exec.LookPath(args[0]); err != nil {
			return cli.Usagef("COMMAND %q: %v", args[0], errors.Unwrap(err))
		}
		if *later {
			w.Codec.Numbering = pulse.LaterNumbering
		}
		w.Command, w.Logger = args, logFlag.Logger()
		if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		w.Logger.Info("stopped by a signal")
		return nil
	})
}
