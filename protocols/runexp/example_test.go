package runexp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/runexp"
)

// A Manager is an Executor's runner: jobs submitted to the Executor go to
// the runners that connect. Here one Runner of two workers, in the same
// process, runs one job.
func ExampleManager() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &runexp.Manager{}
	ex, _ := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(16), laboro.WithConcurrency(16))
	defer ex.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- m.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()

	r := &runexp.Runner{Addr: ln.Addr().String(), Name: "example", Workers: 2}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()

	h, _ := ex.Submit(ctx, runexp.NewJob("greetings/hello", ".sh", "echo hello from a runner\n"))
	res, _ := h.Wait(ctx)
	defer res.Output.Close()
	out, _ := res.Output.ReadAll()
	fmt.Println(res.ID, res.Status)
	fmt.Println(strings.SplitN(string(out), "\n", 2)[0])
	fmt.Println(strings.Contains(string(out), "\nhello from a runner\n"))

	m.Finish(ex) // no more jobs: the runner is told FINO and says FINO ANKAU
	fmt.Println(<-ran)
	// Output:
	// greetings/hello succeeded
	// runexp summary: success
	// true
	// <nil>
}

// A Folder is a job folder as the reference manager serves it: its job
// files become jobs, each result goes to outputs/<name>.res, and jobs
// already done are skipped next time.
func ExampleFolder() {
	base, _ := os.MkdirTemp("", "runexp-example")
	defer os.RemoveAll(base)
	os.MkdirAll(filepath.Join(base, "runs", "sweep"), 0o755)
	for _, name := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(base, "runs", "sweep", name+".sh"), []byte("echo job "+name+"\n"), 0o644)
	}
	folder := runexp.Folder{Runs: filepath.Join(base, "runs"), Outputs: filepath.Join(base, "outputs")}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &runexp.Manager{}
	ex, _ := laboro.New(laboro.WithRunner(m), laboro.WithPoolSize(8), laboro.WithConcurrency(8))
	defer ex.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	served := make(chan error, 1)
	go func() { served <- m.Serve(ctx, ln) }()
	defer func() { cancel(); <-served }()
	r := &runexp.Runner{Addr: ln.Addr().String(), Name: "example", Workers: 2}
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()

	todo, _, _, _ := folder.Jobs()
	var handles []*laboro.Handle
	for _, j := range todo {
		job, _ := folder.Load(j)
		h, _ := ex.Submit(ctx, job)
		handles = append(handles, h)
	}
	m.Finish(ex) // the runner is told FINO once they are done
	for _, h := range handles {
		res, _ := h.Wait(ctx)
		folder.Save(res.ID, res.Output)
		res.Output.Close()
	}
	fmt.Println(<-ran)

	f, _ := os.Open(folder.ResultPath("sweep/b"))
	defer f.Close()
	first, _ := bufio.NewReader(f).ReadString('\n')
	fmt.Print(first)
	todo, done, _, _ := folder.Jobs()
	fmt.Println(len(todo), "left,", done, "done")
	// Output:
	// <nil>
	// runexp summary: success
	// 0 left, 3 done
}
