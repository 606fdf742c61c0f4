package console_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro"
)

// browser returns a headless Chromium tab, or skips the test when there is
// no Chromium (CI installs Debian's; with $LABORO_BROWSER_TEST set it must
// be there).
func browser(t *testing.T) context.Context {
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("LABORO_BROWSER_TEST") != "" {
			t.Fatal("no chromium to run the browser test with")
		}
		t.Skip("no chromium: the browser test needs one (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(390, 844)) // a phone's width
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// waitText waits until the element sel finds holds want (the page
// changes it as the events arrive).
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](`(sel, want) => {
		const e = document.querySelector(sel);
		return e !== null && e.textContent.includes(want);
	}`, chromedp.WithPollingArgs(sel, want), chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		got, _ := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		t.Fatalf("%s never showed %q: %v (it shows %q)", sel, want, err, got)
	}
}

// The console as a person uses it, in a real browser: the page loads;
// submitted jobs appear and move on; raising the concurrency makes a
// waiting job run; a running job's page shows its output line by line as
// the job prints it; Cancel ends a running job.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	ex, srv, _ := start(t, laboro.WithPoolSize(4), laboro.WithConcurrency(1))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?token="+token), chromedp.WaitVisible(chromedp.CSS("#running"))))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, srv.URL+"/", loc, "the token leaves the address bar")

	talkIn, talkW, err := os.Pipe()
	require.NoError(t, err)
	defer talkIn.Close()
	holdIn, holdW, err := os.Pipe()
	require.NoError(t, err)
	defer holdIn.Close()
	defer holdW.Close()
	bg := context.Background()
	talk, err := ex.Submit(bg, laboro.Job{ID: "talk", Script: "echo first; read x; echo second", Stdin: talkIn})
	require.NoError(t, err)
	hold, err := ex.Submit(bg, laboro.Job{ID: "hold", Command: "cat", Stdin: holdIn})
	require.NoError(t, err)
	waitText(t, ctx, "#running tbody", "talk")
	waitText(t, ctx, "#queued tbody", "hold")

	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#concurrency"), "2"), chromedp.Click(chromedp.CSS("header form button"))))
	waitText(t, ctx, "#running tbody", "hold")
	assert.Equal(t, 2, ex.Concurrency())

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#running a[href="/jobs/talk"]`)), chromedp.WaitVisible(chromedp.CSS("#output"))))
	waitText(t, ctx, "#output", "first")
	out, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#output")))
	require.NoError(t, err)
	assert.NotContains(t, out, "second", "the job has not printed it yet")
	talkW.Close()
	waitText(t, ctx, "#output", "second")
	waitText(t, ctx, "#output-end", "ended")
	res, err := talk.Wait(bg)
	require.NoError(t, err)
	res.Output.Close()

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#running"))))
	waitText(t, ctx, "#finished tbody", "succeeded")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#running form[action="/jobs/hold/cancel"] button`))))
	res, err = hold.Wait(bg)
	require.NoError(t, err)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	if res.Output != nil {
		res.Output.Close()
	}
	waitText(t, ctx, "#finished tbody", "cancelled")
	running, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#running tbody")))
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(running))
}
