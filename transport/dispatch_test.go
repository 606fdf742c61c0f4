package transport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type dispatcher = transport.Dispatcher[string, int]

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run starts Run in a goroutine and returns a channel for its result.
func run(ctx context.Context, d *dispatcher, key string, v int) <-chan laboro.Result {
	c := make(chan laboro.Result, 1)
	go func() { c <- d.Run(ctx, key, v) }()
	return c
}

func result(t *testing.T, c <-chan laboro.Result) laboro.Result {
	t.Helper()
	select {
	case res := <-c:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("no result")
		return laboro.Result{}
	}
}

// next waits for a job for w, failing the test after 30 s.
func next(t *testing.T, w *transport.Worker[string, int]) *transport.Ticket[string, int] {
	t.Helper()
	tk := w.Next(testCtx(t), 30*time.Second, nil)
	require.NotNil(t, tk, "no job for %s", w.Name())
	return tk
}

// keepAlive renews w's lease every 10 ms until the test ends: a worker
// that shows life.
func keepAlive(t *testing.T, w *transport.Worker[string, int]) {
	stop := make(chan struct{})
	var renewing sync.WaitGroup
	renewing.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				w.Renew()
			}
		}
	})
	t.Cleanup(func() { close(stop); renewing.Wait() })
}

// waitAdded waits until n jobs wait in line or are held.
func waitAdded(t *testing.T, d *dispatcher, n int) {
	t.Helper()
	require.Eventually(t, func() bool { st := d.Stats(); return st.Waiting+st.Held == n }, 10*time.Second, time.Millisecond)
}

// output makes an Output file holding s.
func output(t *testing.T, s string) *laboro.Output {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out")
	require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
	return laboro.NewOutput(path, int64(len(s)))
}

// cancels records what a worker is told to cancel.
type cancels struct {
	mu   sync.Mutex
	keys []string
	told chan struct{}
}

func newCancels() *cancels { return &cancels{told: make(chan struct{}, 100)} }

func (c *cancels) fn(keys []string) {
	c.mu.Lock()
	c.keys = append(c.keys, keys...)
	c.mu.Unlock()
	c.told <- struct{}{}
}

func (c *cancels) wait(t *testing.T) []string {
	t.Helper()
	select {
	case <-c.told:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker was not told to cancel")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.keys...)
}

func TestPullInOrderWithResults(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	ctx := testCtx(t)
	var runs []<-chan laboro.Result
	for i := range 3 {
		runs = append(runs, run(ctx, d, fmt.Sprint("job", i), i))
		waitAdded(t, d, i+1)
	}
	w := d.Join("w1", nil)
	for i := range 3 {
		tk := next(t, w)
		assert.Equal(t, fmt.Sprint("job", i), tk.Key, "first come, first served")
		assert.Equal(t, i, tk.Value)
		assert.Equal(t, "w1", tk.Holder())
		assert.Equal(t, 1, tk.Attempts())
	}
	assert.Equal(t, transport.Stats{Held: 3, Workers: 1}, d.Stats())
	before := time.Now()
	require.NoError(t, w.Complete("job1", laboro.Result{Status: laboro.StatusFailed, ExitCode: 3, Output: output(t, "x")}))
	res := result(t, runs[1])
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.Equal(t, 3, res.ExitCode)
	assert.False(t, res.Started.IsZero(), "Started is when it was handed out")
	assert.True(t, !res.Ended.Before(before) && !res.Ended.Before(res.Started))
	b, err := res.Output.ReadAll()
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))
	res.Output.Close()

	// A second result of the same job is late: discarded, its file removed.
	late := output(t, "late")
	assert.ErrorIs(t, w.Complete("job1", laboro.Result{Output: late}), transport.ErrLate)
	_, err = os.Stat(late.Path())
	assert.ErrorIs(t, err, os.ErrNotExist, "a discarded output is closed")
	for _, key := range []string{"job0", "job2"} {
		require.NoError(t, w.Complete(key, laboro.Result{Status: laboro.StatusSucceeded}))
	}
	assert.Equal(t, laboro.StatusSucceeded, result(t, runs[0]).Status)
	assert.Equal(t, laboro.StatusSucceeded, result(t, runs[2]).Status)
	assert.Equal(t, transport.Stats{Workers: 1}, d.Stats())
}

