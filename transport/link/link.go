package link

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Master is the far end of a Link, implemented by each protocol's worker
// side. Its methods may be called concurrently (Send with Send, and a
// Pinger's ping with any of them), and must return once ctx is done: the
// Link waits for them when it stops.
//
// Send should return an error only when the message may be delivered
// later: the Link caches it and reconnects, and a message the master
// refuses for good would then be retried after every reconnection. Such a
// refusal is better logged and reported as nil.
type Master interface {
	Hello(ctx context.Context, reconnect bool) error // announce the worker: Connecting, or Reconnecting after a disconnection; an error = not connected
	Online(ctx context.Context) error                // the worker is ready (called after the cache has been replayed)
	Send(ctx context.Context, m Message) error       // deliver one message
	Goodbye(ctx context.Context) error               // Stopping, then Offline: the worker ends (best effort)
}

// Message is one message to the master. The zero Message is valid (its
// key is "").
type Message struct {
	Key   string // what it is about (a job id); in the cache, a later message with the same Key replaces an earlier one
	Final bool   // the job's completion (done/failed/cancelled)
	Body  []byte // opaque to the link
}

// Config configures a Link. CacheDir is required; every other zero field
// takes its default.
type Config struct {
	CacheDir  string        // required; created 0700 if missing
	Reconnect time.Duration // wait before another connection attempt; 0 = 10 s
	Progress  time.Duration // a job's progress is sent again after this; 0 = 10 s
	Ping      time.Duration // ping interval when no job came; 0 = 30 s
	Clock     Clock         // nil = SystemClock()
	Logger    *zap.Logger   // nil = none
	// MaxMessage is the largest Body Send takes (0 = DefaultMaxMessage):
	// a larger one is neither sent nor cached (ErrMessageTooLarge), and a
	// cache file larger than such a message makes is skipped when the
	// cache is read, so that reading it is bounded too.
	MaxMessage int
}

// DefaultMaxMessage is Config.MaxMessage's default.
const DefaultMaxMessage = 16 << 20

// ErrMessageTooLarge is the error of a Send whose Body is over
// Config.MaxMessage.
var ErrMessageTooLarge = errors.New("transport: message over the link's limit")

// The defaults of Config's intervals: the reference's.
const (
	DefaultReconnect = 10 * time.Second
	DefaultProgress  = 10 * time.Second
	DefaultPing      = 30 * time.Second
)

// Link is a worker's link to its master: it connects (and reconnects),
// sends messages when connected and caches them on disk when not, replays
// the cache on connecting, and says goodbye when stopped. Make one with
// New; its methods are safe for concurrent use. A Link is used once:
// Start, then Stop.
type Link struct {
	m     Master
	cfg   Config
	clock Clock
	log   *zap.Logger
	cache *cache

	// life is the context of the Link's own calls to the master (connect,
	// replay, JobStream sends); it ends when Stop ends, or when Stop's
	// context ends first, to cut short what Stop would otherwise wait for.
	life       context.Context
	cancelLife context.CancelFunc
	// pingCtx ends as soon as Stop begins: a stopping worker takes no job.
	pingCtx    context.Context
	cancelPing context.CancelFunc

	mu sync.Mutex
	// changed is closed, and replaced, on every change of the fields
	// below that someone may wait for.
	changed    chan struct{}
	started    bool
	stopping   bool // Stop has begun: no more sends or connection attempts
	closed     bool // Stop is done with goroutines: no more may start
	connecting bool // a connection attempt runs (waiting for sends, Hello, replay, Online)
	connected  bool
	helloed    bool // a Hello has succeeded once: later ones are reconnections
	busy       int  // Sends under way (a master Send or a cache write)
	active     int  // goroutines started by the Link
	timer      Timer
	timerGen   uint64 // tells a stale reconnect timer from the current one
	pingers    []*Pinger
	jobs       map[string]*JobStream
	done       chan struct{}
	stopErr    error
}

// New returns a Link to m, not yet started. It creates cfg.CacheDir if
// needed and reads what the cache holds from an earlier run (one that
// crashed, or stopped while disconnected): those messages are sent on
// connecting.
func New(m Master, cfg Config) (*Link, error) {
	if m == nil {
		return nil, errors.New("transport: no Master")
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("transport: Config.CacheDir is required")
	}
	if cfg.Reconnect < 0 || cfg.Progress < 0 || cfg.Ping < 0 {
		return nil, errors.New("transport: negative interval")
	}
	if cfg.MaxMessage < 0 {
		return nil, errors.New("transport: negative Config.MaxMessage")
	}
	cfg.MaxMessage = cmp.Or(cfg.MaxMessage, DefaultMaxMessage)
	cfg.Reconnect = cmp.Or(cfg.Reconnect, DefaultReconnect)
	cfg.Progress = cmp.Or(cfg.Progress, DefaultProgress)
	cfg.Ping = cmp.Or(cfg.Ping, DefaultPing)
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c, err := openCache(cfg.CacheDir, maxRecord(cfg.MaxMessage), cfg.Clock.Now, cfg.Logger)
	if err != nil {
		return nil, err
	}
	l := &Link{
		m: m, cfg: cfg, clock: cfg.Clock, log: cfg.Logger, cache: c,
		changed: make(chan struct{}),
		jobs:    make(map[string]*JobStream),
		done:    make(chan struct{}),
	}
	l.life, l.cancelLife = context.WithCancel(context.Background())
	l.pingCtx, l.cancelPing = context.WithCancel(l.life)
	if n := c.len(); n > 0 {
		l.log.Info("transport: messages cached by an earlier run", zap.Int("count", n))
	}
	return l, nil
}

