package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/laboro-go/laboro"
)

// The rate comes from the jobs that ended over the last minute: at first
// from the times the recent jobs ended, then from the counts the console
// samples as it is looked at, which forget what is older than a minute.
func TestRate(t *testing.T) {
	c := New(Options{})
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ended := func(ago ...time.Duration) []laboro.Finished {
		var fs []laboro.Finished
		for _, d := range ago {
			fs = append(fs, laboro.Finished{Result: laboro.Result{Ended: t0.Add(-d)}})
		}
		return fs
	}

	assert.Zero(t, c.rate(t0, 0, nil), "nothing ended: unknown")
	// Four jobs ended over the last 2 s (one beyond the minute, not
	// counted): 4 / 2 s.
	c = New(Options{})
	assert.InDelta(t, 2.0, c.rate(t0, 5, ended(0, time.Second, 2*time.Second, 2*time.Second, 2*time.Minute)), 1e-9)
	// Half a second later, the samples span too little: still the recent jobs.
	assert.InDelta(t, 4/2.5, c.rate(t0.Add(500*time.Millisecond), 5, ended(0, time.Second, 2*time.Second, 2*time.Second)), 1e-9)
	// 10 s after the first sample, 300 more jobs ended: 30 a second,
	// whatever the recent list says.
	assert.InDelta(t, 30.0, c.rate(t0.Add(10*time.Second), 305, ended(0)), 1e-9)
	assert.InDelta(t, 25.0, c.rate(t0.Add(20*time.Second), 505, nil), 1e-9)
	// Past the minute, the first samples are forgotten: from t0+10s (305)
	// to t0+70s (905), 10 a second.
	assert.InDelta(t, 10.0, c.rate(t0.Add(70*time.Second), 905, nil), 1e-9)
	// An idle minute later, nothing ended since the last sample kept.
	assert.Zero(t, c.rate(t0.Add(131*time.Second), 905, nil))
}
