// Package lograte bounds how often a server logs what a peer can cause at
// will — a connection refused for want of room, a wrong password, a
// malformed message — so that a flood of them does not flood its log
// (and its disk) too.
package lograte

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// PerSecond returns l logging each message (of each level) at most once a
// second; the others within the second are dropped.
func PerSecond(l *zap.Logger) *zap.Logger {
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 1, 0)
	}))
}

// Limited is PerSecond made once, for a server whose logger is set before
// first use: its zero value is ready, and it is safe for concurrent use.
type Limited struct {
	once sync.Once
	l    *zap.Logger
}

// Of returns PerSecond(l) for the first l it is given, and that logger
// ever after (its counts are shared by every caller).
func (r *Limited) Of(l *zap.Logger) *zap.Logger {
	r.once.Do(func() { r.l = PerSecond(l) })
	return r.l
}
