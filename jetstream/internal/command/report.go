package command

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/laboro-go/laboro/jetstream"
)

// printJobs prints one line per job (id, state, exit status, error) under
// a heading, and a note when truncated says that more were not listed. It
// prints nothing for no jobs.
func printJobs(out io.Writer, jobs []jetstream.JobStatus, truncated bool) {
	if len(jobs) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "JOB\tSTATE\tEXIT\tERROR")
	for _, j := range jobs {
		exit := "-"
		if j.ExitCode >= 0 {
			exit = fmt.Sprint(j.ExitCode)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", j.ID, j.State, exit, j.Error)
	}
	w.Flush()
	if truncated {
		fmt.Fprintln(out, "(more jobs not listed)")
	}
}

// printBatches prints one line per batch under a heading.
func printBatches(out io.Writer, batches []jetstream.BatchStatus) {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "BATCH\tJOBS\tWAITING\tDISPATCHED\tSUCCEEDED\tFAILED\tSUBMITTED")
	for _, b := range batches {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", b.Batch, b.Jobs, b.Waiting, b.Dispatched,
			b.Succeeded, b.Failed, b.Submitted.Local().Format(time.DateTime))
	}
	w.Flush()
}
