package cli

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/laboro-go/laboro/internal/e2e"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a terminal, what is written Above the bar starts a line of its own,
// and so does what follows the bar once the batch is done: neither lands
// on the bar's line.
func TestProgressBarKeepsItsLine(t *testing.T) {
	master, tty := e2e.OpenPTY(t)
	defer master.Close()
	shown := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // until the terminal is closed
		shown <- b
	}()

	p := NewProgress(tty, 0)
	require.True(t, p.Terminal())
	p.Update(Counts{Total: 2, Running: 2})
	p.Above(func() { fmt.Fprint(tty, "first job's output\n") })
	p.Update(Counts{Total: 2, Succeeded: 1, Running: 1})
	p.Update(Counts{Total: 2, Succeeded: 2})
	p.Update(Counts{Total: 2, Succeeded: 2}) // the last counts, again
	p.Close()
	fmt.Fprint(tty, "2 jobs: 2 succeeded\n")
	tty.Close()
	out := <-shown

	for _, text := range []string{"first job's output", "2 jobs: 2 succeeded"} {
		i := bytes.Index(out, []byte(text))
		require.Positive(t, i, "%q not shown:\n%q", text, out)
		assert.Contains(t, "\r\n", string(out[i-1]), "%q does not start a line:\n%q", text, out)
		// Nothing of the bar is left on the line before it either: the
		// line was cleared (blanks, then a carriage return) or ended.
		line := out[bytes.LastIndexAny(out[:i-1], "\r\n")+1 : i-1]
		assert.Empty(t, bytes.TrimSpace(line), "the bar is left on %q's line:\n%q", text, out)
	}
}
