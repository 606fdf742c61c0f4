package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/laborotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newHandles returns one Handle per Meta value, with ids "a", "b", … in
// that order.
func newHandles(t *testing.T, metas ...any) []*laboro.Handle {
	t.Helper()
	hs := make([]*laboro.Handle, len(metas))
	for i, meta := range metas {
		hs[i] = laboro.NewHandle(laboro.Job{ID: name(i), Meta: meta})
	}
	return hs
}

// name returns the id of the i-th Handle from newHandles: a, b, …, z, a1, b1, …
func name(i int) string {
	if i < 26 {
		return string(rune('a' + i))
	}
	return fmt.Sprintf("%c%d", 'a'+i%26, i/26)
}

func handleIDs(hs []*laboro.Handle) []string {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.ID()
	}
	return ids
}

// drain pops q empty and returns the ids in pop order.
func drain(q laboro.Queue) []string {
	var ids []string
	for h := q.Pop(); h != nil; h = q.Pop() {
		ids = append(ids, h.ID())
	}
	return ids
}

func TestPriorityQueue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		metas  []any    // pushed in this order as a, b, c, …
		remove []string // then removed; ids not pushed must return nil
		want   []string // Snapshot, and then Pop, order
	}{
		{name: "empty", metas: nil, want: nil},
		{name: "one", metas: []any{3}, want: []string{"a"}},
		{name: "higher priority first", metas: []any{1, 5, 3}, want: []string{"b", "c", "a"}},
		{name: "FIFO among equals", metas: []any{4, 4, 4, 4}, want: []string{"a", "b", "c", "d"}},
		{name: "mixed", metas: []any{2, 7, 2, 7, 0, 2}, want: []string{"b", "d", "a", "c", "f", "e"}},
		{name: "non-int Meta counts as 0", metas: []any{-1, nil, 0, "high", 1}, want: []string{"e", "b", "c", "d", "a"}},
		{name: "remove keeps order", metas: []any{3, 3, 1, 3, 2}, remove: []string{"b", "e"}, want: []string{"a", "d", "c"}},
		{name: "remove the next to start", metas: []any{1, 9, 1}, remove: []string{"b"}, want: []string{"a", "c"}},
		{name: "remove the last to start", metas: []any{1, 9, 1}, remove: []string{"c"}, want: []string{"b", "a"}},
		{name: "remove all", metas: []any{1, 2}, remove: []string{"a", "b"}, want: nil},
		{name: "remove absent", metas: []any{1, 2}, remove: []string{"zz", "a", "a"}, want: []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := newHandles(t, tc.metas...)
			q := new(PriorityQueue)
			require.Zero(t, q.Len())
			for i, h := range hs {
				q.Push(h)
				require.Equal(t, i+1, q.Len())
			}
			live := map[string]*laboro.Handle{}
			for _, h := range hs {
				live[h.ID()] = h
			}
			for _, id := range tc.remove {
				if h := live[id]; h != nil {
					require.Same(t, h, q.Remove(id), "Remove(%q)", id)
					delete(live, id)
				} else {
					require.Nil(t, q.Remove(id), "Remove(%q) of an absent id", id)
				}
				require.Equal(t, len(live), q.Len())
			}

			want := tc.want
			if want == nil {
				want = []string{}
			}
			require.Equal(t, want, handleIDs(q.Snapshot()), "Snapshot")
			require.Equal(t, want, handleIDs(q.Snapshot()), "a second Snapshot")
			require.Equal(t, len(want), q.Len(), "Snapshot changed Len")
			require.Equal(t, tc.want, drain(q), "Pop order")
			require.Zero(t, q.Len())
			require.Nil(t, q.Pop(), "Pop when empty")
		})
	}
}

