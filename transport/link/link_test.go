package link

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// ctx is a test's context for calls that should not block.
func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewValidates(t *testing.T) {
	_, err := New(nil, Config{CacheDir: t.TempDir()})
	assert.Error(t, err)
	_, err = New(&fakeMaster{}, Config{})
	assert.Error(t, err)
	_, err = New(&fakeMaster{}, Config{CacheDir: t.TempDir(), Ping: -time.Second})
	assert.Error(t, err)

	l, err := New(&fakeMaster{}, Config{CacheDir: t.TempDir()})
	require.NoError(t, err)
	assert.Equal(t, DefaultReconnect, l.cfg.Reconnect)
	assert.Equal(t, DefaultProgress, l.cfg.Progress)
	assert.Equal(t, DefaultPing, l.cfg.Ping)
	require.NoError(t, l.Stop(ctx(t)))
}

// Rule "Start up": connect to master.
func TestStartUp_Connects(t *testing.T) {
	s := newSetup(t, Config{})
	assert.False(t, s.l.Connected())
	s.connected(t)
	assert.Equal(t, []string{"hello false", "online"}, s.m.Events())
}

// Rule "Connect to master": if currently connecting to master, do nothing.
func TestConnect_WhileConnectingDoesNothing(t *testing.T) {
	s := newSetup(t, Config{})
	g := newGate()
	s.m.setHello(func(ctx context.Context, _ bool) error { return g.wait(ctx) })
	for range 3 {
		s.l.Start()
	}
	s.m.waitEvent(t, "hello false")
	stays(t, func() bool { return s.m.count("hello") == 1 }, "one Hello")
	g.open()
	waitFor(t, s.l.Connected, "connected")

	// Two sends failing together: one reconnection, not two.
	var ready sync.WaitGroup
	ready.Add(2)
	fail := newGate()
	s.m.setSend(func(ctx context.Context, _ Message) error {
		ready.Done()
		fail.wait(ctx)
		return errDown
	})
	hold := newGate()
	s.m.setHello(func(ctx context.Context, _ bool) error { return hold.wait(ctx) })
	d1 := async(func() { s.l.Send(ctx(t), msg("a", "1")) })
	d2 := async(func() { s.l.Send(ctx(t), msg("b", "1")) })
	ready.Wait()
	fail.open()
	<-d1
	<-d2
	s.m.setSend(nil)
	s.m.waitEvent(t, "hello true")
	stays(t, func() bool { return s.m.count("hello") == 2 }, "a single reconnection")
	hold.open()
	waitFor(t, s.l.Connected, "reconnected")
}

// Rule "Connect to master": if currently stopping server, do nothing.
func TestConnect_WhileStoppingDoesNothing(t *testing.T) {
	t.Run("start after stop", func(t *testing.T) {
		s := newSetup(t, Config{})
		require.NoError(t, s.l.Stop(ctx(t)))
		s.l.Start()
		stays(t, func() bool { return len(s.m.Events()) == 0 }, "no call to the master")
	})
	t.Run("scheduled attempt after stop", func(t *testing.T) {
		s := newSetup(t, Config{})
		s.m.setHello(func(context.Context, bool) error { return errDown })
		s.l.Start()
		waitPending(t, s.clock, 1)
		require.NoError(t, s.l.Stop(ctx(t)))
		assert.Empty(t, s.clock.Pending(), "the scheduled attempt is cancelled")
		s.clock.Advance(time.Hour)
		stays(t, func() bool { return s.m.count("hello") == 1 }, "no attempt after Stop")
	})
}