func TestDuplicateKeyAndResultFromAnotherWorker(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	ctx := testCtx(t)
	r := run(ctx, d, "a", 1)
	waitAdded(t, d, 1)
	res := d.Run(ctx, "a", 2)
	assert.ErrorIs(t, res.Err, transport.ErrDuplicate)
	assert.Equal(t, laboro.StatusFailed, res.Status)

	w1, w2 := d.Join("w1", nil), d.Join("w2", nil)
	next(t, w1)
	assert.ErrorIs(t, w2.Complete("a", laboro.Result{}), transport.ErrNotHeld)
	require.NoError(t, w1.Complete("a", laboro.Result{}))
	assert.Equal(t, laboro.StatusSucceeded, result(t, r).Status)
}

// AddAll puts many jobs in line at once, in order, or none when a key is
// taken; each ticket then lives as one Add made it.
func TestAddAll(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	ctx := testCtx(t)
	keys, values := make([]string, 2000), make([]int, 2000)
	for i := range keys {
		keys[i], values[i] = fmt.Sprint("k", i), i
	}
	ts, err := d.AddAll(ctx, keys, values)
	require.NoError(t, err)
	require.Len(t, ts, 2000)
	assert.Equal(t, transport.Stats{Waiting: 2000}, d.Stats())

	_, err = d.AddAll(ctx, []string{"new", "k5"}, []int{0, 0})
	assert.ErrorIs(t, err, transport.ErrDuplicate)
	_, err = d.AddAll(ctx, []string{"twice", "twice"}, []int{0, 0})
	assert.ErrorIs(t, err, transport.ErrDuplicate)
	assert.Equal(t, 2000, d.Stats().Waiting, "none of them added")
	_, err = d.Add(ctx, "new", 0)
	assert.NoError(t, err, "the refused batch left no key behind")
	_, err = d.Add(ctx, "twice", 0)
	assert.NoError(t, err)

	w := d.Join("w", nil)
	got := w.Take(3, nil)
	require.Len(t, got, 3)
	assert.Equal(t, []int{0, 1, 2}, []int{got[0].Value, got[1].Value, got[2].Value}, "in order")
	require.NoError(t, w.Complete("k1", laboro.Result{}))
	res, ok := ts[1].Result()
	require.True(t, ok)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	_, ok = ts[0].Result()
	assert.False(t, ok, "still held")

	d.Close()
	_, err = d.AddAll(ctx, []string{"late"}, []int{0})
	assert.ErrorIs(t, err, transport.ErrClosed)
}

