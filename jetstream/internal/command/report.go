package command

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/jetstream"
)

// printJobs prints one line per job (id, state, exit status, command,
// error) under a heading, and a note when truncated says that more were
// not listed; then the tail of the standard error of each job that has
// one (those that did not succeed). It prints nothing for no jobs.
func printJobs(out io.Writer, jobs []jetstream.JobStatus, truncated bool) {
	if len(jobs) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "JOB\tSTATE\tEXIT\tCOMMAND\tERROR")
	for _, j := range jobs {
		exit := "-"
		if j.ExitCode >= 0 {
			exit = fmt.Sprint(j.ExitCode)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", j.ID, j.State, exit, oneLine(j.Command, 40), j.Error)
	}
	w.Flush()
	if truncated {
		fmt.Fprintln(out, "(more jobs not listed)")
	}
	for _, j := range jobs {
		if j.Stderr != "" {
			fmt.Fprintf(out, "\nstandard error of %s (its end):\n", j.ID)
			printIndented(out, j.Stderr)
		}
	}
}

// oneLine is s on one line, cut at n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// printIndented writes text with each line indented, ending in a newline.
func printIndented(out io.Writer, text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintln(out, "  "+line)
	}
}

// printBatches prints one line per batch under a heading: FAILED counts
// the jobs that failed, timed out or were killed, CANCELLED those
// cancelled.
func printBatches(out io.Writer, batches []jetstream.BatchStatus) {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "BATCH\tJOBS\tWAITING\tDISPATCHED\tSUCCEEDED\tFAILED\tCANCELLED\tSUBMITTED")
	for _, b := range batches {
		// Its submissions not read yet wait too.
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", b.Batch, b.Jobs+b.Unread, b.Waiting+b.Unread, b.Dispatched,
			b.Succeeded, b.Failures(), b.Cancelled, b.Submitted.Local().Format(time.DateTime))
	}
	w.Flush()
}

// batchSummary is how batch b stands, for its summary line: its jobs that
// did not succeed counted by how they ended.
func batchSummary(b jetstream.BatchStatus) cli.Summary {
	s := cli.Summary{Counts: cli.Counts{Total: b.Jobs + b.Unread, Succeeded: b.Succeeded}}
	s.CountFailed(laboro.StatusFailed.String(), b.Failures()-b.TimedOut-b.Killed)
	s.CountFailed(laboro.StatusTimedOut.String(), b.TimedOut)
	s.CountFailed(laboro.StatusKilled.String(), b.Killed)
	s.CountFailed(laboro.StatusCancelled.String(), b.Cancelled)
	return s
}

// shownFailures is how many failed jobs `laboro status` shows in full
// (command, exit status, standard error) without -failed.
const shownFailures = 5

// printFailures prints, under batches, the jobs that failed that the
// service listed (the first shownFailures of the batches', see
// jetstream.StatusRequest.Failures), each with its command, exit status
// and standard error, then how many more failed and how to list them all.
// It prints nothing when no job of batches failed. A service of an older
// version lists none: it says then how many failed, and how to list them.
// every says that batches are every batch, none named.
func printFailures(out io.Writer, batches []jetstream.BatchStatus, listed []jetstream.JobStatus, every bool) {
	total := 0
	var names []string
	for _, b := range batches {
		if n := b.Failures(); n > 0 {
			total += n
			names = append(names, b.Batch)
		}
	}
	if total == 0 {
		return
	}
	all := "laboro status -failed"
	if !every {
		all += " " + strings.Join(names, " ")
	}
	if len(listed) == 0 {
		fmt.Fprintf(out, "\n%s failed: %s shows why\n", plural(total, "job"), all)
		return
	}
	if more := total - len(listed); more > 0 {
		fmt.Fprintf(out, "\njobs that failed (the first %d of %d):\n", len(listed), total)
		defer fmt.Fprintf(out, "\n(%d more failed: %s lists every job that did not succeed)\n", more, all)
	} else {
		fmt.Fprintln(out, "\njobs that failed:")
	}
	printJobs(out, listed, false)
}