// Rule "Connect to master": if currently sending messages to master, wait
// until all finished, then connect.
func TestConnect_WaitsForSendsThenConnects(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	slow := newGate()
	var once sync.Once
	s.m.setSend(func(ctx context.Context, m Message) error {
		switch m.Key {
		case "slow":
			return slow.wait(ctx)
		case "bad":
			err := error(nil)
			once.Do(func() { err = errDown }) // only the first time
			return err
		}
		return nil
	})
	done := async(func() { assert.NoError(t, s.l.Send(ctx(t), msg("slow", "1"))) })
	s.m.waitEvent(t, "send slow 1")
	require.NoError(t, s.l.Send(ctx(t), msg("bad", "1")))
	assert.False(t, s.l.Connected())
	stays(t, func() bool { return s.m.count("hello") == 1 }, "no reconnection while a send is under way")
	slow.open()
	<-done
	s.m.waitEvent(t, "online")
	waitFor(t, s.l.Connected, "reconnected")
	assert.Equal(t, []string{"hello false", "online", "send slow 1", "send bad 1", "hello true", "send bad 1", "online"}, s.m.Events())
}

// Rule "Connect to master": if connecting succeeds, send all messages in
// cache (oldest first, each file deleted once sent), then Online.
func TestConnect_SucceedsSendsCacheThenOnline(t *testing.T) {
	s := newSetup(t, Config{})
	for _, m := range []Message{msg("j2", "p"), msg("j1", "p"), final("j3", "done"), msg("j1", "q")} {
		require.NoError(t, s.l.Send(ctx(t), m)) // not started: cached
	}
	assert.Equal(t, []string{"j2", "j3", "j1"}, s.l.Cached())
	assert.Len(t, s.files(t), 3)
	p := s.l.NewPinger(func(context.Context) (bool, error) { s.m.record("ping"); return false, nil })
	_ = p
	s.connected(t)
	s.m.waitEvent(t, "ping")
	assert.Equal(t, []string{"hello false", "send j2 p", "send j3 final done", "send j1 q", "online", "ping"}, s.m.Events())
	assert.Empty(t, s.l.Cached())
	assert.Empty(t, s.files(t))
}

// Rule "Connect to master": if connecting fails, schedule another attempt
// to connect after interval (Config.Reconnect on the Clock, not before).
func TestConnect_FailsSchedulesAnotherAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  time.Duration
		want time.Duration
	}{{"default", 0, 10 * time.Second}, {"configured", 3 * time.Second, 3 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, Config{Reconnect: tc.cfg})
			var fails sync.WaitGroup
			fails.Add(2)
			n := 0
			s.m.setHello(func(context.Context, bool) error {
				n++ // calls are one at a time
				if n <= 2 {
					defer fails.Done()
					return errDown
				}
				return nil
			})
			s.l.Start()
			waitPending(t, s.clock, 1)
			assert.Equal(t, []time.Duration{tc.want}, s.clock.Pending())
			s.clock.Advance(tc.want - time.Nanosecond)
			stays(t, func() bool { return s.m.count("hello") == 1 }, "no attempt before the interval")
			s.clock.Advance(time.Nanosecond)
			fails.Wait()
			waitPending(t, s.clock, 1)
			assert.Equal(t, []string{"hello false", "hello false"}, s.m.Events(), "never connected: not a reconnection")
			s.clock.Advance(tc.want)
			waitFor(t, s.l.Connected, "connected at the third attempt")
			assert.Equal(t, []string{"hello false", "hello false", "hello false", "online"}, s.m.Events())
		})
	}
}

// A failed Online ends the attempt like a failed Hello.
func TestConnect_OnlineFailsSchedulesAnotherAttempt(t *testing.T) {
	s := newSetup(t, Config{})
	s.m.mu.Lock()
	s.m.online = func(context.Context) error { return errDown }
	s.m.mu.Unlock()
	s.l.Start()
	waitPending(t, s.clock, 1)
	assert.False(t, s.l.Connected())
	s.m.mu.Lock()
	s.m.online = nil
	s.m.mu.Unlock()
	s.clock.Advance(10 * time.Second)
	waitFor(t, s.l.Connected, "connected")
	assert.Equal(t, []string{"hello false", "online", "hello true", "online"}, s.m.Events())
}