// Start connects to the master (rule "Start up") in the background: it
// returns at once. Calling it again, or after Stop, does nothing.
func (l *Link) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return
	}
	l.started = true
	l.connectLocked()
}

// Connected reports whether the link is connected: Hello, the replay of
// the cache and Online have succeeded, and no send has failed since.
func (l *Link) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

// Cached returns the keys in the cache, oldest first, for tests and status
// displays.
func (l *Link) Cached() []string { return l.cache.keys() }

// Done returns a channel closed once Stop has finished.
func (l *Link) Done() <-chan struct{} { return l.done }

// Send sends m to the master, or caches it (rules "Send job message to
// master"): while the link stops, or is disconnected, m goes to the cache;
// while it connects, Send first waits for the attempt to end (or for ctx:
// then m is cached, and the attempt sends it); when connected, m is sent at
// once, concurrently with other Sends. A failed send is cached, and the
// link goes through disconnection: later messages are cached, and it
// reconnects.
//
// Send returns nil when m was sent or cached, and an error only when it
// could be neither (ErrMessageTooLarge for a Body over
// Config.MaxMessage). It sends in the order of its calls only for calls
// that do not overlap: the messages of one job should go through a
// JobStream, or one at a time.
func (l *Link) Send(ctx context.Context, m Message) error {
	if len(m.Body) > l.cfg.MaxMessage {
		return fmt.Errorf("%w: %s: %d bytes, limit %d", ErrMessageTooLarge, m.Key, len(m.Body), l.cfg.MaxMessage)
	}
	l.mu.Lock()
	for l.connecting && !l.stopping {
		if l.waitLocked(ctx, func() bool { return !l.connecting || l.stopping }) != nil {
			break
		}
	}
	direct := l.connected && !l.stopping
	// Counted even when only caching: a connection attempt checks, with
	// busy at zero, that the cache is empty before it declares the link
	// connected, so nothing written meanwhile stays behind.
	l.busy++
	l.mu.Unlock()

	if !direct {
		err := l.cache.put(m)
		l.mu.Lock()
		l.busy--
		l.broadcastLocked()
		l.mu.Unlock()
		if err != nil {
			return fmt.Errorf("transport: %s: not connected, and %w", m.Key, err)
		}
		return nil
	}

	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.life, cancel)
	err := l.m.Send(sctx, m)
	stop()
	cancel()
	if err == nil {
		l.mu.Lock()
		l.busy--
		l.broadcastLocked()
		l.mu.Unlock()
		return nil
	}

	// Disconnected at once, before caching, so that other Sends starting
	// now go to the cache; the reconnection waits for this one (busy).
	l.mu.Lock()
	if l.connected {
		l.connected = false
		l.log.Warn("transport: send failed: disconnected", zap.String("key", m.Key), zap.Error(err))
		l.broadcastLocked()
	}
	l.mu.Unlock()
	cerr := l.cache.put(m)
	l.mu.Lock()
	l.busy--
	l.broadcastLocked()
	l.connectLocked()
	l.mu.Unlock()
	if cerr != nil {
		return fmt.Errorf("transport: %s: not sent (%v), and %w", m.Key, err, cerr)
	}
	return nil
}

// Stop stops the link (rules "Stop server"): from now on messages go to
// the cache and no connection is attempted; it waits for a connection
// attempt and the Sends under way, then says Goodbye if connected, ends
// every goroutine the link started, and closes Done.
//
// If ctx ends first, what Stop waits for is cancelled (those messages are
// cached), there is no Goodbye, and Stop returns ctx's error once the
// goroutines have ended. Otherwise it returns Goodbye's error, if any. A
// second Stop waits for the first and returns its result.
func (l *Link) Stop(ctx context.Context) error {
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		select {
		case <-l.done:
			return l.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.stopping = true
	l.cancelPing()
	l.stopTimerLocked()
	l.broadcastLocked()
	err := l.waitLocked(ctx, func() bool { return !l.connecting && l.busy == 0 })
	if err != nil {
		l.log.Warn("transport: stop: cancelling what is under way", zap.Error(err))
		l.cancelLife()
		l.waitLocked(context.Background(), func() bool { return !l.connecting && l.busy == 0 })
	}
	wasConnected := l.connected
	l.connected = false
	l.broadcastLocked()
	pingers := l.pingers
	jobs := make([]*JobStream, 0, len(l.jobs))
	for _, j := range l.jobs {
		jobs = append(jobs, j)
	}
	l.mu.Unlock()

	for _, p := range pingers {
		p.stopTimer()
	}
	for _, j := range jobs {
		j.stopTimer()
	}
	if wasConnected && err == nil {
		if gerr := l.m.Goodbye(ctx); gerr != nil {
			l.log.Warn("transport: goodbye failed", zap.Error(gerr))
			err = fmt.Errorf("transport: goodbye: %w", gerr)
		}
	}
	l.cancelLife()

	l.mu.Lock()
	l.waitLocked(context.Background(), func() bool { return l.active == 0 })
	l.closed = true
	l.stopErr = err
	l.mu.Unlock()
	close(l.done)
	if n := l.cache.len(); n > 0 {
		l.log.Info("transport: stopped with messages cached", zap.Int("count", n))
	}
	return err
}

// connectLocked begins a connection attempt (rules "Connect to master")
// unless one runs, the link is connected, or it stops.
func (l *Link) connectLocked() {
	if l.stopping || l.connecting || l.connected {
		return
	}
	l.stopTimerLocked()
	l.connecting = true
	l.broadcastLocked()
	l.goLocked(l.runConnect)
}

// stopTimerLocked cancels a scheduled connection attempt; the generation
// makes a timer that fires anyway (Stop came too late) do nothing.
func (l *Link) stopTimerLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.timerGen++
}

