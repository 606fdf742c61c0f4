package command

import (
	"os"
	"time"

	"github.com/laboro-go/laboro/internal/cli"
)

// progress shows how far a batch is on standard error: cli.Progress, a bar
// on a terminal and nothing otherwise. Its zero value is ready.
type progress struct {
	p *cli.Progress
}

// summaryEvery is the period of the lines of counts when standard error is
// not a terminal.
const summaryEvery = 10 * time.Second

// show shows c.
func (p *progress) show(c cli.Counts) {
	if p.p == nil {
		p.p = cli.NewProgress(os.Stderr, summaryEvery)
	}
	p.p.Update(c)
}

// note writes a line of text.
func (p *progress) note(text string) {
	if p.p == nil {
		p.p = cli.NewProgress(os.Stderr, summaryEvery)
	}
	p.p.Note(text)
}

// close ends the display.
func (p *progress) close() {
	if p.p != nil {
		p.p.Close()
	}
}