// Rule "Connect to master": a cached message that cannot be sent is a
// disconnection: it stays cached, no Online, and the link reconnects
// (after Config.Reconnect, see the package documentation).
func TestConnect_ReplayFailureIsDisconnection(t *testing.T) {
	s := newSetup(t, Config{})
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	require.NoError(t, s.l.Send(ctx(t), msg("b", "1")))
	s.m.setSend(func(_ context.Context, m Message) error {
		if m.Key == "b" {
			return errDown
		}
		return nil
	})
	s.l.Start()
	waitPending(t, s.clock, 1)
	assert.False(t, s.l.Connected())
	assert.Equal(t, []string{"b"}, s.l.Cached(), "a was sent and removed, b stays")
	assert.Equal(t, []string{"hello false", "send a 1", "send b 1"}, s.m.Events())
	s.m.setSend(nil)
	s.clock.Advance(10 * time.Second)
	waitFor(t, s.l.Connected, "connected")
	assert.Equal(t, []string{"hello false", "send a 1", "send b 1", "hello true", "send b 1", "online"}, s.m.Events())
	assert.Empty(t, s.files(t))
}

// Hello says Connecting until a Hello has succeeded, then Reconnecting.
func TestConnect_HelloReconnectAfterDisconnection(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	var once sync.Once
	s.m.setSend(func(context.Context, Message) error {
		err := error(nil)
		once.Do(func() { err = errDown }) // the replay right after succeeds
		return err
	})
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	s.m.waitEvent(t, "hello true")
	waitFor(t, s.l.Connected, "reconnected")
	assert.Equal(t, []string{"hello false", "online", "send a 1", "hello true", "send a 1", "online"}, s.m.Events())
}

// Rule "Send job message to master": if server stopping, write message to
// file cache instead.
func TestSend_WhileStoppingCaches(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	g := newGate()
	s.m.setSend(func(ctx context.Context, m Message) error { return g.wait(ctx) })
	inFlight := async(func() { s.l.Send(ctx(t), msg("a", "1")) })
	s.m.waitEvent(t, "send a 1")
	stopped := async(func() { assert.NoError(t, s.l.Stop(ctx(t))) })
	waitFor(t, s.l.isStopping, "stopping")
	require.NoError(t, s.l.Send(ctx(t), msg("b", "1")))
	assert.Equal(t, []string{"b"}, s.l.Cached())
	g.open()
	<-inFlight
	<-stopped
	assert.Equal(t, []string{"hello false", "online", "send a 1", "goodbye"}, s.m.Events())
}

// Rule "Send job message to master": if currently connecting to master,
// wait until finished, before continuing.
func TestSend_WhileConnectingWaits(t *testing.T) {
	s := newSetup(t, Config{})
	g := newGate()
	s.m.setHello(func(ctx context.Context, _ bool) error { return g.wait(ctx) })
	s.l.Start()
	s.m.waitEvent(t, "hello false")
	sent := async(func() { assert.NoError(t, s.l.Send(ctx(t), msg("a", "1"))) })
	stays(t, func() bool { return !isClosed(sent) }, "Send waits for the attempt")
	assert.Empty(t, s.l.Cached())
	g.open()
	<-sent
	assert.Equal(t, []string{"hello false", "online", "send a 1"}, s.m.Events())
	assert.Empty(t, s.l.Cached())
}

// A Send whose context ends while it waits for an attempt caches its
// message, and the attempt sends it before the link is connected.
func TestSend_WhileConnectingContextEndsCaches(t *testing.T) {
	s := newSetup(t, Config{})
	g := newGate()
	s.m.setHello(func(ctx context.Context, _ bool) error { return g.wait(ctx) })
	s.l.Start()
	s.m.waitEvent(t, "hello false")
	c, cancel := context.WithCancel(context.Background())
	sent := async(func() { assert.NoError(t, s.l.Send(c, msg("a", "1"))) })
	stays(t, func() bool { return !isClosed(sent) }, "Send waits for the attempt")
	cancel()
	<-sent
	assert.Equal(t, []string{"a"}, s.l.Cached())
	g.open()
	waitFor(t, s.l.Connected, "connected")
	assert.Equal(t, []string{"hello false", "send a 1", "online"}, s.m.Events())
	assert.Empty(t, s.l.Cached())
}

