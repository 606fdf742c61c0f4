package link

import (
	"context"
	"sync"

	"go.uber.org/zap"
)

// Pinger asks the master for jobs (section "Pinging" of the rules): it
// pings when the link connects or reconnects; when a job came, it pings
// again at once; when none came, or the ping failed, it pings again after
// Config.Ping; and JobDone pings. At most one ping runs at a time: asked
// to ping while one runs, it pings again as soon as that one ends. It
// pings only while the link is connected and not stopping. Get one with
// Link.NewPinger; its methods are safe for concurrent use.
type Pinger struct {
	l    *Link
	ping func(ctx context.Context) (gotJob bool, err error)

	mu      sync.Mutex
	running bool // a ping is under way
	again   bool // asked to ping while one was under way
	timer   Timer
	gen     uint64 // tells a stale ping timer from the current one
}

// NewPinger returns a Pinger that calls ping to ask the master for a job;
// ping reports whether a job came. ping must not be nil, and must return
// once its context ends (Stop ends it at once: a stopping worker takes
// no job). A worker with no room for another job should have ping answer
// false without asking; JobDone then pings when room is made. If the link
// is connected already, the Pinger pings at once.
func (l *Link) NewPinger(ping func(ctx context.Context) (gotJob bool, err error)) *Pinger {
	p := &Pinger{l: l, ping: ping}
	l.mu.Lock()
	l.pingers = append(l.pingers, p)
	now := l.connected && !l.stopping
	l.mu.Unlock()
	if now {
		p.trigger()
	}
	return p
}

// JobDone tells the Pinger that a job ended, so that it pings for
// another.
func (p *Pinger) JobDone() { p.trigger() }

// trigger pings now, or right after the ping under way.
func (p *Pinger) trigger() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		p.again = true
		return
	}
	p.cancelLocked()
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.connected || l.stopping {
		// The connection, when it comes, pings.
		return
	}
	p.running = l.goLocked(p.loop)
}

// loop pings until no job comes, then schedules the next ping.
func (p *Pinger) loop() {
	for {
		got, err := p.ping(p.l.pingCtx)
		if err != nil {
			got = false
			p.l.log.Warn("transport: ping failed", zap.Error(err))
		}
		p.mu.Lock()
		if got || p.again {
			p.again = false
			if p.canPing() {
				p.mu.Unlock()
				continue
			}
			p.running = false
			p.mu.Unlock()
			return
		}
		p.running = false
		if !p.l.isStopping() {
			p.gen++
			gen := p.gen
			p.timer = p.l.clock.AfterFunc(p.l.cfg.Ping, func() { p.fire(gen) })
		}
		p.mu.Unlock()
		return
	}
}

func (p *Pinger) canPing() bool {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	return p.l.connected && !p.l.stopping
}

func (p *Pinger) fire(gen uint64) {
	p.mu.Lock()
	if gen != p.gen {
		p.mu.Unlock()
		return
	}
	p.timer = nil
	p.mu.Unlock()
	p.trigger()
}

// cancelLocked cancels a scheduled ping.
func (p *Pinger) cancelLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.gen++
}

func (p *Pinger) stopTimer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancelLocked()
}
