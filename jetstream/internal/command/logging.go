package command

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns the logger of a command: human-readable lines on
// standard error, from level up, without stack traces or callers, named
// "laboro".
func newLogger(level zapcore.Level) (*zap.Logger, error) {
	cfg := zap.NewDevelopmentConfig()
	cfg.Level, cfg.DisableStacktrace, cfg.DisableCaller = zap.NewAtomicLevelAt(level), true, true
	log, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	return log.Named("laboro"), nil
}