// Rule "Send job message to master": if connected, send this message
// concurrently with any other messages being sent.
func TestSend_ConnectedSendsConcurrently(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	var both sync.WaitGroup
	both.Add(3)
	s.m.setSend(func(ctx context.Context, m Message) error {
		both.Done()
		both.Wait() // returns only once all three are under way together
		return nil
	})
	var wg sync.WaitGroup
	for _, k := range []string{"a", "b", "c"} {
		wg.Go(func() { assert.NoError(t, s.l.Send(ctx(t), msg(k, "1"))) })
	}
	wg.Wait()
	assert.Equal(t, 3, s.m.maxFly)
	assert.Len(t, s.m.Sent(), 3)
	assert.Empty(t, s.l.Cached())
}

// Rule "Send job message to master": if disconnected from master, write
// message to file cache instead.
func TestSend_WhileDisconnectedCaches(t *testing.T) {
	s := newSetup(t, Config{})
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1"))) // never started
	assert.Equal(t, []string{"a"}, s.l.Cached())

	s.m.setHello(func(context.Context, bool) error { return errDown })
	s.l.Start()
	waitPending(t, s.clock, 1) // the attempt failed
	require.NoError(t, s.l.Send(ctx(t), msg("b", "1")))
	assert.Equal(t, []string{"a", "b"}, s.l.Cached())
	assert.Equal(t, []string{"hello false"}, s.m.Events())
}

// Rules "Send job message to master" (sending fails) and "Disconnected":
// the message is cached, later messages are cached too, and the link
// reconnects.
func TestSend_FailureCachesAndDisconnects(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	s.m.setSend(func(context.Context, Message) error { return errDown })
	s.m.setHello(func(context.Context, bool) error { return errDown })
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")), "cached, so no error")
	assert.False(t, s.l.Connected())
	assert.Equal(t, []string{"a"}, s.l.Cached())
	waitPending(t, s.clock, 1) // the reconnection was tried at once, and failed
	assert.Equal(t, []string{"hello false", "online", "send a 1", "hello true"}, s.m.Events())

	s.m.setSend(nil)
	require.NoError(t, s.l.Send(ctx(t), msg("b", "1")))
	assert.Equal(t, []string{"a", "b"}, s.l.Cached(), "no sends while disconnected")
	assert.Equal(t, 0, s.m.count("send b"))

	s.m.setHello(nil)
	s.clock.Advance(10 * time.Second)
	waitFor(t, s.l.Connected, "reconnected")
	assert.Equal(t, []string{"hello false", "online", "send a 1", "hello true", "hello true", "send a 1", "send b 1", "online"}, s.m.Events())
}

