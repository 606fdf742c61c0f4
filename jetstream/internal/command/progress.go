package command

import (
	"os"

	"github.com/laboro-go/laboro/internal/cli"
)

// progress shows how far a batch is on standard error: cli.Progress, a bar
// on a terminal and nothing otherwise. Its zero value is ready.
type progress struct {
	p *cli.Progress
}

// show shows c.
func (p *progress) show(c cli.Counts) {
	if p.p == nil {
		p.p = cli.NewProgress(os.Stderr, 0)
	}
	p.p.Update(c)
}

// close ends the display.
func (p *progress) close() {
	if p.p != nil {
		p.p.Close()
	}
}
