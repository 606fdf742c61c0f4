package cli

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSpareProcessor(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // as if unset: the runtime read it at start
	procs := runtime.GOMAXPROCS(0)

	undo := SpareProcessor(procs - 1)
	assert.Equal(t, procs, runtime.GOMAXPROCS(0), "fewer jobs than processors: one is spare already")
	undo()

	undo = SpareProcessor(procs)
	assert.Equal(t, procs+1, runtime.GOMAXPROCS(0), "as many jobs as processors: one more")
	undo()
	assert.Equal(t, procs, runtime.GOMAXPROCS(0), "undone")

	t.Setenv("GOMAXPROCS", "1")
	undo = SpareProcessor(10 * procs)
	assert.Equal(t, procs, runtime.GOMAXPROCS(0), "GOMAXPROCS set: the user's choice")
	undo()
}
