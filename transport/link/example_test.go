package link_test

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/laboro-go/laboro/transport/link"
)

// printer is a master that prints what reaches it.
type printer struct{ mu sync.Mutex }

func (p *printer) Hello(_ context.Context, reconnect bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Println("hello, reconnect:", reconnect)
	return nil
}

func (p *printer) Online(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Println("online")
	return nil
}

func (p *printer) Send(_ context.Context, m link.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf("%s: %s\n", m.Key, m.Body)
	return nil
}

func (p *printer) Goodbye(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Println("goodbye")
	return nil
}

// A Link sends a job's messages in order; what it cannot send waits in its
// cache directory until the master is back.
func ExampleLink() {
	dir, _ := os.MkdirTemp("", "link-example")
	defer os.RemoveAll(dir)
	l, err := link.New(&printer{}, link.Config{CacheDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	l.Start()
	job := l.Job("job-1")
	job.Complete([]byte(`{"status":"Done"}`)) // waits until sent (or cached)
	l.Stop(ctx)
	// Output:
	// hello, reconnect: false
	// online
	// job-1: {"status":"Done"}
	// goodbye
}
