package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/laboro-go/laboro/protocols/fuq"
)

// client returns the command that talks to the running foreman.
func client(cmd string, fs *flag.FlagSet, control *string) func() error {
	var s fuq.Submission
	var wait, tasks bool
	switch cmd {
	case "status":
		fs.BoolVar(&tasks, "tasks", false, "list every task")
	case "submit":
		fs.BoolVar(&wait, "wait", false, "wait for the job to end")
		fs.StringVar(&s.Name, "name", "", "job name (names the log files)")
		fs.StringVar(&s.Command, "command", "", "program run as: COMMAND <task number>")
		fs.IntVar(&s.Tasks, "tasks", 0, "number of tasks")
		fs.StringVar(&s.WorkingDir, "wd", ".", "working directory of the tasks")
		fs.StringVar(&s.LoggingDir, "logdir", ".", "directory of the tasks' logs")
	}
	return func() error {
		c := fuq.ControlClient{Socket: *control}
		ctx := context.Background()
		switch cmd {
		case "submit":
			if s.Name == "" || s.Command == "" || s.Tasks < 1 || fs.NArg() > 0 {
				return errUsage
			}
			// Paths are the submitter's: relative ones are made absolute
			// (a bare command name is looked up in the worker's PATH).
			paths := []*string{&s.WorkingDir, &s.LoggingDir}
			if strings.Contains(s.Command, "/") {
				paths = append(paths, &s.Command)
			}
			for _, p := range paths {
				abs, err := filepath.Abs(*p)
				if err != nil {
					return err
				}
				*p = abs
			}
			var out struct{ ID string }
			if err := c.Do(ctx, "POST", "/jobs", s, &out); err != nil {
				return err
			}
			fmt.Println(out.ID)
			if !wait {
				return nil
			}
			var st fuq.JobReport
			if err := c.Do(ctx, "GET", "/jobs/"+url.PathEscape(out.ID)+"?wait=1", nil, &st); err != nil {
				return err
			}
			printStatus(st, false)
			if st.State != "succeeded" {
				os.Exit(1)
			}
		case "status":
			var list []fuq.JobReport
			switch fs.NArg() {
			case 0:
				if err := c.Do(ctx, "GET", "/jobs", nil, &list); err != nil {
					return err
				}
			case 1:
				var st fuq.JobReport
				if err := c.Do(ctx, "GET", "/jobs/"+url.PathEscape(fs.Arg(0)), nil, &st); err != nil {
					return err
				}
				list = append(list, st)
			default:
				return errUsage
			}
			for _, st := range list {
				printStatus(st, tasks)
			}
		case "cancel":
			if fs.NArg() != 1 {
				return errUsage
			}
			return c.Do(ctx, "POST", "/jobs/"+url.PathEscape(fs.Arg(0))+"/cancel", nil, nil)
		case "stop":
			if fs.NArg() != 1 {
				return errUsage
			}
			return c.Do(ctx, "POST", "/workers/stop?n="+url.QueryEscape(fs.Arg(0)), nil, nil)
		}
		return nil
	}
}

// printStatus prints a job's line: id, name, state and task counts.
func printStatus(st fuq.JobReport, tasks bool) {
	if st.Job == nil {
		fmt.Printf("%s\t%s\n", st.ID, st.State)
		return
	}
	j := st.Job
	fmt.Printf("%s\t%s\t%s\tdone %d/%d\tfailed %d\trunning %d\tpending %d\tcancelled %d\n",
		st.ID, j.Name, st.State, j.Done, j.NumTasks, j.Failed, j.Running, j.Pending, j.Cancelled)
	if tasks {
		for _, t := range j.Tasks {
			fmt.Printf("\t%d\t%s\t%s\t%s\n", t.Task, t.State, t.Worker, t.Status)
		}
	}
}