// Send returns an error only when the message can be neither sent nor
// cached.
func TestSend_ErrorWhenNeitherSentNorCached(t *testing.T) {
	s := newSetup(t, Config{})
	require.NoError(t, os.RemoveAll(s.dir))
	require.NoError(t, os.WriteFile(s.dir, nil, 0o600)) // no directory any more
	err := s.l.Send(ctx(t), msg("a", "1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not connected")
	assert.Empty(t, s.l.Cached())
}

// Rule "Stop server": if currently connecting to master, wait until
// finished; then stop (Goodbye, since the attempt connected).
func TestStop_WaitsForConnectionAttempt(t *testing.T) {
	s := newSetup(t, Config{})
	g := newGate()
	s.m.setHello(func(ctx context.Context, _ bool) error { return g.wait(ctx) })
	s.l.Start()
	s.m.waitEvent(t, "hello false")
	stopped := async(func() { assert.NoError(t, s.l.Stop(ctx(t))) })
	stays(t, func() bool { return !isClosed(stopped) }, "Stop waits for the attempt")
	assert.False(t, isClosed(s.l.Done()))
	g.open()
	<-stopped
	<-s.l.Done()
	assert.Equal(t, []string{"hello false", "online", "goodbye"}, s.m.Events())
	assert.False(t, s.l.Connected())
}

// Rule "Stop server": if currently sending messages, wait until finished.
func TestStop_WaitsForSendsInFlight(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	g := newGate()
	s.m.setSend(func(ctx context.Context, m Message) error { return g.wait(ctx) })
	sent := async(func() { assert.NoError(t, s.l.Send(ctx(t), msg("a", "1"))) })
	s.m.waitEvent(t, "send a 1")
	stopped := async(func() { assert.NoError(t, s.l.Stop(ctx(t))) })
	stays(t, func() bool { return !isClosed(stopped) }, "Stop waits for the send")
	g.open()
	<-sent
	<-stopped
	assert.Equal(t, []string{"hello false", "online", "send a 1", "goodbye"}, s.m.Events())
	assert.Len(t, s.m.Sent(), 1)
	assert.Empty(t, s.l.Cached())
}

// Rule "Stop server": prevent any further messages (they are cached) or
// connection attempts.
func TestStop_PreventsFurtherMessagesAndAttempts(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	require.NoError(t, s.l.Stop(ctx(t)))
	<-s.l.Done()
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	j := s.l.Job("b")
	j.Progress([]byte("p"))
	j.Complete([]byte("done"))
	s.l.Job("c").Progress([]byte("p"))
	s.l.Start()
	assert.Equal(t, []string{"hello false", "online", "goodbye"}, s.m.Events())
	assert.Equal(t, []string{"a", "b", "c"}, s.l.Cached())
	assert.Empty(t, s.clock.Pending(), "nothing scheduled after Stop")
	require.NoError(t, s.l.Stop(ctx(t)), "a second Stop returns the first's result")
}

// Goodbye only when connected.
func TestStop_NoGoodbyeWhenDisconnected(t *testing.T) {
	s := newSetup(t, Config{})
	s.m.setHello(func(context.Context, bool) error { return errDown })
	s.l.Start()
	waitPending(t, s.clock, 1)
	require.NoError(t, s.l.Stop(ctx(t)))
	assert.Equal(t, []string{"hello false"}, s.m.Events())
}

// Stop returns Goodbye's error (best effort: the link is stopped anyway).
func TestStop_GoodbyeError(t *testing.T) {
	s := newSetup(t, Config{})
	s.m.goodbye = func(context.Context) error { return errDown }
	s.connected(t)
	err := s.l.Stop(ctx(t))
	assert.ErrorIs(t, err, errDown)
	<-s.l.Done()
	assert.ErrorIs(t, s.l.Stop(ctx(t)), errDown)
}

// If Stop's context ends first, what it waits for is cancelled, its
// messages cached, and there is no Goodbye.
func TestStop_ContextEndsCancelsWhatIsUnderWay(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	s.m.setSend(func(ctx context.Context, m Message) error {
		<-ctx.Done() // a master that never answers
		return ctx.Err()
	})
	sent := async(func() { assert.NoError(t, s.l.Send(context.Background(), msg("a", "1"))) })
	s.m.waitEvent(t, "send a 1")
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := s.l.Stop(c)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	<-sent
	<-s.l.Done()
	assert.Equal(t, []string{"a"}, s.l.Cached())
	assert.Equal(t, 0, s.m.count("goodbye"))
	assert.Equal(t, 1, s.m.count("hello"), "no reconnection while stopping")
}

// The cache survives: a Link whose master is down caches 3 jobs' messages
// (2 for one key: 1 file), is stopped; a new Link on the same directory
// sends them on connecting, before Online, and the directory is empty
// afterwards.
func TestCache_SurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	first := newSetup(t, Config{CacheDir: dir})
	first.m.setHello(func(context.Context, bool) error { return errDown })
	first.l.Start()
	waitPending(t, first.clock, 1)
	for _, m := range []Message{msg("job-1", "10%"), msg("job-2", "50%"), msg("job-1", "20%"), final("job-3", "failed")} {
		require.NoError(t, first.l.Send(ctx(t), m))
	}
	require.NoError(t, first.l.Stop(ctx(t)))
	assert.ElementsMatch(t, []string{"job-1.json", "job-2.json", "job-3.json"}, first.files(t))

	second := newSetup(t, Config{CacheDir: dir})
	// Oldest first, by each key's last message.
	assert.Equal(t, []string{"job-2", "job-1", "job-3"}, second.l.Cached())
	second.connected(t)
	assert.Equal(t, []string{"hello false", "send job-2 50%", "send job-1 20%", "send job-3 final failed", "online"}, second.m.Events())
	assert.Empty(t, second.files(t))
	assert.Empty(t, second.l.Cached())
}

