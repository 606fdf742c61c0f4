package transport

import (
	"context"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tickets abandoned while they wait leave nothing behind: the line drops
// their stale entries once few are live, and the map made for a big AddAll
// goes once empty, so a cancelled job of many tasks frees its memory.
func TestAbandonedTicketsLeaveNothing(t *testing.T) {
	d := NewDispatcher[int, string](Config{})
	const n = 10_000
	keys, values := make([]int, n), make([]string, n)
	for i := range keys {
		keys[i] = i
	}
	ts, err := d.AddAll(context.Background(), keys, values)
	require.NoError(t, err)
	d.AbandonAll(ts[:n-10], laboro.Result{Status: laboro.StatusKilled})
	assert.LessOrEqual(t, len(d.line.ring), 128, "10 live entries keep a small ring")
	var live []*Ticket[int, string]
	for i := range d.line.size {
		if e := d.line.at(i); e.live() {
			live = append(live, e.t)
		}
	}
	assert.Equal(t, ts[n-10:], live, "the live ones keep their order")

	d.AbandonAll(ts[n-10:], laboro.Result{Status: laboro.StatusKilled})
	assert.Equal(t, 0, d.line.size)
	for _, e := range d.line.ring {
		require.Nil(t, e.t, "an empty line holds no ticket")
	}
	assert.False(t, d.bigMap, "the map made for 10,000 tickets went once empty")
}
