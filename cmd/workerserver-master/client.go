package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/laboro-go/laboro/internal/cli"
	"github.com/laboro-go/laboro/internal/secret"
	"github.com/laboro-go/laboro/protocols/workerserver"
)

// urlFlag defines -url, the master's base URL ($WORKERSERVER_URL, else the
// master's default address), and returns its API, with the token from
// $WORKERSERVER_API_TOKEN or the state directory's workerserver-api.token
// ("" if neither: the master says what is missing).
func urlFlag(c *cli.Command) func() api {
	def := os.Getenv("WORKERSERVER_URL")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	base := c.Flags.String("url", def, "the master's base URL ($WORKERSERVER_URL)")
	return func() api {
		tok, err := secret.Find("workerserver-api", "WORKERSERVER_API_TOKEN")
		return api{base: strings.TrimSuffix(*base, "/"), token: tok, tokenErr: err}
	}
}

func submitCommand(c *cli.Command) func(context.Context, []string) error {
	master := urlFlag(c)
	worker := c.Flags.String("worker", "", "the worker code that runs the job")
	params := c.Flags.String("params", "{}", "the job's params, a JSON object")
	id := c.Flags.String("id", "", "the job's id (default: the master picks a number)")
	wait := c.Flags.Bool("wait", false, "follow the job until it ends")
	return func(ctx context.Context, args []string) error {
		switch {
		case len(args) > 0:
			return cli.Usagef("unexpected argument %q", args[0])
		case *worker == "":
			return cli.Usagef("-worker CODE is required")
		}
		var p map[string]json.RawMessage
		if err := json.Unmarshal([]byte(*params), &p); err != nil {
			return cli.Usagef("-params: not a JSON object: %v", err)
		}
		api := master()
		var got struct{ ID string }
		if err := api.do(ctx, "POST", "/api/jobs", map[string]any{"id": *id, "worker": *worker, "params": p}, &got); err != nil {
			return err
		}
		if *wait {
			// Standard output is the job's result: the id goes beside.
			fmt.Fprintf(os.Stderr, "job %s\n", got.ID)
		} else {
			fmt.Println(got.ID)
		}
		if !workerserver.NumericID(got.ID) {
			fmt.Fprintf(os.Stderr, "warning: job id %q is not a decimal number: a worker-server 0.9.2 (Node) worker loses "+
				"the statuses it has to keep for such a job while the master is away; leave -id out to have the master pick one\n", got.ID)
		}
		if *wait {
			return follow(ctx, api, got.ID)
		}
		return nil
	}
}

func statusCommand(c *cli.Command) func(context.Context, []string) error {
	master := urlFlag(c)
	asJSON := c.Flags.Bool("json", false, "print the jobs' records as JSON, for programs")
	last := c.Flags.Int("n", workerserver.DefaultListLimit, fmt.Sprintf("list the last `N` jobs submitted (at most %d)", workerserver.MaxListLimit))
	return func(ctx context.Context, args []string) error {
		api := master()
		var recs []workerserver.JobRecord
		switch len(args) {
		case 0:
			if *last < 1 || *last > workerserver.MaxListLimit {
				return cli.Usagef("-n %d: the master lists from 1 to %d jobs", *last, workerserver.MaxListLimit)
			}
			if err := api.do(ctx, "GET", "/api/jobs?limit="+strconv.Itoa(*last), nil, &recs); err != nil {
				return err
			}
		case 1:
			var rec workerserver.JobRecord
			if err := api.do(ctx, "GET", "/api/jobs/"+url.PathEscape(args[0]), nil, &rec); err != nil {
				return err
			}
			recs = append(recs, rec)
		default:
			return cli.Usagef("one JOB at most")
		}
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(recs)
		}
		for _, r := range recs {
			fmt.Println(line(r))
			why(os.Stdout, r)
		}
		return nil
	}
}

func cancelCommand(c *cli.Command) func(context.Context, []string) error {
	master := urlFlag(c)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return cli.Usagef("one JOB to cancel")
		}
		return master().do(ctx, "POST", "/api/jobs/"+url.PathEscape(args[0])+"/cancel", nil, nil)
	}
}

// waitMaster is how long follow waits for a master that went away.
const waitMaster = 5 * time.Minute

// unofferedWarning is how long follow waits before it warns that no
// worker offers the job's code: long enough for a worker that is starting
// to come Online.
const unofferedWarning = 3 * time.Second

