package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/laboro-go/laboro/protocols/workerserver"
)

// client returns the user command that talks to a running master.
func client(cmd string, fs *flag.FlagSet) func() error {
	base := fs.String("url", "http://127.0.0.1:8080", "the master's base URL")
	var worker, params, id string
	var wait bool
	if cmd == "submit" {
		fs.StringVar(&worker, "worker", "", "the worker code that runs the job")
		fs.StringVar(&params, "params", "{}", "the job's params, a JSON object")
		fs.StringVar(&id, "id", "", "the job's id (default: the master picks one)")
		fs.BoolVar(&wait, "wait", false, "follow the job until it ends")
	}
	return func() error {
		api := api{base: strings.TrimSuffix(*base, "/")}
		switch cmd {
		case "submit":
			if worker == "" || fs.NArg() > 0 {
				return errUsage
			}
			var p map[string]json.RawMessage
			if err := json.Unmarshal([]byte(params), &p); err != nil {
				return fmt.Errorf("-params: %w", err)
			}
			var got struct{ ID string }
			if err := api.do("POST", "/api/jobs", map[string]any{"id": id, "worker": worker, "params": p}, &got); err != nil {
				return err
			}
			fmt.Println(got.ID)
			if wait {
				return follow(api, got.ID)
			}
		case "status":
			var recs []workerserver.JobRecord
			switch fs.NArg() {
			case 0:
				if err := api.do("GET", "/api/jobs", nil, &recs); err != nil {
					return err
				}
			case 1:
				var rec workerserver.JobRecord
				if err := api.do("GET", "/api/jobs/"+url.PathEscape(fs.Arg(0)), nil, &rec); err != nil {
					return err
				}
				recs = append(recs, rec)
			default:
				return errUsage
			}
			for _, r := range recs {
				fmt.Println(line(r))
			}
		case "cancel":
			if fs.NArg() != 1 {
				return errUsage
			}
			return api.do("POST", "/api/jobs/"+url.PathEscape(fs.Arg(0))+"/cancel", nil, nil)
		}
		return nil
	}
}

// follow prints a job's statuses as they change until it ends.
func follow(api api, id string) error {
	last := ""
	for {
		var rec workerserver.JobRecord
		if err := api.do("GET", "/api/jobs/"+url.PathEscape(id), nil, &rec); err != nil {
			return err
		}
		if l := line(rec); l != last {
			fmt.Fprintln(os.Stderr, l)
			last = l
		}
		if workerserver.Final(rec.Status) {
			fmt.Println(string(rec.Data))
			if rec.Status != workerserver.JobDone {
				os.Exit(1)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// line is a job's one-line summary: id, worker, status, server, progress.
func line(r workerserver.JobRecord) string {
	progress := ""
	var p workerserver.Progress
	if r.Status == workerserver.JobProcessing && json.Unmarshal(r.Data, &p) == nil && p.Progress.Total > 0 {
		progress = fmt.Sprintf("\t%d/%d", p.Progress.Done, p.Progress.Total)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s%s", r.ID, r.Worker, r.Status, r.Server, progress)
}

// api calls the master's user routes.
type api struct{ base string }

func (a api) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var ans workerserver.Answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&ans); err != nil {
		return fmt.Errorf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
	if err := ans.Err(); err != nil {
		return err
	}
	if out != nil && len(ans.Data) > 0 {
		return json.Unmarshal(ans.Data, out)
	}
	return nil
}
