package lograte_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/laboro-go/laboro/internal/lograte"
)

// A thousand refusals in a burst make one line a second at most; another
// message is still said, and so is the first message at another level.
func TestPerSecond(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var limited lograte.Limited
	var wg sync.WaitGroup
	start := time.Now()
	for range 10 {
		wg.Go(func() {
			for range 100 {
				limited.Of(zap.New(core)).Warn("connection refused: too many connections")
			}
		})
	}
	wg.Wait()
	seconds := int(time.Since(start)/time.Second) + 1 // each second begun may say it once
	l := limited.Of(zap.New(core))
	l.Warn("bad pulse")
	l.Error("connection refused: too many connections")
	refused := logs.FilterMessage("connection refused: too many connections").FilterLevelExact(zap.WarnLevel).Len()
	assert.GreaterOrEqual(t, refused, 1)
	assert.LessOrEqual(t, refused, seconds)
	assert.Equal(t, 1, logs.FilterMessage("bad pulse").Len())
	assert.Equal(t, 1, logs.FilterMessage("connection refused: too many connections").FilterLevelExact(zap.ErrorLevel).Len())
}
