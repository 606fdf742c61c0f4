package command

import (
	"time"

	"github.com/laboro-go/laboro/internal/cli"
)

// progress shows how far a batch is on standard error, as -log-format
// says (cli.Log.Progress): a bar on a terminal and a line of counts every
// summaryEvery otherwise, or, with a JSON log, log records. It is made as
// it is first shown. Its zero value is not ready: set logs.
type progress struct {
	logs *cli.Log
	p    *cli.Progress
}

// summaryEvery is the period of the lines of counts when standard error is
// not a terminal (and of the records, with a JSON log).
const summaryEvery = 10 * time.Second

// show shows c.
func (p *progress) show(c cli.Counts) {
	if p.p == nil {
		p.p = p.logs.Progress(summaryEvery)
	}
	p.p.Update(c)
}

// note writes a line of text (a warning, with a JSON log).
func (p *progress) note(text string) {
	if p.p == nil {
		p.p = p.logs.Progress(summaryEvery)
	}
	p.p.Note(text)
}

// close ends the display.
func (p *progress) close() {
	if p.p != nil {
		p.p.Close()
	}
}
