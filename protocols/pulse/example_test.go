package pulse_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/protocols/pulse"
)

// A Controller runs an Executor's tasks on the workers that register with
// it; here one Worker, in the same process, upper-cases each task.
func ExampleController() {
	dir, _ := os.MkdirTemp("", "pe")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c := &pulse.Controller{Dir: filepath.Join(dir, "ctl"), OutputDir: dir}
	ex, _ := laboro.New(laboro.WithRunner(c), laboro.WithPoolSize(4), laboro.WithConcurrency(4))
	defer ex.Close()
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx) }()
	for _, err := os.Stat(filepath.Join(c.Dir, "main.sock")); err != nil; _, err = os.Stat(filepath.Join(c.Dir, "main.sock")) {
		time.Sleep(time.Millisecond)
	}
	w := &pulse.Worker{Dir: c.Dir, Command: []string{"tr", "a-z", "A-Z"}}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { cancel(); <-served; <-ran }()

	h, _ := ex.Submit(ctx, pulse.NewTask([]byte("hello, controller\n")))
	res, _ := h.Wait(ctx)
	defer res.Output.Close()
	out, _ := res.Output.ReadAll()
	fmt.Print(res.Status, ": ", string(out))
	// Output:
	// succeeded: HELLO, CONTROLLER
}