// With real time: a master down for two attempts, reconnect 5 ms.
func TestSystemClock(t *testing.T) {
	m := &fakeMaster{}
	var mu sync.Mutex
	n := 0
	m.setHello(func(context.Context, bool) error {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n <= 2 {
			return errDown
		}
		return nil
	})
	start := time.Now()
	l, err := New(m, Config{CacheDir: t.TempDir(), Reconnect: 5 * time.Millisecond, Logger: zap.NewNop()})
	require.NoError(t, err)
	l.Start()
	waitFor(t, l.Connected, "connected")
	assert.GreaterOrEqual(t, time.Since(start), 10*time.Millisecond)
	assert.WithinDuration(t, time.Now(), SystemClock().Now(), time.Second)
	require.NoError(t, l.Stop(ctx(t)))
	assert.True(t, slices.Equal([]string{"hello false", "hello false", "hello false", "online", "goodbye"}, m.Events()), m.Events())
}

func TestCache_NewReportsUnusableDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := New(&fakeMaster{}, Config{CacheDir: filepath.Join(file, "sub")})
	assert.Error(t, err)
	assert.False(t, errors.Is(err, nil))
}

// Stop while an attempt waits for the sends under way: the attempt is
// given up (no Hello), and there is no Goodbye since the link was not
// connected.
func TestStop_WhileAttemptWaitsForSends(t *testing.T) {
	s := newSetup(t, Config{})
	s.connected(t)
	slow := newGate()
	s.m.setSend(func(ctx context.Context, m Message) error {
		if m.Key == "slow" {
			return slow.wait(ctx)
		}
		return errDown
	})
	sent := async(func() { assert.NoError(t, s.l.Send(ctx(t), msg("slow", "1"))) })
	s.m.waitEvent(t, "send slow 1")
	require.NoError(t, s.l.Send(ctx(t), msg("bad", "1"))) // disconnects; the attempt waits for "slow"
	stopped := async(func() { assert.NoError(t, s.l.Stop(ctx(t))) })
	stays(t, func() bool { return !isClosed(stopped) }, "Stop waits for the send")
	slow.open()
	<-sent
	<-stopped
	assert.Equal(t, []string{"hello false", "online", "send slow 1", "send bad 1"}, s.m.Events())
	assert.Equal(t, []string{"bad"}, s.l.Cached())
}

// A message cached (while stopping) during the replay of its key's older
// message is not deleted with it: it waits for the next run.
func TestStop_DuringReplayKeepsNewerMessage(t *testing.T) {
	dir := t.TempDir()
	s := newSetup(t, Config{CacheDir: dir})
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	g := newGate()
	s.m.setSend(func(ctx context.Context, m Message) error { return g.wait(ctx) })
	s.l.Start()
	s.m.waitEvent(t, "send a 1")
	stopped := async(func() { assert.NoError(t, s.l.Stop(ctx(t))) })
	waitFor(t, s.l.isStopping, "stopping")
	require.NoError(t, s.l.Send(ctx(t), final("a", "2")))
	g.open()
	<-stopped
	assert.Equal(t, []string{"hello false", "send a 1", "online", "goodbye"}, s.m.Events(), "the attempt ran to its end")
	assert.Equal(t, []string{"a"}, s.l.Cached())

	again := newSetup(t, Config{CacheDir: dir})
	again.connected(t)
	assert.Equal(t, []string{"hello false", "send a final 2", "online"}, again.m.Events())
}