// A Run whose context ends leaves the line, or has its worker told to
// cancel; it returns at once with the status of the context's cause, and a
// result that comes later is discarded.
func TestAbandonedJobs(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	c := newCancels()
	w := d.Join("w", c.fn)

	ctx, cancel := context.WithCancelCause(testCtx(t))
	queued := run(ctx, d, "queued", 0)
	waitAdded(t, d, 1)
	cancel(laboro.ErrCancelled)
	res := result(t, queued)
	assert.Equal(t, laboro.StatusCancelled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrCancelled)
	assert.Nil(t, w.Take(1, nil), "an abandoned job is never handed out")
	assert.Equal(t, transport.Stats{Workers: 1}, d.Stats())

	ctx, stop := context.WithTimeoutCause(context.Background(), time.Hour, laboro.ErrTimeout)
	defer stop()
	held := run(ctx, d, "held", 0)
	tk := next(t, w)
	deadline, ok := tk.Deadline()
	assert.True(t, ok)
	assert.WithinDuration(t, time.Now().Add(time.Hour), deadline, time.Minute, "the deadline travels with the job")
	stop()
	res = result(t, held)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.Equal(t, []string{"held"}, c.wait(t), "the worker is told")
	out := output(t, "late")
	assert.ErrorIs(t, w.Complete("held", laboro.Result{Output: out}), transport.ErrLate)
	_, err := os.Stat(out.Path())
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// The jobs of a worker that leaves go back to the front of the line, in
// their order, before the jobs that were waiting.
func TestLeaveRequeuesAtTheFront(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	ctx := testCtx(t)
	var runs []<-chan laboro.Result
	for i := range 4 {
		runs = append(runs, run(ctx, d, fmt.Sprint(i), i))
		waitAdded(t, d, i+1)
	}
	w1 := d.Join("w1", nil)
	assert.Len(t, w1.Take(2, nil), 2)
	w1.Leave(errors.New("connection reset"))
	assert.Nil(t, w1.Take(1, nil), "a worker that left takes nothing")

	w2 := d.Join("w2", nil)
	var got []string
	for _, tk := range w2.Take(10, nil) {
		got = append(got, tk.Key)
		assert.Equal(t, tk.Key == "0" || tk.Key == "1", tk.Attempts() == 2, tk.Key)
		require.NoError(t, w2.Complete(tk.Key, laboro.Result{}))
	}
	assert.Equal(t, []string{"0", "1", "2", "3"}, got)
	for _, r := range runs {
		assert.Equal(t, laboro.StatusSucceeded, result(t, r).Status)
	}
}

// Within its grace, a worker that left keeps its jobs for a worker that
// says it still runs them; the rest go back in line once the grace ends.
func TestGraceAndReclaim(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{Grace: 200 * time.Millisecond})
	ctx := testCtx(t)
	a, b := run(ctx, d, "a", 0), run(ctx, d, "b", 0)
	waitAdded(t, d, 2)
	w1 := d.Join("w1", nil)
	assert.Len(t, w1.Take(2, nil), 2)
	w1.Leave(errors.New("gone"))
	assert.Equal(t, transport.Stats{Held: 2}, d.Stats(), "held while the grace runs")

	back := d.Join("w1-again", nil)
	tk, ok := back.Reclaim("a")
	require.True(t, ok)
	assert.Equal(t, "w1-again", tk.Holder())
	_, ok = back.Reclaim("nope")
	assert.False(t, ok, "a job nobody waits for: the worker must cancel it")

	other := d.Join("w2", nil)
	tb := next(t, other) // b, once the grace has passed
	assert.Equal(t, "b", tb.Key)
	assert.Equal(t, 2, tb.Attempts())
	require.NoError(t, back.Complete("a", laboro.Result{}))
	require.NoError(t, other.Complete("b", laboro.Result{}))
	assert.Equal(t, laboro.StatusSucceeded, result(t, a).Status)
	assert.Equal(t, laboro.StatusSucceeded, result(t, b).Status)
}

// A worker that comes back after its grace reclaims a job that went to
// another worker meanwhile: the other worker, which no longer holds it, is
// told to cancel its run, and the reclaimer's result settles the job.
func TestReclaimFromAnotherWorker(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	ctx := testCtx(t)
	r := run(ctx, d, "a", 0)
	waitAdded(t, d, 1)
	w1 := d.Join("w1", nil)
	next(t, w1)
	w1.Leave(errors.New("gone")) // no grace: back in line at once
	c2 := newCancels()
	w2 := d.Join("w2", c2.fn)
	assert.Equal(t, 2, next(t, w2).Attempts())

	back := d.Join("w1-again", nil)
	tk, ok := back.Reclaim("a")
	require.True(t, ok)
	assert.Equal(t, "w1-again", tk.Holder())
	assert.Equal(t, []string{"a"}, c2.wait(t), "the worker it was taken from is told to cancel it")
	assert.Empty(t, w2.Held())
	assert.Equal(t, 2, tk.Attempts(), "a reclaim of a held job is no new attempt")
	require.NoError(t, back.Complete("a", laboro.Result{ExitCode: 3}))
	assert.Equal(t, 3, result(t, r).ExitCode)
	assert.ErrorIs(t, w2.Complete("a", laboro.Result{}), transport.ErrLate)
}

