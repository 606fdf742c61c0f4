package link

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sendsOf returns the events of key's sends.
func (f *fakeMaster) sendsOf(key string) []string {
	var out []string
	for _, e := range f.Events() {
		if len(e) > 5 && e[:5] == "send " && len(e) > 5+len(key) && e[5:5+len(key)+1] == key+" " {
			out = append(out, e)
		}
	}
	return out
}

// Rule "Job progress": if job complete, do nothing.
func TestJobProgress_AfterCompleteDoesNothing(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	j := s.l.Job("a")
	j.Complete([]byte("done"))
	j.Progress([]byte("late"))
	stays(t, func() bool { return len(s.m.sendsOf("a")) == 1 }, "only the completion")
	assert.Equal(t, []string{"send a final done"}, s.m.sendsOf("a"))
	assert.Empty(t, s.clock.Pending())
}

// Rule "Job progress": send, then schedule sending progress again after
// the interval, with the latest body; meanwhile (sending or queued), a
// progress does nothing but replace that body.
func TestJobProgress_ResentAfterIntervalWithLatestBody(t *testing.T) {
	s := newSetup(t, Config{Progress: 4 * time.Second})
	s.connected(t)
	g := newGate()
	s.m.setSend(func(ctx context.Context, m Message) error { return g.wait(ctx) })
	j := s.l.Job("a")
	j.Progress([]byte("1"))
	s.m.waitEvent(t, "send a 1")
	j.Progress([]byte("2")) // sending: nothing
	g.open()
	waitPending(t, s.clock, 1) // scheduled once the send ended
	assert.Equal(t, []time.Duration{4 * time.Second}, s.clock.Pending())
	j.Progress([]byte("3")) // queued: nothing
	stays(t, func() bool { return len(s.m.sendsOf("a")) == 1 }, "nothing before the interval")
	s.clock.Advance(4*time.Second - time.Nanosecond)
	stays(t, func() bool { return len(s.m.sendsOf("a")) == 1 }, "nothing before the interval")
	s.clock.Advance(time.Nanosecond)
	s.m.waitEvent(t, "send a 3")
	waitPending(t, s.clock, 1)
	s.clock.Advance(4 * time.Second) // again, unchanged
	waitFor(t, func() bool { return len(s.m.sendsOf("a")) == 3 }, "a third progress")
	assert.Equal(t, []string{"send a 1", "send a 3", "send a 3"}, s.m.sendsOf("a"))
	waitPending(t, s.clock, 1)
	j.Complete([]byte("end"))
	assert.Equal(t, []string{"send a 1", "send a 3", "send a 3", "send a final end"}, s.m.sendsOf("a"))
}

// The default progress interval is 10 s.
func TestJobProgress_DefaultInterval(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	s.l.Job("a").Progress([]byte("1"))
	waitPending(t, s.clock, 1)
	assert.Equal(t, []time.Duration{10 * time.Second}, s.clock.Pending())
}

// Rule "Job completion": no further progress; a queued progress is
// cancelled.
func TestJobCompletion_CancelsQueuedProgress(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	j := s.l.Job("a")
	j.Progress([]byte("1"))
	waitPending(t, s.clock, 1)
	j.Progress([]byte("2")) // queued
	j.Complete([]byte("done"))
	assert.Empty(t, s.clock.Pending(), "the queued progress is cancelled")
	s.clock.Advance(time.Minute)
	j.Progress([]byte("3"))
	stays(t, func() bool { return len(s.m.sendsOf("a")) == 2 }, "no progress after the completion")
	assert.Equal(t, []string{"send a 1", "send a final done"}, s.m.sendsOf("a"))
}

// An abandoned job sends nothing more, not even a completion: its queued
// progress is cancelled, and its key begins a new stream.
func TestJobAbandon(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	j := s.l.Job("a")
	j.Progress([]byte("1"))
	waitPending(t, s.clock, 1)
	j.Progress([]byte("2")) // queued
	j.Abandon()
	assert.Empty(t, s.clock.Pending(), "the queued progress is cancelled")
	s.clock.Advance(time.Minute)
	j.Progress([]byte("3"))
	j.Complete([]byte("done"))
	stays(t, func() bool { return len(s.m.sendsOf("a")) == 1 }, "nothing after the abandon")
	assert.Equal(t, []string{"send a 1"}, s.m.sendsOf("a"))
	assert.NotSame(t, j, s.l.Job("a"))
}

