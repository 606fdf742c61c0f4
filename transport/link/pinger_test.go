package link

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pings is a scripted ping function: each call takes the next answer
// (none left: no job), and may be held by a gate.
type pings struct {
	mu      sync.Mutex
	n       int
	answers []bool
	errs    map[int]error
	hold    *gate
}

func (p *pings) ping(ctx context.Context) (bool, error) {
	p.mu.Lock()
	i := p.n
	p.n++
	hold := p.hold
	got := i < len(p.answers) && p.answers[i]
	err := p.errs[i]
	p.mu.Unlock()
	if hold != nil {
		if err := hold.wait(ctx); err != nil {
			return false, err
		}
	}
	return got, err
}

func (p *pings) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func waitPings(t *testing.T, p *pings, n int) {
	t.Helper()
	waitFor(t, func() bool { return p.count() >= n }, "%d pings, have %d", n, p.count())
	stays(t, func() bool { return p.count() == n }, "exactly %d pings, have %d", n, p.count())
}

// Rule "Pinging": when the server connects, ping for a job.
func TestPing_OnConnect(t *testing.T) {
	s := newSetup(t, Config{})
	p := &pings{}
	s.l.NewPinger(p.ping)
	stays(t, func() bool { return p.count() == 0 }, "no ping before connecting")
	s.connected(t)
	waitPings(t, p, 1)

	// A Pinger made on a connected link pings at once.
	q := &pings{}
	s.l.NewPinger(q.ping)
	waitPings(t, q, 1)
}

// Rule "Pinging": if a job is received, ping for another at once.
func TestPing_JobReceivedPingsAgainAtOnce(t *testing.T) {
	s := newSetup(t, Config{})
	p := &pings{answers: []bool{true, true, false}}
	s.l.NewPinger(p.ping)
	s.connected(t)
	waitPings(t, p, 3)
	waitPending(t, s.clock, 1)
}

// Rule "Pinging": if no job is received (or the ping fails), the next
// ping comes after the interval, not before.
func TestPing_NoJobPingsAfterInterval(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  time.Duration
		want time.Duration
	}{{"default", 0, 30 * time.Second}, {"configured", 5 * time.Second, 5 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, Config{Ping: tc.cfg})
			p := &pings{errs: map[int]error{1: errDown}}
			s.l.NewPinger(p.ping)
			s.connected(t)
			waitPings(t, p, 1)
			waitPending(t, s.clock, 1)
			assert.Equal(t, []time.Duration{tc.want}, s.clock.Pending())
			s.clock.Advance(tc.want - time.Nanosecond)
			waitPings(t, p, 1)
			s.clock.Advance(time.Nanosecond)
			waitPings(t, p, 2) // this one fails
			waitPending(t, s.clock, 1)
			s.clock.Advance(tc.want)
			waitPings(t, p, 3)
			assert.True(t, s.l.Connected(), "a failed ping is not a disconnection")
		})
	}
}

// Rule "Pinging": when a job completes, ping for another; this cancels
// the scheduled ping.
func TestPing_JobDonePings(t *testing.T) {
	s := newSetup(t, Config{})
	p := &pings{}
	pinger := s.l.NewPinger(p.ping)
	s.connected(t)
	waitPings(t, p, 1)
	waitPending(t, s.clock, 1)
	pinger.JobDone()
	waitPings(t, p, 2)
	waitPending(t, s.clock, 1)
	assert.Len(t, s.clock.Pending(), 1, "one scheduled ping, not two")
}

// A trigger while a ping is under way makes another ping right after it,
// never two at once.
func TestPing_JobDoneDuringPingPingsAfterIt(t *testing.T) {
	s := newSetup(t, Config{})
	g := newGate()
	p := &pings{hold: g}
	pinger := s.l.NewPinger(p.ping)
	s.connected(t)
	waitPings(t, p, 1)
	pinger.JobDone()
	pinger.JobDone()
	waitPings(t, p, 1)
	p.mu.Lock()
	p.hold = nil
	p.mu.Unlock()
	g.open()
	waitPings(t, p, 2)
}

// Rule "Pinging": when the server reconnects, ping for a job; none while
// disconnected.
func TestPing_OnReconnect(t *testing.T) {
	s := newSetup(t, Config{})
	p := &pings{}
	pinger := s.l.NewPinger(p.ping)
	s.connected(t)
	waitPings(t, p, 1)

	s.m.setSend(func(context.Context, Message) error { return errDown })
	s.m.setHello(func(context.Context, bool) error { return errDown })
	require.NoError(t, s.l.Send(ctx(t), msg("a", "1")))
	waitFor(t, func() bool { return len(s.clock.Pending()) == 2 }, "reconnect and ping timers")
	pinger.JobDone()
	s.clock.Advance(30 * time.Second) // the ping timer, and reconnect attempts, all failing
	waitPings(t, p, 1)

	s.m.setSend(nil)
	s.m.setHello(nil)
	s.clock.Advance(10 * time.Second)
	waitFor(t, s.l.Connected, "reconnected")
	waitPings(t, p, 2)
}

// Stop ends a ping under way and schedules no more.
func TestPing_StopEndsPinging(t *testing.T) {
	s := newSetup(t, Config{})
	g := newGate()
	p := &pings{hold: g, answers: []bool{true, true}}
	pinger := s.l.NewPinger(p.ping)
	s.connected(t)
	waitPings(t, p, 1)
	require.NoError(t, s.l.Stop(ctx(t)))
	waitPings(t, p, 1)
	pinger.JobDone()
	s.l.NewPinger(p.ping)
	waitPings(t, p, 1)
	assert.Empty(t, s.clock.Pending())
}
