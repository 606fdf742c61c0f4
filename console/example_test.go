package console_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/console"
)

// A console for an Executor of one's own, behind a token: open
// http://127.0.0.1:8081/?token=TOKEN in a browser.
func ExampleNew() {
	ex, err := laboro.New(laboro.WithHistory(console.History))
	if err != nil {
		panic(err)
	}
	con := console.New(console.Options{Token: "a long random token"})
	con.Attach(ex)
	mux := http.NewServeMux()
	mux.Handle("/", con) // then: http.ListenAndServe("127.0.0.1:8081", mux)

	h, _ := ex.Submit(context.Background(), laboro.Job{ID: "hello", Command: "echo hello"})
	res, _ := h.Wait(context.Background())
	res.Output.Close()
	ex.Shutdown(context.Background())
	fmt.Println(con.Snapshot().Counts)
	// Output: map[succeeded:1]
}