// scheduleLocked schedules the next connection attempt after Reconnect.
func (l *Link) scheduleLocked() {
	l.stopTimerLocked()
	gen := l.timerGen
	l.timer = l.clock.AfterFunc(l.cfg.Reconnect, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.timerGen != gen {
			return
		}
		l.timer = nil
		l.connectLocked()
	})
}

// runConnect is one connection attempt: wait for the sends under way,
// Hello, replay the cache, Online. Any failure on the way ends the
// attempt, and the next one comes after Reconnect.
func (l *Link) runConnect() {
	l.mu.Lock()
	l.waitLocked(context.Background(), func() bool { return l.busy == 0 || l.stopping })
	if l.stopping {
		l.connecting = false
		l.broadcastLocked()
		l.mu.Unlock()
		return
	}
	reconnect := l.helloed
	l.mu.Unlock()

	err := l.m.Hello(l.life, reconnect)
	if err == nil {
		l.mu.Lock()
		l.helloed = true
		l.mu.Unlock()
		err = l.finishConnect()
	}
	if err == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.connecting = false
	l.broadcastLocked()
	if l.stopping {
		return
	}
	l.log.Warn("transport: connection attempt failed", zap.Bool("reconnect", reconnect), zap.Duration("retry_in", l.cfg.Reconnect), zap.Error(err))
	l.scheduleLocked()
}

// finishConnect replays the cache, says Online, and declares the link
// connected once, with no Send under way, the cache is empty. Sends wait
// while the link connects, but one that stops waiting (its context, or
// Stop) caches its message meanwhile: such messages are replayed too, or
// they would stay behind and be sent after newer ones of their job. On
// success the Pingers are told, unless the link stops.
func (l *Link) finishConnect() error {
	online := false
	for {
		if err := l.replay(); err != nil {
			return err
		}
		if !online {
			if err := l.m.Online(l.life); err != nil {
				return fmt.Errorf("online: %w", err)
			}
			online = true
		}
		l.mu.Lock()
		l.waitLocked(context.Background(), func() bool { return l.busy == 0 })
		// While stopping, what is cached now waits for the next run.
		if l.stopping || l.cache.len() == 0 {
			break
		}
		l.mu.Unlock()
	}
	l.connecting = false
	l.connected = true
	l.broadcastLocked()
	stopping := l.stopping
	pingers := l.pingers
	l.mu.Unlock()
	l.log.Info("transport: connected")
	if !stopping {
		for _, p := range pingers {
			p.trigger()
		}
	}
	return nil
}

// replay sends every cached message, oldest first, removing each file
// once sent. A failed send ends the attempt; its message stays cached.
func (l *Link) replay() error {
	for _, key := range l.cache.keys() {
		m, seq, ok, err := l.cache.load(key)
		if err != nil {
			l.log.Error("transport: cached message lost", zap.String("key", key), zap.Error(err))
			continue
		}
		if !ok {
			continue
		}
		if err := l.m.Send(l.life, m); err != nil {
			return fmt.Errorf("sending cached %q: %w", key, err)
		}
		l.cache.remove(key, seq)
	}
	return nil
}

// goLocked starts f on a goroutine that Stop waits for; it reports false,
// starting nothing, once Stop no longer waits.
func (l *Link) goLocked(f func()) bool {
	if l.closed {
		return false
	}
	l.active++
	go func() {
		defer func() {
			l.mu.Lock()
			l.active--
			l.broadcastLocked()
			l.mu.Unlock()
		}()
		f()
	}()
	return true
}

// broadcastLocked wakes every waitLocked.
func (l *Link) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// waitLocked waits, with l.mu held on entry and on return, until cond
// holds or ctx ends.
func (l *Link) waitLocked(ctx context.Context, cond func() bool) error {
	for !cond() {
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			l.mu.Lock()
			return ctx.Err()
		}
		l.mu.Lock()
	}
	return nil
}

func (l *Link) isStopping() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopping
}
