package cli

import (
	"container/list"
	"context"
	"testing"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Jobs that ended one after the other are reported in that order, whichever
// of their waits returns first; a job that ends while one submitted before
// it still runs is reported as it ends; none is reported twice.
func TestEndOrder(t *testing.T) {
	gates := map[string]chan struct{}{}
	ex, err := laboro.New(laboro.WithConcurrency(2), laboro.WithPoolSize(2))
	require.NoError(t, err)
	defer ex.Close()
	var o endOrder
	places := map[string]*list.Element{}
	handles := map[string]*laboro.Handle{}
	submit := func(id string) {
		gate := make(chan struct{})
		gates[id] = gate
		h, err := ex.Submit(context.Background(), laboro.Job{ID: id, Func: func(context.Context) error { <-gate; return nil }})
		require.NoError(t, err)
		handles[id], places[id] = h, o.add(h)
	}
	finish := func(id string) {
		close(gates[id])
		<-handles[id].Done()
	}
	var reported []string
	ended := func(id string) []string {
		reported = reported[:0]
		o.ended(places[id], func(h *laboro.Handle, res laboro.Result) {
			assert.Equal(t, laboro.StatusSucceeded, res.Status)
			reported = append(reported, h.ID())
		})
		return reported
	}

	// a, b, c end in turn; c's wait returns first.
	for _, id := range []string{"a", "b", "c"} {
		submit(id)
	}
	finish("a")
	finish("b")
	finish("c")
	assert.Equal(t, []string{"a", "b", "c"}, ended("c"))
	assert.Empty(t, ended("a"))
	assert.Empty(t, ended("b"))

	// d runs on while e ends: e is reported as its wait returns, d later.
	submit("d")
	submit("e")
	finish("e")
	assert.Equal(t, []string{"e"}, ended("e"))
	finish("d")
	assert.Equal(t, []string{"d"}, ended("d"))
	assert.Zero(t, o.waiting.Len(), "every job reported is let go")
}
