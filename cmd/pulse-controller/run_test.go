package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// With a JSON log, what the progress says becomes log records of the
// logger "progress": the counts as information, the want of a worker as a
// warning.
func TestProgressInAJSONLog(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	p := newProgress(zap.New(core), true, noWorker("/tmp/ctl"))
	require.False(t, p.Terminal())
	p.Note(noWorker("/tmp/ctl"))
	p.Note("0 of 2 done (running 1, queued 1, failed 0, workers 1)")
	all := logs.All()
	require.Len(t, all, 2)
	assert.Equal(t, zap.WarnLevel, all[0].Level)
	assert.Equal(t, noWorker("/tmp/ctl"), all[0].Message)
	assert.Equal(t, zap.InfoLevel, all[1].Level)
	assert.Equal(t, "0 of 2 done (running 1, queued 1, failed 0, workers 1)", all[1].Message)
	for _, e := range all {
		assert.Equal(t, "progress", e.LoggerName)
	}
}
