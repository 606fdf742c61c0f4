package link

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// fakeClock is a deterministic Clock: AfterFunc only registers, and
// Advance runs the functions that fall due, in order of their time (then
// of registration), on the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	when time.Time
	seq  int
	f    func()
	done bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *fakeTimer) bool { return x == t })
	return true
}

// Advance moves the time forward by d, running what falls due (without
// holding the clock's lock, so that a function may schedule another).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		i := -1
		for k, t := range c.timers {
			if t.when.After(end) {
				continue
			}
			if i < 0 || t.when.Before(c.timers[i].when) || t.when.Equal(c.timers[i].when) && t.seq < c.timers[i].seq {
				i = k
			}
		}
		if i < 0 {
			break
		}
		t := c.timers[i]
		c.timers = slices.Delete(c.timers, i, i+1)
		t.done = true
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// Pending returns how far ahead each scheduled function is, soonest first.
func (c *fakeClock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ds []time.Duration
	for _, t := range c.timers {
		ds = append(ds, t.when.Sub(c.now))
	}
	slices.Sort(ds)
	return ds
}

func waitPending(t *testing.T, c *fakeClock, n int) {
	t.Helper()
	waitFor(t, func() bool { return len(c.Pending()) >= n }, "%d timers scheduled", n)
}

// fakeMaster records every call (on entry) and runs the hooks a test sets.
type fakeMaster struct {
	mu      sync.Mutex
	events  []string
	sent    []Message // sends that succeeded, in order of their end
	hello   func(ctx context.Context, reconnect bool) error
	online  func(ctx context.Context) error
	send    func(ctx context.Context, m Message) error
	goodbye func(ctx context.Context) error
	flight  int // sends under way
	maxFly  int
}

var errDown = errors.New("master down")

func (f *fakeMaster) record(e string) {
	f.mu.Lock()
	f.events = append(f.events, e)
	f.mu.Unlock()
}

func (f *fakeMaster) Hello(ctx context.Context, reconnect bool) error {
	f.record(fmt.Sprint("hello ", reconnect))
	f.mu.Lock()
	h := f.hello
	f.mu.Unlock()
	if h != nil {
		return h(ctx, reconnect)
	}
	return nil
}

func (f *fakeMaster) Online(ctx context.Context) error {
	f.record("online")
	f.mu.Lock()
	h := f.online
	f.mu.Unlock()
	if h != nil {
		return h(ctx)
	}
	return nil
}

func (f *fakeMaster) Send(ctx context.Context, m Message) error {
	f.mu.Lock()
	f.events = append(f.events, sendEvent(m))
	f.flight++
	f.maxFly = max(f.maxFly, f.flight)
	h := f.send
	f.mu.Unlock()
	var err error
	if h != nil {
		err = h(ctx, m)
	}
	f.mu.Lock()
	f.flight--
	if err == nil {
		f.sent = append(f.sent, m)
	}
	f.mu.Unlock()
	return err
}

func (f *fakeMaster) Goodbye(ctx context.Context) error {
	f.record("goodbye")
	f.mu.Lock()
	h := f.goodbye
	f.mu.Unlock()
	if h != nil {
		return h(ctx)
	}
	return nil
}

func sendEvent(m Message) string {
	if m.Final {
		return fmt.Sprintf("send %s final %s", m.Key, m.Body)
	}
	return fmt.Sprintf("send %s %s", m.Key, m.Body)
}

func (f *fakeMaster) setHello(h func(ctx context.Context, reconnect bool) error) {
	f.mu.Lock()
	f.hello = h
	f.mu.Unlock()
}

func (f *fakeMaster) setSend(h func(ctx context.Context, m Message) error) {
	f.mu.Lock()
	f.send = h
	f.mu.Unlock()
}

func (f *fakeMaster) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeMaster) Sent() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

func (f *fakeMaster) count(prefix string) int {
	n := 0
	for _, e := range f.Events() {
		if len(e) >= len(prefix) && e[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

func (f *fakeMaster) waitEvent(t *testing.T, e string) {
	t.Helper()
	waitFor(t, func() bool { return slices.Contains(f.Events(), e) }, "event %q; have %q", e, f.Events())
}

// gate blocks the calls that wait on it until it is opened (or their
// context ends).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

// stays checks that cond holds for a while (that something does not
// happen).
func stays(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for range 50 {
		if !cond() {
			t.Fatalf("no longer true: "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

type setup struct {
	dir   string
	clock *fakeClock
	m     *fakeMaster
	l     *Link
}

// newSetup makes a Link on a fake master and clock; it is stopped at the
// end of the test if the test did not.
func newSetup(t *testing.T, cfg Config) *setup {
	t.Helper()
	s := &setup{dir: cfg.CacheDir, clock: newFakeClock(), m: &fakeMaster{}}
	if s.dir == "" {
		s.dir = t.TempDir()
	}
	cfg.CacheDir, cfg.Clock = s.dir, s.clock
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	l, err := New(s.m, cfg)
	require.NoError(t, err)
	s.l = l
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Stop(ctx)
	})
	return s
}

// connected starts the link and waits until it is connected.
func (s *setup) connected(t *testing.T) {
	t.Helper()
	s.l.Start()
	waitFor(t, s.l.Connected, "the link to connect")
}

// files lists the cache directory.
func (s *setup) files(t *testing.T) []string {
	t.Helper()
	des, err := os.ReadDir(s.dir)
	require.NoError(t, err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func msg(key, body string) Message { return Message{Key: key, Body: []byte(body)} }

func final(key, body string) Message { return Message{Key: key, Final: true, Body: []byte(body)} }

// async runs f on a goroutine and returns a channel closed when it ends.
func async(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