// A worker that shows no life for a lease loses its jobs to another; the
// first result wins, from either, and the other worker is told to cancel.
func TestLeaseExpires(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{Lease: 100 * time.Millisecond})
	ctx := testCtx(t)
	r := run(ctx, d, "a", 0)
	c2 := newCancels()
	w1, w2 := d.Join("stalled", nil), d.Join("alive", c2.fn)
	next(t, w1)
	keepAlive(t, w2)
	tk := next(t, w2)
	assert.Equal(t, 2, tk.Attempts())
	assert.Empty(t, w1.Held())
	assert.Equal(t, []string{"a"}, w2.Held())

	require.NoError(t, w1.Complete("a", laboro.Result{ExitCode: 7}), "the stalled worker's result is still taken")
	assert.Equal(t, 7, result(t, r).ExitCode)
	assert.Equal(t, []string{"a"}, c2.wait(t))
	assert.ErrorIs(t, w2.Complete("a", laboro.Result{}), transport.ErrLate)
}

// Lost tells why a job last went back in line from a worker that lost it,
// so that a protocol whose record still names that worker when another
// takes the job can say why: a worker that left, one whose lease expired,
// Retry's error and Return's reason; a Release keeps what was there.
func TestTicketLost(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{Lease: 100 * time.Millisecond})
	ctx := testCtx(t)
	r := run(ctx, d, "a", 0)

	w1 := d.Join("w1", nil)
	tk := next(t, w1)
	assert.NoError(t, tk.Lost(), "never lost yet")
	bye := errors.New("connection reset")
	w1.Leave(bye)

	stalled := d.Join("stalled", nil)
	tk = next(t, stalled)
	assert.ErrorIs(t, tk.Lost(), bye)
	// The stalled worker's lease expires while w2, which shows life, asks.
	w2 := d.Join("w2", nil)
	keepAlive(t, w2)
	tk = next(t, w2)
	assert.ErrorIs(t, tk.Lost(), transport.ErrLeaseExpired)

	require.True(t, w2.Release(tk))
	tk = next(t, w2)
	assert.ErrorIs(t, tk.Lost(), transport.ErrLeaseExpired, "a Release keeps the last loss")

	failing := errors.New("disk full")
	require.True(t, w2.Retry(tk, failing))
	tk = next(t, w2)
	assert.ErrorIs(t, tk.Lost(), failing)

	unheard := errors.New("the answer was lost")
	require.True(t, w2.Return(tk, unheard))
	assert.False(t, w2.Return(tk, unheard), "no longer held")
	tk = next(t, w2)
	assert.ErrorIs(t, tk.Lost(), unheard)
	assert.Equal(t, 4, tk.Attempts(), "w1, stalled, w2 and w2 after Retry: a Release or a Return takes its hand-out back")

	require.NoError(t, w2.Complete("a", laboro.Result{}))
	assert.Equal(t, laboro.StatusSucceeded, result(t, r).Status)
}

// OnRequeue hears of the jobs a lost worker gave back, in their order:
// when it leaves, and when its lease expires; not of a job that ran out of
// attempts, and not with the Dispatcher's lock held.
func TestOnRequeue(t *testing.T) {
	type requeue struct {
		worker string
		keys   []string
		why    error
	}
	d := transport.NewDispatcher[string, int](transport.Config{Lease: 100 * time.Millisecond, MaxAttempts: 2})
	heard := make(chan requeue, 10)
	d.OnRequeue(func(w *transport.Worker[string, int], keys []string, why error) {
		d.Stats() // would deadlock under the lock
		heard <- requeue{w.Name(), keys, why}
	})
	hear := func() requeue {
		t.Helper()
		select {
		case r := <-heard:
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("OnRequeue was not called")
			return requeue{}
		}
	}
	ctx := testCtx(t)
	var runs []<-chan laboro.Result
	for i := range 3 {
		runs = append(runs, run(ctx, d, fmt.Sprint(i), i))
		waitAdded(t, d, i+1)
	}
	w1 := d.Join("w1", nil)
	require.Len(t, w1.Take(2, nil), 2)
	bye := errors.New("connection reset")
	w1.Leave(bye)
	r := hear()
	assert.Equal(t, "w1", r.worker)
	assert.Equal(t, []string{"0", "1"}, r.keys)
	assert.ErrorIs(t, r.why, bye)

	// "0" and "1" are handed out a second time: they run out of attempts
	// when the stalled worker's lease expires, and only "2" goes back.
	stalled := d.Join("stalled", nil)
	require.Len(t, stalled.Take(3, nil), 3)
	r = hear()
	assert.Equal(t, "stalled", r.worker)
	assert.Equal(t, []string{"2"}, r.keys)
	assert.ErrorIs(t, r.why, transport.ErrLeaseExpired)
	for _, c := range runs[:2] {
		err := result(t, c).Err
		assert.ErrorIs(t, err, transport.ErrAttempts)
		assert.ErrorIs(t, err, transport.ErrLeaseExpired)
		// The last reason first: it is what a user acts on.
		assert.EqualError(t, err, transport.ErrLeaseExpired.Error()+" (handed out 2 times, the limit)")
	}
	w2 := d.Join("w2", nil)
	tk := next(t, w2)
	require.NoError(t, w2.Complete(tk.Key, laboro.Result{}))
	assert.Equal(t, laboro.StatusSucceeded, result(t, runs[2]).Status)
	select {
	case r := <-heard:
		t.Fatalf("unexpected requeue %v", r)
	default:
	}
}

