package cli

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A Progress for a JSON log makes records where the plain one writes
// lines: the counts every period, as information, with the line's words
// as the message and the counts as fields; the last counts once more as
// it closes; a note as a warning.
func TestLogProgressRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.InfoLevel)
		p := NewLogProgress(zap.New(core).Named("progress"), 10*time.Second)
		require.False(t, p.Terminal())
		p.Update(Counts{Total: 4, Running: 2, Queued: 2})
		assert.Zero(t, logs.Len(), "no record before the period")
		time.Sleep(10 * time.Second)
		p.Update(Counts{Total: 4, Running: 2, Succeeded: 1, Failed: 1, Workers: 3})
		p.Note("no worker has registered")
		p.Update(Counts{Total: 4, Succeeded: 2, Failed: 2, Cancelled: 1})
		p.Close()
		p.Close()

		all := logs.All()
		require.Len(t, all, 3, "%v", all)
		for _, e := range all {
			assert.Equal(t, "progress", e.LoggerName)
		}
		assert.Equal(t, zap.InfoLevel, all[0].Level)
		assert.Equal(t, "2 of 4 done (running 2, queued 0, failed 1, workers 3), about 10s left", all[0].Message)
		assert.Equal(t, map[string]any{"done": int64(2), "total": int64(4), "running": int64(2), "queued": int64(0),
			"failed": int64(1), "cancelled": int64(0), "workers": int64(3), "eta_seconds": int64(10)}, all[0].ContextMap())
		assert.Equal(t, zap.WarnLevel, all[1].Level)
		assert.Equal(t, "no worker has registered", all[1].Message)
		assert.Equal(t, zap.InfoLevel, all[2].Level, "the last counts, as it closes")
		assert.Equal(t, "4 of 4 done (running 0, queued 0, failed 1, cancelled 1)", all[2].Message)
		assert.Equal(t, map[string]any{"done": int64(4), "total": int64(4), "running": int64(0), "queued": int64(0),
			"failed": int64(1), "cancelled": int64(1)}, all[2].ContextMap())
	})
}

// Counts already recorded are not recorded again as the Progress closes,
// and a Progress that was never given counts records none.
func TestLogProgressClosesQuietly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.InfoLevel)
		p := NewLogProgress(zap.New(core), time.Second)
		time.Sleep(time.Second)
		p.Update(Counts{Total: 1, Succeeded: 1})
		p.Close()
		assert.Equal(t, 1, logs.Len())

		NewLogProgress(zap.New(core), time.Second).Close()
		assert.Equal(t, 1, logs.Len())
	})
}

// Cancelled jobs are counted apart from those that failed, on the lines
// of counts as in the summary.
func TestProgressCountsCancelledApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		p := NewProgress(&out, time.Second)
		time.Sleep(time.Second)
		p.Update(Counts{Total: 5, Succeeded: 1, Failed: 3, Cancelled: 2})
		assert.Equal(t, "4 of 5 done (running 0, queued 0, failed 1, cancelled 2), about 0s left\n", out.String())
	})
}