// Rule "Job completion": if a progress is being sent, wait until it ends,
// then send the completion.
func TestJobCompletion_WaitsForProgressInFlight(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	g := newGate()
	s.m.setSend(func(ctx context.Context, m Message) error {
		if !m.Final {
			return g.wait(ctx)
		}
		return nil
	})
	j := s.l.Job("a")
	j.Progress([]byte("1"))
	s.m.waitEvent(t, "send a 1")
	completed := async(func() { j.Complete([]byte("done")) })
	stays(t, func() bool { return !isClosed(completed) && len(s.m.sendsOf("a")) == 1 }, "the completion waits")
	g.open()
	<-completed
	assert.Equal(t, []string{"send a 1", "send a final done"}, s.m.sendsOf("a"))
	assert.Equal(t, "a", s.m.Sent()[0].Key)
	assert.False(t, s.m.Sent()[0].Final, "the progress ended first")
	assert.Empty(t, s.clock.Pending(), "no progress scheduled after the completion")
}

// Section "Job": one job's messages are sent one by one, in order, while
// different jobs' sends overlap.
func TestJob_OrderKeptWhileJobsOverlap(t *testing.T) {
	s := newSetup(t, Config{Progress: time.Second})
	s.connected(t)
	var mu sync.Mutex
	flight := map[string]int{}
	var overlap bool
	s.m.setSend(func(ctx context.Context, m Message) error {
		mu.Lock()
		flight[m.Key]++
		if flight[m.Key] > 1 {
			mu.Unlock()
			return fmt.Errorf("two sends of %s at once", m.Key)
		}
		if len(flight) > 1 {
			overlap = true
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // give the other jobs time to overlap
		mu.Lock()
		if flight[m.Key]--; flight[m.Key] == 0 {
			delete(flight, m.Key)
		}
		mu.Unlock()
		return nil
	})
	const jobs, steps = 4, 5
	var wg sync.WaitGroup
	for i := range jobs {
		j := s.l.Job(fmt.Sprint("j", i))
		wg.Go(func() {
			for k := range steps {
				j.Progress(fmt.Appendf(nil, "%d", k))
				time.Sleep(time.Millisecond)
			}
			j.Complete([]byte("end"))
		})
	}
	// Keep the progress timers firing meanwhile.
	stop := make(chan struct{})
	ticking := async(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				s.clock.Advance(time.Second)
			}
		}
	})
	wg.Wait()
	close(stop)
	<-ticking
	assert.True(t, s.l.Connected(), "no send failed (none of a job overlapped another of the same job)")
	mu.Lock()
	assert.True(t, overlap, "different jobs' sends overlapped")
	mu.Unlock()
	for i := range jobs {
		sends := s.m.sendsOf(fmt.Sprint("j", i))
		require.NotEmpty(t, sends)
		assert.Equal(t, fmt.Sprintf("send j%d final end", i), sends[len(sends)-1], "the completion comes last")
		last := -1
		for _, e := range sends[:len(sends)-1] {
			var k int
			_, err := fmt.Sscanf(e, fmt.Sprintf("send j%d %%d", i), &k)
			require.NoError(t, err, e)
			assert.GreaterOrEqual(t, k, last, "progress in order")
			last = k
		}
	}
}

// Job returns the same stream for a key until its completion.
func TestJob_SameStreamPerKey(t *testing.T) {
	s := newSetup(t, Config{})
	j := s.l.Job("a")
	assert.Same(t, j, s.l.Job("a"))
	assert.NotSame(t, j, s.l.Job("b"))
	j.Complete(nil)
	assert.NotSame(t, j, s.l.Job("a"))
}

// A job's messages while disconnected go to the cache, the completion
// replacing the progress.
func TestJob_WhileDisconnectedCached(t *testing.T) {
	s := newSetup(t, Config{})
	j := s.l.Job("a")
	j.Progress([]byte("1"))
	waitPending(t, s.clock, 1)
	assert.Equal(t, []string{"a"}, s.l.Cached())
	j.Complete([]byte("done"))
	s.connected(t)
	assert.Equal(t, []string{"hello false", "send a final done", "online"}, s.m.Events())
}
