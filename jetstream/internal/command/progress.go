package command

import (
	"fmt"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows how far a batch is, as a bar on standard error when it
// is a terminal, and not at all otherwise. Its zero value is ready.
type progress struct {
	bar *progressbar.ProgressBar
}

// show sets the bar to done jobs of total, with note beside it.
func (p *progress) show(done, total int, note string) {
	if total <= 0 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
	}
	p.bar.ChangeMax(total)
	p.bar.Describe(note)
	p.bar.Set(done)
}
