package command

import (
	"context"
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/cli"
)

// Exit statuses, those of every command of the project: 0 on success.
const (
	exitFailed      = cli.ExitFailed      // a job failed, or NATS or the service cannot be reached
	exitUsage       = cli.ExitUsage       // a usage error
	exitInterrupted = cli.ExitInterrupted // interrupted by the user (SIGINT, SIGTERM)
)

// failed reports err of the named step on standard error and returns
// exitFailed, or, when the user interrupted it (ctx ended), says so and
// returns exitInterrupted.
func failed(ctx context.Context, step string, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "laboro: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(os.Stderr, "laboro %s: %v\n", step, err)
	return exitFailed
}
