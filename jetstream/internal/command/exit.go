package command

import (
	"context"

	"github.com/laboro-go/laboro/internal/cli"
	"go.uber.org/zap/zapcore"
)

// Exit statuses, those of every command of the project: 0 on success.
const (
	exitFailed      = cli.ExitFailed      // a job failed, or NATS or the service cannot be reached
	exitUsage       = cli.ExitUsage       // a usage error
	exitInterrupted = cli.ExitInterrupted // interrupted by the user (SIGINT, SIGTERM)
)

// failed reports err of the named step on standard error ("laboro STEP:
// error", or a record with a JSON log: see cli.Log.Tell) and returns
// exitFailed, or, when the user interrupted it (ctx ended), says so and
// returns exitInterrupted.
func (c *common) failed(ctx context.Context, step string, err error) int {
	if ctx.Err() != nil {
		c.logs.Tell(zapcore.ErrorLevel, "laboro", "interrupted")
		return exitInterrupted
	}
	c.logs.Tell(zapcore.ErrorLevel, "laboro "+step, err.Error())
	return exitFailed
}

// sayError says text, an error that keeps the command from its work, on
// standard error: "laboro NAME: text", or a record at error level with a
// JSON log (see cli.Log.Tell).
func (c *common) sayError(text string) {
	c.logs.Tell(zapcore.ErrorLevel, "laboro "+c.name, text)
}
