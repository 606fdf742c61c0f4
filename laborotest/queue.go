package laborotest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/laboro-go/laboro"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Queue checks a laboro.Queue implementation against the contract of
// laboro.Queue, with fresh queues from newQueue:
//
//   - an empty queue: Len 0, Pop and Remove nil, Snapshot empty;
//   - Snapshot lists every queued job once, in the order Pop then returns
//     them, and changes nothing;
//   - Remove returns the job of that id, and nil for an id not queued;
//   - Push and Remove keep the order of the other queued jobs;
//   - the same through random Push, Pop and Remove against a model;
//   - inside an Executor: Queued follows the queue's order, jobs start in
//     that order, Stop and Cancel remove queued jobs, every job ends once,
//     and no goroutine is left.
//
// The jobs pushed carry an int in Job.Meta (0 to 3), which a priority
// queue may use; the checks hold whatever the policy does with it.
func Queue(t *testing.T, newQueue func() laboro.Queue) {
	t.Helper()
	t.Run("empty", func(t *testing.T) {
		q := newQueue()
		require.Zero(t, q.Len())
		require.Nil(t, q.Pop(), "Pop of an empty queue")
		require.Nil(t, q.Remove("job_1"), "Remove from an empty queue")
		require.Empty(t, q.Snapshot())
	})
	t.Run("snapshot is the pop order", func(t *testing.T) {
		q := newQueue()
		hs := handles(0, 40)
		for i, h := range hs {
			q.Push(h)
			require.Equal(t, i+1, q.Len())
		}
		snap := ids(q.Snapshot())
		require.ElementsMatch(t, ids(hs), snap, "Snapshot lists each queued job once")
		require.Equal(t, snap, ids(q.Snapshot()), "a second Snapshot")
		require.Equal(t, len(hs), q.Len(), "Snapshot changed Len")
		var popped []string
		for h := q.Pop(); h != nil; h = q.Pop() {
			popped = append(popped, h.ID())
			require.Equal(t, len(hs)-len(popped), q.Len())
		}
		require.Equal(t, snap, popped, "Pop returns the jobs in Snapshot's order")
	})
	t.Run("remove", func(t *testing.T) {
		q := newQueue()
		hs := handles(0, 20)
		for _, h := range hs {
			q.Push(h)
		}
		for _, i := range []int{7, 0, 19, 3} {
			before := ids(q.Snapshot())
			require.Same(t, hs[i], q.Remove(hs[i].ID()), "Remove returns the job of that id")
			require.Nil(t, q.Remove(hs[i].ID()), "Remove of an id no longer queued")
			requireOrder(t, without(before, hs[i].ID()), ids(q.Snapshot()), "Remove keeps the others' order")
		}
		require.Nil(t, q.Remove("absent"))
		require.Equal(t, 16, q.Len())
	})
	t.Run("random operations", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 11))
		q := newQueue()
		var model []string // the order Snapshot gave, kept by every operation
		byID := map[string]*laboro.Handle{}
		next := 0
		for step := range 2000 {
			switch op := rng.IntN(10); {
			case op < 5 || len(model) == 0:
				h := handles(next, 1)[0]
				next++
				byID[h.ID()] = h
				q.Push(h)
				snap := ids(q.Snapshot())
				requireOrder(t, model, without(snap, h.ID()), "step %d: Push of %s changed the others' order", step, h.ID())
				model = snap
			case op < 8:
				want := model[0]
				require.Equal(t, want, q.Pop().ID(), "step %d: Pop takes the first of Snapshot", step)
				model = model[1:]
			default:
				id := model[rng.IntN(len(model))]
				require.Same(t, byID[id], q.Remove(id), "step %d: Remove(%s)", step, id)
				model = without(model, id)
			}
			require.Equal(t, len(model), q.Len(), "step %d: Len", step)
		}
	})
	t.Run("in an executor", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		queueInExecutor(t, newQueue())
	})
}

// queueInExecutor runs jobs through an Executor that uses q.
func queueInExecutor(t *testing.T, q laboro.Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu chanMutex = make(chan struct{}, 1)
	var started []string
	ex, err := laboro.New(laboro.WithQueue(q), laboro.WithRunner(laboro.FuncRunner{}),
		laboro.WithConcurrency(0), laboro.WithPoolSize(1), laboro.WithBufferSize(64))
	require.NoError(t, err)
	defer ex.Close()
	var hs []*laboro.Handle
	for i := range 30 {
		h, err := ex.Submit(ctx, laboro.Job{Meta: i % 4, Func: func(context.Context) error {
			mu.lock()
			started = append(started, fmt.Sprint("q", i))
			mu.unlock()
			return nil
		}})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	queued := jobIDs(ex.Queued())
	require.ElementsMatch(t, ids(hs), queued, "Queued lists the submitted jobs")
	require.NoError(t, ex.Stop(queued[3]))
	require.NoError(t, ex.Cancel(queued[10]))
	want := without(without(queued, queued[3]), queued[10])
	requireOrder(t, want, jobIDs(ex.Queued()), "Stop and Cancel keep the others' order")
	require.NoError(t, ex.SetConcurrency(1))
	ends := map[laboro.Status]int{}
	order := map[string]int{}
	for i, h := range hs {
		res, err := h.Wait(ctx)
		require.NoError(t, err)
		ends[res.Status]++
		order[h.ID()] = i
	}
	require.NoError(t, ex.Shutdown(ctx))
	require.Equal(t, map[laboro.Status]int{laboro.StatusSucceeded: 28, laboro.StatusStopped: 2}, ends)
	var wantStarted []string
	for _, id := range want {
		wantStarted = append(wantStarted, fmt.Sprint("q", order[id]))
	}
	requireOrder(t, wantStarted, started, "jobs start in the order Queued showed")
}

// requireOrder fails unless want and got hold the same ids in the same
// order (nil and empty alike).
func requireOrder(t *testing.T, want, got []string, msg string, args ...any) {
	t.Helper()
	if !slices.Equal(want, got) {
		require.Fail(t, fmt.Sprintf(msg, args...), "want %v\n got %v", want, got)
	}
}

type chanMutex chan struct{}

func (m chanMutex) lock()   { m <- struct{}{} }
func (m chanMutex) unlock() { <-m }

// handles returns n Handles for jobs "job_<from+1>" … with Meta 0 to 3.
func handles(from, n int) []*laboro.Handle {
	hs := make([]*laboro.Handle, n)
	for i := range hs {
		k := from + i + 1
		hs[i] = laboro.NewHandle(laboro.Job{ID: fmt.Sprint("job_", k), Meta: (k * 7) % 4})
	}
	return hs
}

func ids(hs []*laboro.Handle) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ID()
	}
	return out
}

func jobIDs(jobs []laboro.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func without(s []string, id string) []string {
	i := slices.Index(s, id)
	if i < 0 {
		return s
	}
	return slices.Concat(s[:i], s[i+1:])
}