func TestAttemptsReleaseAndRetry(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{MaxAttempts: 2})
	ctx := testCtx(t)
	r := run(ctx, d, "a", 0)
	w := d.Join("w", nil)
	for range 5 {
		assert.True(t, w.Release(next(t, w)), "a release is not an attempt")
	}
	tk := next(t, w)
	assert.Equal(t, 1, tk.Attempts())
	boom := errors.New("worker's disk full")
	assert.True(t, w.Retry(tk, boom))
	assert.False(t, w.Retry(tk, boom), "no longer held")
	w2 := d.Join("w2", nil)
	next(t, w2)
	w2.Leave(errors.New("connection lost"))
	res := result(t, r)
	assert.Equal(t, laboro.StatusFailed, res.Status)
	assert.ErrorIs(t, res.Err, transport.ErrAttempts)
	assert.ErrorContains(t, res.Err, "connection lost")
}

// Push: a worker that found too little in line is woken when jobs come,
// and takes only what it accepts.
func TestWakeAndAccept(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	w := d.Join("evens", nil)
	even := func(v int) bool { return v%2 == 0 }
	assert.Empty(t, w.Take(4, even))
	ctx := testCtx(t)
	var runs []<-chan laboro.Result
	for i := range 5 {
		runs = append(runs, run(ctx, d, fmt.Sprint(i), i))
		if i == 0 {
			<-w.Wake()
		}
		waitAdded(t, d, i+1)
	}
	var got []int
	for _, tk := range w.Take(4, even) {
		got = append(got, tk.Value)
		require.NoError(t, w.Complete(tk.Key, laboro.Result{}))
	}
	assert.Equal(t, []int{0, 2, 4}, got)
	odd := d.Join("any", nil)
	for _, tk := range odd.Take(4, nil) {
		got = append(got, tk.Value)
		require.NoError(t, odd.Complete(tk.Key, laboro.Result{}))
	}
	assert.Equal(t, []int{0, 2, 4, 1, 3}, got)
	for _, r := range runs {
		result(t, r)
	}
}

// OnSettle hears of every ticket once, whatever settled it; Close settles
// what is left and ends a waiting Next.
func TestOnSettleAndClose(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{})
	var mu sync.Mutex
	seen := map[string]int{}
	d.OnSettle(func(tk *transport.Ticket[string, int]) {
		mu.Lock()
		seen[tk.Key]++
		mu.Unlock()
	})
	ctx := testCtx(t)
	done := run(ctx, d, "done", 0)
	waitAdded(t, d, 1)
	left := run(ctx, d, "left", 0)
	waitAdded(t, d, 2)
	w := d.Join("w", nil)
	tk := w.Take(1, nil)
	require.NoError(t, w.Complete(tk[0].Key, laboro.Result{}))
	result(t, done)

	idle := d.Join("idle", nil)
	idle.Take(1, func(int) bool { return false })
	nexted := make(chan *transport.Ticket[string, int])
	go func() { nexted <- idle.Next(ctx, time.Hour, func(int) bool { return false }) }()
	d.Close()
	assert.Nil(t, <-nexted)
	res := result(t, left)
	assert.Equal(t, laboro.StatusKilled, res.Status)
	assert.ErrorIs(t, res.Err, laboro.ErrKilled)
	assert.ErrorIs(t, res.Err, transport.ErrClosed)
	_, err := d.Add(ctx, "after", 0)
	assert.ErrorIs(t, err, transport.ErrClosed)
	mu.Lock()
	assert.Equal(t, map[string]int{"done": 1, "left": 1}, seen)
	mu.Unlock()
}