func TestPriorityQueueInterleaved(t *testing.T) {
	h := newHandles(t, 1, 1, 5, 1, 5)
	var q PriorityQueue // the zero value is ready
	require.Nil(t, q.Pop())
	require.Nil(t, q.Remove("a"))
	require.Empty(t, q.Snapshot())

	q.Push(h[0]) // a:1
	q.Push(h[1]) // b:1
	require.Same(t, h[0], q.Pop())
	q.Push(h[2]) // c:5 goes ahead of b
	q.Push(h[3]) // d:1 stays behind b, which came first
	require.Equal(t, []string{"c", "b", "d"}, handleIDs(q.Snapshot()))
	require.Same(t, h[2], q.Pop())
	q.Push(h[4]) // e:5
	require.Same(t, h[1], q.Remove("b"))
	q.Push(h[1]) // b again: now the newest of priority 1
	require.Equal(t, []string{"e", "d", "b"}, handleIDs(q.Snapshot()))
	require.Equal(t, []string{"e", "d", "b"}, drain(&q))
}

// TestPriorityQueueModel checks random pushes, pops and removes against a
// plain slice kept in order by a stable sort.
func TestPriorityQueueModel(t *testing.T) {
	const n = 300
	rng := rand.New(rand.NewPCG(1, 2))
	metas := make([]any, n)
	for i := range metas {
		metas[i] = rng.IntN(5)
	}
	hs := newHandles(t, metas...)
	var q PriorityQueue
	var model []*laboro.Handle // in start order
	insert := func(h *laboro.Handle) {
		model = append(model, h)
		slices.SortStableFunc(model, func(a, b *laboro.Handle) int { return Priority(b.Job()) - Priority(a.Job()) })
	}
	next := 0
	for step := 0; next < n || len(model) > 0; step++ {
		switch op := rng.IntN(10); {
		case op < 5 && next < n:
			q.Push(hs[next])
			insert(hs[next])
			next++
		case op < 8 && len(model) > 0:
			require.Same(t, model[0], q.Pop(), "step %d: Pop", step)
			model = model[1:]
		case len(model) > 0:
			i := rng.IntN(len(model))
			require.Same(t, model[i], q.Remove(model[i].ID()), "step %d: Remove", step)
			model = slices.Delete(model, i, i+1)
		}
		require.Equal(t, len(model), q.Len(), "step %d: Len", step)
		require.Equal(t, handleIDs(model), handleIDs(q.Snapshot()), "step %d: Snapshot", step)
	}
}

// recorder notes the order in which jobs run.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) job(id string, prio int) laboro.Job {
	return laboro.Job{ID: id, Meta: prio, Func: func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ids = append(r.ids, id)
		return nil
	}}
}

