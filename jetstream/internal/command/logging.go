package command

import (
	"github.com/laboro-go/laboro/internal/cli"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns the logger of a command, the one of every command of
// the project (cli.Logger), named "laboro".
func newLogger(level zapcore.Level, format cli.LogFormat) (*zap.Logger, error) {
	return cli.Logger(level, format).Named("laboro"), nil
}