// Many jobs, several workers coming and going at random: every Run ends
// exactly once, with a result a worker gave for it.
func TestEveryJobEndsOnceUnderChurn(t *testing.T) {
	d := transport.NewDispatcher[string, int](transport.Config{Grace: time.Millisecond})
	ctx := testCtx(t)
	const jobs = 2000
	results := make(chan laboro.Result, jobs)
	var runs sync.WaitGroup
	for i := range jobs {
		runs.Go(func() {
			res := d.Run(ctx, fmt.Sprint(i), i)
			res.ID = fmt.Sprint(i)
			results <- res
		})
	}
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for n := range 4 {
		workers.Go(func() {
			for gen := 0; ; gen++ {
				select {
				case <-stop:
					return
				default:
				}
				w := d.Join(fmt.Sprintf("w%d.%d", n, gen), nil)
				for k := 0; k < 50; k++ {
					tk := w.Next(ctx, 10*time.Millisecond, nil)
					if tk == nil {
						break
					}
					if k%7 == 3 {
						continue // lost with the worker
					}
					assert.NoError(t, w.Complete(tk.Key, laboro.Result{ExitCode: tk.Value}))
				}
				w.Leave(nil)
			}
		})
	}
	runs.Wait()
	close(stop)
	workers.Wait()
	close(results)
	seen := map[string]bool{}
	for res := range results {
		assert.False(t, seen[res.ID], "job %s ended twice", res.ID)
		seen[res.ID] = true
		assert.Equal(t, res.ID, fmt.Sprint(res.ExitCode), "its own result")
	}
	assert.Len(t, seen, jobs)
	assert.Equal(t, 0, d.Stats().Waiting+d.Stats().Held)
}

// Await sets jobs aside for the grace a worker that left has: a worker
// reclaims or completes one meanwhile (it ran them before its program's
// restart), and the others go back to the front of the line after it,
// in their order. Without a grace it leaves them in line. (In a bubble of
// its own: the hour passes once everything waits.)
func TestAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := transport.NewDispatcher[string, int](transport.Config{Grace: time.Hour})
		ts, err := d.AddAll(t.Context(), []string{"a", "b", "c", "d"}, []int{1, 2, 3, 4})
		require.NoError(t, err)
		start := time.Now()
		d.Await("before the restart", []string{"a", "b", "c"}, errors.New("restarted"))
		w := d.Join("w", nil)
		got := w.Take(4, nil)
		require.Len(t, got, 1, "only d was left in line")
		assert.Equal(t, "d", got[0].Key)
		_, ok := w.Reclaim("b")
		require.True(t, ok, "it ran b")
		require.NoError(t, w.Complete("b", laboro.Result{}))
		res, ok := ts[1].Result()
		require.True(t, ok)
		assert.Equal(t, laboro.StatusSucceeded, res.Status)

		<-w.Wake() // the grace is over: a and c are back in line
		assert.Equal(t, time.Hour, time.Since(start))
		got = w.Take(4, nil)
		require.Len(t, got, 2)
		assert.Equal(t, []string{"a", "c"}, []string{got[0].Key, got[1].Key})
		assert.Equal(t, 1, got[0].Attempts(), "set aside is no attempt")
		w.Leave(nil)
		d.Close()
	})

	none := transport.NewDispatcher[string, int](transport.Config{})
	_, err := none.AddAll(testCtx(t), []string{"a"}, []int{1})
	require.NoError(t, err)
	none.Await("before the restart", []string{"a"}, errors.New("restarted"))
	assert.Len(t, none.Join("w", nil).Take(1, nil), 1, "no grace: nothing set aside")
}