func (r *recorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

func queuedIDs(ex *laboro.Executor) []string {
	var ids []string
	for _, j := range ex.Queued() {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestExecutorRunsByPriority runs PriorityQueue in a real Executor: jobs
// queued while it is paused run by priority once it runs one at a time,
// and Stop removes a queued job through the queue.
func TestExecutorRunsByPriority(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New(laboro.WithQueue(new(PriorityQueue)), laboro.WithConcurrency(0),
		laboro.WithPoolSize(2), laboro.WithBufferSize(16), laboro.WithRunner(laboro.FuncRunner{}))
	require.NoError(t, err)
	defer ex.Close()

	var rec recorder
	var hs []*laboro.Handle
	for _, j := range []struct {
		id   string
		prio int
	}{{"low", 0}, {"mid", 5}, {"high", 9}, {"mid2", 5}, {"drop", 7}, {"low2", 0}, {"neg", -3}} {
		h, err := ex.Submit(ctx, rec.job(j.id, j.prio))
		require.NoError(t, err)
		hs = append(hs, h)
	}
	require.Equal(t, []string{"high", "drop", "mid", "mid2", "low", "low2", "neg"}, queuedIDs(ex))
	var first []string
	for _, j := range ex.Peek(3) {
		first = append(first, j.ID)
	}
	require.Equal(t, []string{"high", "drop", "mid"}, first, "the first three of a queue of one's own")

	require.NoError(t, ex.Stop("drop"))
	require.ErrorIs(t, ex.Stop("drop"), laboro.ErrNotFound, "stopped twice")
	require.ErrorIs(t, ex.Stop("nope"), laboro.ErrNotFound)
	want := []string{"high", "mid", "mid2", "low", "low2", "neg"}
	require.Equal(t, want, queuedIDs(ex))
	require.Empty(t, rec.order(), "a job ran at concurrency 0")

	require.NoError(t, ex.SetConcurrency(1))
	for _, h := range hs {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		if h.ID() == "drop" {
			require.Equal(t, laboro.StatusStopped, res.Status)
			require.ErrorIs(t, res.Err, laboro.ErrStopped)
			continue
		}
		require.Equal(t, laboro.StatusSucceeded, res.Status, h.ID())
	}
	require.Equal(t, want, rec.order())
	require.NoError(t, ex.Shutdown(ctx))
}

// TestExecutorPriorityWhileRunning submits while a job runs: a later job
// of higher priority starts before earlier ones of lower priority, and
// Stop cannot reach the running job.
func TestExecutorPriorityWhileRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := laboro.New(laboro.WithQueue(new(PriorityQueue)), laboro.WithConcurrency(1),
		laboro.WithPoolSize(2), laboro.WithRunner(laboro.FuncRunner{}))
	require.NoError(t, err)
	defer ex.Close()

	var rec recorder
	started, release := make(chan struct{}), make(chan struct{})
	first, err := ex.Submit(ctx, laboro.Job{ID: "first", Func: func(ctx context.Context) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	require.NoError(t, err)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first job did not start")
	}

	var hs []*laboro.Handle
	for _, j := range []laboro.Job{rec.job("low", 1), rec.job("later", 1), rec.job("urgent", 8), rec.job("doomed", 8)} {
		h, err := ex.Submit(ctx, j)
		require.NoError(t, err)
		hs = append(hs, h)
	}
	require.Equal(t, []string{"urgent", "doomed", "low", "later"}, queuedIDs(ex))
	require.ErrorIs(t, ex.Stop("first"), laboro.ErrNotFound, "Stop of a running job")
	require.NoError(t, ex.Stop("doomed"))

	close(release)
	res, err := first.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, laboro.StatusSucceeded, res.Status)
	for _, h := range hs {
		_, err := h.Wait(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"urgent", "low", "later"}, rec.order())
	require.NoError(t, ex.Shutdown(ctx))
}

// TestRun checks what the example program prints.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), `
queued, in the order they will start:
  1. page-oncall     priority 9
  2. send-invoices   priority 5
  3. refund-order    priority 5
  4. resize-images   priority 1
  5. rebuild-index   priority 1
  6. nightly-report  priority 0
  7. clean-tmp       priority 0
`)
	require.Contains(t, out.String(), `
  1. page-oncall     priority 9  succeeded
  2. send-invoices   priority 5  succeeded
  3. refund-order    priority 5  succeeded
  4. resize-images   priority 1  succeeded
  5. rebuild-index   priority 1  succeeded
  6. nightly-report  priority 0  succeeded
  -  clean-tmp       priority 0  stopped
`)
}

// TestPriorityQueueConformance checks PriorityQueue against the contract
// every laboro.Queue must keep, alone and inside an Executor.
func TestPriorityQueueConformance(t *testing.T) {
	laborotest.Queue(t, func() laboro.Queue { return new(PriorityQueue) })
}

// TestRunRemote checks that the queue orders the jobs a remote runexp
// runner gets: by priority, first in first out among equals, each run
// there.
func TestRunRemote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, runRemote(ctx, &out))
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), "queued for the runner: deploy, hotfix, test, lint, backup\n")
	require.Regexp(t, `(?s)`+
		`  1\. deploy  priority 9: deploy ran on the runner, pid \d+\n`+
		`  2\. hotfix  priority 9: hotfix ran on the runner, pid \d+\n`+
		`  3\. test    priority 5: test ran on the runner, pid \d+\n`+
		`  4\. lint    priority 1: lint ran on the runner, pid \d+\n`+
		`  5\. backup  priority 0: backup ran on the runner, pid \d+\n`, out.String())
}