// follow prints a job's statuses as they change until it ends; a job
// that does not end Done ends the command with ExitFailed, after its
// error. A job that no worker offers to run still after unofferedWarning
// gets a warning, once.
//
// A master that goes away meanwhile (a crash, a restart) is waited for, up
// to waitMaster: started again, it has the job in its table, and the
// following goes on.
func follow(ctx context.Context, api api, id string) error {
	last, start, warned := "", time.Now(), false
	away := cli.NewAway("the master", waitMaster, os.Stderr)
	for {
		var rec workerserver.JobRecord
		if err := api.do(ctx, "GET", "/api/jobs/"+url.PathEscape(id), nil, &rec); err != nil {
			var ue *url.Error // no answer: the master is not there
			if ctx.Err() != nil || !errors.As(err, &ue) {
				return err
			}
			// The master was there at the submission: it went away, and
			// the request's own error says how.
			if err := away.Lost(ctx, ue); err != nil {
				return err
			}
			continue
		}
		away.Back()
		if l := line(rec); l != last {
			fmt.Fprintln(os.Stderr, l)
			last = l
		}
		if rec.Unoffered && !warned && time.Since(start) >= unofferedWarning {
			fmt.Fprintf(os.Stderr, "warning: no worker offers code %q: job %s waits until one does (cancel it with: cancel %s)\n",
				rec.Worker, rec.ID, rec.ID)
			warned = true
		}
		if workerserver.Final(rec.Status) {
			fmt.Println(string(rec.Data))
			if rec.Status != workerserver.JobDone {
				why(os.Stderr, rec)
				return cli.Exit(cli.ExitFailed)
			}
			return nil
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// why writes, for a job that failed, what it ran (its worker code and
// parameters) and how it ended (the worker's error: its exit status and
// the end of its standard error), indented under its line.
func why(w io.Writer, r workerserver.JobRecord) {
	if r.Status != workerserver.JobFailed {
		return
	}
	// The record leaves out empty params, which the worker got as {}.
	params := []byte("{}")
	if len(r.Params) > 0 {
		params, _ = json.Marshal(r.Params)
	}
	fmt.Fprintf(w, "\t  command: %s %s\n", r.Worker, params)
	var data workerserver.ErrorData
	if json.Unmarshal(r.Data, &data) != nil || data.Error.Message == "" {
		fmt.Fprintf(w, "\t  data: %s\n", r.Data)
		return
	}
	first, rest, _ := strings.Cut(strings.TrimRight(data.Error.Message, "\n"), "\n")
	if data.Error.Name != "" { // a reference worker's may have none
		first = data.Error.Name + ": " + first
	}
	fmt.Fprintf(w, "\t  error: %s\n", first)
	if rest != "" {
		for _, l := range strings.Split(rest, "\n") {
			fmt.Fprintf(w, "\t  | %s\n", l)
		}
	}
}

// line is a job's one-line summary: id, worker, status, server, then
// its progress, or why it waits.
func line(r workerserver.JobRecord) string {
	note := ""
	var p workerserver.Progress
	switch {
	case r.Status == workerserver.JobProcessing && json.Unmarshal(r.Data, &p) == nil && p.Progress.Total > 0:
		note = fmt.Sprintf("\t%d/%d", p.Progress.Done, p.Progress.Total)
	case r.Unoffered:
		note = fmt.Sprintf("\tno worker offers %q", r.Worker)
	}
	if r.Cancelling && !workerserver.Final(r.Status) {
		note += "\tcancelling"
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s%s", r.ID, r.Worker, r.Status, r.Server, note)
}

// api calls the master's user routes.
type api struct {
	base     string
	token    string
	tokenErr error // why there is no token
}

func (a api) do(ctx context.Context, method, path string, body, out any) error {
	if u, err := url.Parse(a.base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cli.Usagef("-url %q (or $WORKERSERVER_URL): want the master's http:// or https:// base URL, like http://127.0.0.1:8080", a.base)
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("no master answers at %s (is workerserver-master running, at this -url?): %w", a.base, err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		if a.tokenErr != nil {
			return fmt.Errorf("the master wants its API token: %w; copy its workerserver-api.token here or set WORKERSERVER_API_TOKEN", a.tokenErr)
		}
		return errors.New("the master refused the API token (from $WORKERSERVER_API_TOKEN or workerserver-api.token): it is not the master's")
	}
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
