package runexp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/laboro-go/laboro"
)

// holdSettle replaces the pause of settle with one the test ends: each
// pause sends its length on entered and waits for release. The pause is
// entered only once the peer's host has acknowledged the message before.
func holdSettle(t *testing.T) (entered chan time.Duration, release chan struct{}) {
	entered, release = make(chan time.Duration), make(chan struct{})
	settleSleep = func(d time.Duration) {
		entered <- d
		<-release
	}
	t.Cleanup(func() { settleSleep = time.Sleep })
	return entered, release
}

func waitEntered(t *testing.T, entered chan time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-entered:
		return d
	case <-time.After(fakeWait):
		t.Fatal("the next message was not held back")
		return 0
	}
}

// A manager that reads each message with one recv, as the reference one
// does, reads the runner's JES alone: the runner holds its first PETO
// until the manager's host has acknowledged JES and the pause has passed.
// So does it for a PRETA acknowledging an empty job, whose next message
// (here the job's REZULTO) gets no answer in between.
func TestRunnerKeepsUnansweredMessagesApart(t *testing.T) {
	entered, release := holdSettle(t)
	m := newFakeManager(t)
	r := testRunner(t, m)
	r.Pause = time.Hour // only the test's hold ends it
	x := launchRunner(t, r)
	p := m.accept(t)
	p.expect("SALUTON; MI testhost")
	p.say("VERSIO 1.3")
	p.expect("KOMPRENAS")
	p.say("ALIGI __defaulte__")

	assert.Equal(t, time.Hour, waitEntered(t, entered), "the first PETO waits")
	p.expect("JES") // one read: nothing came after it
	release <- struct{}{}
	p.expect("PETO")

	p.say("LABORO empty .sh 0")
	assert.Equal(t, time.Hour, waitEntered(t, entered), "the REZULTO after an empty job's PRETA waits")
	p.expect("PRETA")
	release <- struct{}{}
	status, _ := p.collect("empty")
	assert.Equal(t, "success", status)
	p.finish()
	require.NoError(t, x.wait(t))
}

// The manager keeps its PRETA, which an empty output does not answer,
// apart from the RICEVIS after it, for a runner that reads each message
// with one recv.
func TestManagerKeepsPretaApartFromRicevis(t *testing.T) {
	entered, release := holdSettle(t)
	tm := startManager(t, &Manager{Pause: time.Hour})
	h := tm.submit(t, "quiet", okScript)
	r := join(t, tm.addr, "h1")
	r.take()
	r.say("REZULTO quiet success 0")
	assert.Equal(t, time.Hour, waitEntered(t, entered))
	require.Equal(t, "PRETA", r.hear())
	release <- struct{}{}
	require.Equal(t, "RICEVIS", r.hear())
	res, text := result(t, h)
	assert.Equal(t, laboro.StatusSucceeded, res.Status)
	assert.Empty(t, text)
}

// With a real pause, the runner's JES and first PETO reach a manager that
// is slow to read one after the other: the second only once the first was
// acknowledged, and the pause later.
func TestSettleWaitsForTheAcknowledgementAndThePause(t *testing.T) {
	a, b := codecTCPPair(t)
	c := &conn{rw: a, timeout: 5 * time.Second, pause: 20 * time.Millisecond}
	require.NoError(t, c.write(Message{Kind: KindJes}))
	start := time.Now()
	require.NoError(t, c.write(Message{Kind: KindPeto}))
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "PETO followed JES without the pause")
	buf := make([]byte, 16)
	n, err := b.Read(buf)
	require.NoError(t, err)
	// Both wait in b's buffer by now (b read late): the pause cannot help
	// a peer that reads this late, but the two were sent apart.
	assert.Contains(t, []string{"JES", "JESPETO"}, string(buf[:n]))

	// A read in between answers the first message: no pause.
	paused := 0
	settleSleep = func(time.Duration) { paused++ }
	t.Cleanup(func() { settleSleep = time.Sleep })
	_, err = b.Write([]byte("ATENDI"))
	require.NoError(t, err)
	_, err = c.read(false)
	require.NoError(t, err)
	require.NoError(t, c.write(Message{Kind: KindPeto}))
	assert.Zero(t, paused, "a message after an answer waited")
	require.NoError(t, c.write(Message{Kind: KindFinoAnkau}))
	assert.Equal(t, 1, paused, "two messages in a row did not wait")
}
